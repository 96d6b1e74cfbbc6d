// Package dashboard serves `kubectl turnstile dashboard`: a live web page of every lock key, its
// holder and queue, the freezes and the recent deadlocks, expiries and force-unlocks, fed by
// watches made with the user's own credentials and pushed to the page as server-sent events.
// Its actions (release, force-unlock, freeze, thaw) are plain API calls as that user, so RBAC
// and admission decide exactly as they do for kubectl. Like `kubectl proxy`, it listens on
// loopback; like Jupyter, every request needs the random token of the run.
//
// The pure part, Build, turns API objects into the page's rows and is tested by tables; the
// page itself (static/) is plain HTML, CSS and JavaScript, embedded, with no build step.
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

//go:embed static
var staticFiles embed.FS

// keepalive is how often an idle event stream gets a comment line, so proxies and the browser
// keep it open; nothing is polled.
const keepalive = 20 * time.Second

// Options configure a Server.
type Options struct {
	// Token is the run's secret; every request but the static files must carry it.
	Token string
	// Loopback is true when the server listens on loopback only (then Host must be loopback).
	Loopback bool
	// DefaultNamespace is the kubeconfig's namespace, selected when the page opens.
	DefaultNamespace string
	// AgingStep is the manager's --aging-step, to age waiters the controller has not placed yet.
	AgingStep time.Duration
	// Clock is the server's clock (default: the real one).
	Clock clock.PassiveClock
}

// Server is the dashboard's HTTP handler.
type Server struct {
	opts   Options
	client ctrlclient.WithWatch
	hub    *hub
	guard  guard
	me     identity
	mux    *http.ServeMux
}

// identity is who the API server says the user is.
type identity struct {
	User   string   `json:"user"`
	Groups []string `json:"groups"`
	// Problem is set when the API server would not say (SelfSubjectReview refused).
	Problem string `json:"problem,omitempty"`
}

// New starts the cluster-wide watches with c (the user's client) and returns the handler. The
// watches stop when ctx ends.
func New(ctx context.Context, c ctrlclient.WithWatch, opts Options) *Server {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	s := &Server{opts: opts, client: c, guard: guard{token: opts.Token, loopback: opts.Loopback}, mux: http.NewServeMux()}
	s.me = whoAmI(ctx, c)
	s.hub = newHub(ctx, c, opts)

	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /{$}", s.index)
	s.mux.HandleFunc("GET /api/stream", s.stream)
	s.mux.HandleFunc("POST /api/release", s.action(release))
	s.mux.HandleFunc("POST /api/force-unlock", s.action(forceUnlock))
	s.mux.HandleFunc("POST /api/freeze", s.action(func(ctx context.Context, c ctrlclient.Client, a actionRequest) (string, error) {
		return freeze(ctx, c, a, s.opts.Clock.Now())
	}))
	s.mux.HandleFunc("POST /api/thaw", s.action(thaw))
	return s
}

func whoAmI(ctx context.Context, c ctrlclient.Client) identity {
	r := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, r); err != nil {
		return identity{Problem: "The API server would not say who you are (SelfSubjectReview): " + err.Error()}
	}
	return identity{User: r.Status.UserInfo.Username, Groups: r.Status.UserInfo.Groups}
}

// User is who the API server says the dashboard acts as ("" when it would not say).
func (s *Server) User() string { return s.me.User }

// ServeHTTP checks the Host header and the token, then serves the page, its files, the event
// stream and the actions.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	if !s.guard.hostAllowed(r) {
		http.Error(w, "the dashboard answers only to a loopback host name (127.0.0.1, [::1] or localhost)", http.StatusMisdirectedRequest)
		return
	}
	// The static files hold nothing secret, and the page loads them without the token.
	if r.Method == http.MethodGet && len(r.URL.Path) > len("/static/") && r.URL.Path[:len("/static/")] == "/static/" {
		s.mux.ServeHTTP(w, r)
		return
	}
	if !s.guard.tokenValid(r) {
		http.Error(w, "this dashboard needs the token of its run: open the URL that `kubectl turnstile dashboard` printed, "+
			"with its ?token=...", http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodGet && !originAllowed(r) {
		http.Error(w, "refused: an action must come from the dashboard's own page (Origin "+
			"does not match this server)", http.StatusForbidden)
		return
	}
	s.mux.ServeHTTP(w, r)
}

func (s *Server) index(w http.ResponseWriter, _ *http.Request) {
	page, err := staticFiles.ReadFile("static/index.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(page)
}

// hello is the first message of every stream.
type hello struct {
	Now   time.Time `json:"now"`
	Me    identity  `json:"me"`
	Aging string    `json:"agingStep"`
}

// stream is the page's event stream for the namespace in ?ns= ("" for all; absent for the
// kubeconfig's namespace).
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ns := s.opts.DefaultNamespace
	if q := r.URL.Query(); q.Has("ns") {
		ns = q.Get("ns")
	}
	ctx := r.Context()
	sc, sub, view, err := s.hub.subscribe(ctx, ns)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer s.hub.unsubscribe(sc, sub)
	nsMsg, fleetMsg := s.hub.cluster.subscribe(sub)
	defer s.hub.cluster.unsubscribe(sub)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	for _, m := range [][]byte{frame(msgHello, hello{Now: s.opts.Clock.Now(), Me: s.me, Aging: s.opts.AgingStep.String()}), nsMsg, fleetMsg, view} {
		if m == nil {
			continue
		}
		if _, err := w.Write(m); err != nil {
			return
		}
	}
	flusher.Flush()
	tick := time.NewTicker(keepalive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sub.gone:
			return
		case <-sc.ctx.Done():
			return
		case m := <-sub.ch:
			if _, err := w.Write(m); err != nil {
				return
			}
			// Whatever else is queued goes in the same flush.
			for n := len(sub.ch); n > 0; n-- {
				if _, err := w.Write(<-sub.ch); err != nil {
					return
				}
			}
			flusher.Flush()
		case <-tick.C:
			if _, err := w.Write([]byte(": keepalive\n\n")); err != nil {
				return
			}
			flusher.Flush()
		}
	}
}

// actionResult is an action's answer to the page: a message, or the API server's error as it
// gave it.
type actionResult struct {
	OK      bool   `json:"ok"`
	Message string `json:"message"`
	// Reason and Code are the API server's (e.g. Forbidden, 403) when it refused.
	Reason string `json:"reason,omitempty"`
	Code   int32  `json:"code,omitempty"`
}

// maxActionBody bounds an action's JSON body.
const maxActionBody = 64 << 10

func (s *Server) action(do func(context.Context, ctrlclient.Client, actionRequest) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		var a actionRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxActionBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&a); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(actionResult{Message: "bad request: " + err.Error()})
			return
		}
		msg, err := do(r.Context(), s.client, a)
		if err == nil {
			_ = json.NewEncoder(w).Encode(actionResult{OK: true, Message: msg})
			return
		}
		res := actionResult{Message: err.Error()}
		code := http.StatusBadGateway
		var status apierrors.APIStatus
		switch {
		case errors.Is(err, errBadRequest):
			code = http.StatusBadRequest
		case errors.As(err, &status):
			st := status.Status()
			res.Reason, res.Code = string(st.Reason), st.Code
			if st.Code >= 400 && st.Code < 600 {
				code = int(st.Code)
			}
		}
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(res)
	}
}

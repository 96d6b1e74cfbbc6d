// Package metricsauth guards the manager's metrics endpoint as kube-rbac-proxy and
// controller-runtime's filters.WithAuthenticationAndAuthorization do: a request must carry a
// bearer token that the API server authenticates (a TokenReview) for a user it allows to get
// the path (a SubjectAccessReview of the non-resource URL). Answers are kept a while, as
// theirs are (an authentication a minute; an allow five minutes, a deny 30 seconds), so a
// scrape every 15 seconds costs the API server about two reviews a minute.
//
// It is not controller-runtime's filter because that one links k8s.io/apiserver's
// authenticator and authorizer factories, and through them CEL, gRPC and OpenTelemetry: 20 MB
// of the manager's 55 MB of code and read-only data. A container is charged for the pages of
// its binary that it reads, and this manager's cache is sized in its memory limit
// (docs/performance.md).
package metricsauth

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// How long answers are kept: those of k8s.io/apiserver's delegating authenticator and
// authorizer as controller-runtime configures them.
const (
	authnTTL = time.Minute
	allowTTL = 5 * time.Minute
	denyTTL  = 30 * time.Second
	// maxKept bounds each cache: a scraper uses one token, an attacker many.
	maxKept = 1024
)

// backoff retries a review that failed for a reason other than its answer: the API server's
// webhook retry backoff (500 ms, ×1.5, 5 steps).
var backoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// Filter is a metricsserver.Options.FilterProvider.
func Filter(cfg *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
	authn, err := authnclient.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	authz, err := authzclient.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	g := &Guard{Tokens: authn.TokenReviews(), Access: authz.SubjectAccessReviews(), Now: time.Now, Backoff: backoff}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { g.serve(log, next, w, req) }), nil
	}, nil
}

// Guard authenticates and authorizes requests with the API server's reviews.
type Guard struct {
	Tokens  authnclient.TokenReviewInterface
	Access  authzclient.SubjectAccessReviewInterface
	Now     func() time.Time
	Backoff wait.Backoff

	mu     sync.Mutex
	users  map[[32]byte]kept[*authnv1.UserInfo] // by the token's hash; nil user: not authenticated
	access map[[32]byte]kept[bool]              // by the hash of the user, verb and path
}

type kept[T any] struct {
	v     T
	until time.Time
}

func (g *Guard) serve(log logr.Logger, next http.Handler, w http.ResponseWriter, req *http.Request) {
	ctx := req.Context()
	token, ok := bearer(req)
	if !ok {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	user, err := g.authenticate(ctx, token)
	if err != nil {
		log.Error(err, "Authentication failed")
		http.Error(w, "Authentication failed", http.StatusInternalServerError)
		return
	}
	// guard:metrics-authenticates
	if user == nil {
		log.V(4).Info("Authentication failed")
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	verb := strings.ToLower(req.Method)
	allowed, err := g.authorize(ctx, user, verb, req.URL.Path)
	if err != nil {
		msg := fmt.Sprintf("Authorization for user %s failed", user.Username)
		log.Error(err, msg)
		http.Error(w, msg, http.StatusInternalServerError)
		return
	}
	// guard:metrics-authorizes
	if !allowed {
		msg := fmt.Sprintf("Authorization denied for user %s", user.Username)
		log.V(4).Info(msg)
		http.Error(w, msg, http.StatusForbidden)
		return
	}
	next.ServeHTTP(w, req)
}

// bearer is the request's bearer token, read as k8s.io/apiserver's bearer token authenticator
// reads it: "Bearer <token>", the scheme in any case, one space.
func bearer(req *http.Request) (string, bool) {
	parts := strings.SplitN(strings.TrimSpace(req.Header.Get("Authorization")), " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "bearer") || parts[1] == "" {
		return "", false
	}
	return parts[1], true
}

// authenticate is the user the token authenticates as, nil when it does not.
func (g *Guard) authenticate(ctx context.Context, token string) (*authnv1.UserInfo, error) {
	k := sha256.Sum256([]byte(token))
	if u, ok := lookup(g, g.users, k); ok {
		return u, nil
	}
	var res *authnv1.TokenReview
	err := g.retry(ctx, func() (err error) {
		res, err = g.Tokens.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, err
	}
	// A token the API server does not know is answered with an error in the review's status;
	// k8s.io/apiserver's authenticator turns it into a 500, this one into the 401 it is.
	var u *authnv1.UserInfo
	if res.Status.Authenticated && res.Status.Error == "" {
		u = &res.Status.User
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.users = keep(g, g.users, k, u, authnTTL)
	return u, nil
}

// accessKey is what an answer on access is kept under: the hash of everything the
// SubjectAccessReview says, written so that two reviews share a key exactly when they say the
// same. Each string is written with its length first, so no two lists of strings run together
// alike. Extra is a map, read in Go's random order: its keys are written sorted, or one user
// would be kept under a new key on most scrapes (a bound ServiceAccount token carries three to
// five). Each key's values keep their order, as they are an ordered list in the review: an
// authorizer (a webhook) may read them in order, so two orders are two questions. Groups keep
// theirs for the same reason.
func accessKey(user *authnv1.UserInfo, verb, path string) [32]byte {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	write := func(s string) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	count := func(c int) { h.Write(n[:binary.PutUvarint(n[:], uint64(c))]) }
	for _, s := range []string{user.Username, user.UID, verb, path} {
		write(s)
	}
	count(len(user.Groups))
	for _, s := range user.Groups {
		write(s)
	}
	// guard:metrics-key-canonical
	names := slices.Sorted(maps.Keys(user.Extra))
	count(len(names))
	for _, name := range names {
		write(name)
		count(len(user.Extra[name]))
		for _, v := range user.Extra[name] {
			write(v)
		}
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// authorize reports whether user may use verb on the non-resource path.
func (g *Guard) authorize(ctx context.Context, user *authnv1.UserInfo, verb, path string) (bool, error) {
	k := accessKey(user, verb, path)
	if a, ok := lookup(g, g.access, k); ok {
		return a, nil
	}
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
	}}
	if len(user.Extra) > 0 {
		sar.Spec.Extra = map[string]authzv1.ExtraValue{}
		for name, vals := range user.Extra {
			sar.Spec.Extra[name] = authzv1.ExtraValue(vals)
		}
	}
	var res *authzv1.SubjectAccessReview
	err := g.retry(ctx, func() (err error) {
		res, err = g.Access.Create(ctx, sar, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return false, err
	}
	allowed := res.Status.Allowed && !res.Status.Denied
	ttl := denyTTL
	if allowed {
		ttl = allowTTL
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.access = keep(g, g.access, k, allowed, ttl)
	return allowed, nil
}

// retry calls f until it succeeds, fails for good (an answer of the API server's other than
// too many requests or a server error), or the backoff is spent.
func (g *Guard) retry(ctx context.Context, f func() error) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, g.Backoff, func(context.Context) (bool, error) {
		last = f()
		if last == nil {
			return true, nil
		}
		var status apierrors.APIStatus
		if errors.As(last, &status) {
			code := status.Status().Code
			if code != http.StatusTooManyRequests && code < 500 {
				return false, last
			}
		}
		return false, nil
	})
	if wait.Interrupted(err) && last != nil {
		return last
	}
	return err
}

// lookup is what m keeps under k, if it is still fresh.
func lookup[T any](g *Guard, m map[[32]byte]kept[T], k [32]byte) (T, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := m[k]
	if !ok || !g.Now().Before(e.until) {
		var zero T
		return zero, false
	}
	return e.v, true
}

// keep records v under k for ttl, first dropping what has expired when m is full (and, when all
// of it is fresh, all of it: a full cache is a flood of tokens, and reviewing again is safe).
// Called with g.mu held.
func keep[T any](g *Guard, m map[[32]byte]kept[T], k [32]byte, v T, ttl time.Duration) map[[32]byte]kept[T] {
	now := g.Now()
	if m == nil {
		m = map[[32]byte]kept[T]{}
	}
	if len(m) >= maxKept {
		for key, e := range m {
			if !now.Before(e.until) {
				delete(m, key)
			}
		}
		if len(m) >= maxKept {
			clear(m)
		}
	}
	m[k] = kept[T]{v: v, until: now.Add(ttl)}
	return m
}

package faults

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// tracer notes, for diagnosis and not judgment, when each component's requests first succeeded
// after a mark (the heal): the first LIST and WATCH of each resource by each manager replica and
// client, and the first status write. A recovery then splits into the API server's part, the
// informers' reconnection, the grant's write and the client's watch.
type tracer struct {
	clk   clock
	mark  atomic.Int64 // on clk; 0 while nothing is marked
	mu    sync.Mutex
	first map[string]time.Duration // "who VERB resource" -> first success after the mark
	fails []failure
}

type failure struct {
	at   time.Duration
	what string
}

func newTracer(clk clock) *tracer { return &tracer{clk: clk, first: map[string]time.Duration{}} }

// since starts noting successes from at.
func (t *tracer) since(at time.Duration) {
	t.mu.Lock()
	t.first = map[string]time.Duration{}
	t.mu.Unlock()
	t.mark.Store(int64(at))
}

// wrap notes who's requests: the first success of each kind, and the first 200 failures.
func (t *tracer) wrap(who string) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if t.mark.Load() == 0 {
				return resp, err
			}
			now := t.clk.now()
			if now < time.Duration(t.mark.Load()) {
				return resp, err
			}
			k := who + " " + describe(req)
			if err != nil || resp.StatusCode >= 300 {
				what := "error"
				if err == nil {
					what = resp.Status + " " + resp.Header.Get("Retry-After")
				}
				t.mu.Lock()
				if len(t.fails) < 200 {
					t.fails = append(t.fails, failure{now, k + ": " + what})
				}
				t.mu.Unlock()
				return resp, err
			}
			t.mu.Lock()
			if _, ok := t.first[k]; !ok {
				t.first[k] = now
			}
			t.mu.Unlock()
			return resp, err
		})
	}
}

// describe is a request's verb and resource: "WATCH lockrequests", "PATCH lockrequests/status".
func describe(req *http.Request) string {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return req.Method + " " + req.URL.Path
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	if len(parts) == 0 {
		return req.Method + " " + req.URL.Path
	}
	res := parts[0]
	if len(parts) >= 3 {
		res += "/" + parts[2]
	}
	verb := req.Method
	switch {
	case req.Method == http.MethodGet && req.URL.Query().Get("watch") == "true":
		verb = "WATCH"
	case req.Method == http.MethodGet && len(parts) == 1:
		verb = "LIST"
	}
	return verb + " " + res
}

// report is the failures and then every first success after the mark, in time order,
// relative to from.
func (t *tracer) report(from time.Duration) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	type ev struct {
		k  string
		at time.Duration
	}
	var evs []ev
	for k, at := range t.first {
		evs = append(evs, ev{k, at})
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	var b strings.Builder
	for _, f := range t.fails {
		fmt.Fprintf(&b, "    %s failed %s\n", (f.at - from).Round(time.Millisecond), f.what)
	}
	for _, e := range evs {
		fmt.Fprintf(&b, "    %s %s\n", (e.at - from).Round(time.Millisecond), e.k)
	}
	return b.String()
}

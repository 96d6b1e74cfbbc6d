package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
)

type answer struct {
	status     int
	retryAfter string
}

func (a answer) RoundTrip(req *http.Request) (*http.Response, error) {
	h := http.Header{}
	if a.retryAfter != "" {
		h.Set("Retry-After", a.retryAfter)
	}
	return &http.Response{StatusCode: a.status, Header: h, Body: http.NoBody, Request: req}, nil
}

// TestBoundRetryAfter: a 5xx or 429 asking for longer than the bound is told the bound; shorter
// waits, other answers and a Retry-After that is not a number of seconds pass as sent.
func TestBoundRetryAfter(t *testing.T) {
	cases := []struct {
		name  string
		limit time.Duration
		in    answer
		want  string
	}{
		{"a starting API server's 503", time.Second, answer{503, "5"}, "1"},
		{"APF's 429", time.Second, answer{429, "3"}, "1"},
		{"already within the bound", 2 * time.Second, answer{503, "1"}, "1"},
		{"a bound under a second is a second", 100 * time.Millisecond, answer{503, "5"}, "1"},
		{"a bound of 3 s", 3 * time.Second, answer{500, "10"}, "3"},
		{"not an error", time.Second, answer{200, "5"}, "5"},
		{"a 409 is no throttle", time.Second, answer{409, "5"}, "5"},
		{"an HTTP date is left alone", time.Second, answer{503, "Wed, 21 Oct 2015 07:28:00 GMT"}, "Wed, 21 Oct 2015 07:28:00 GMT"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := BoundRetryAfter(&rest.Config{}, tc.limit)
			rt := cfg.WrapTransport(tc.in)
			// A write: a GET answered 503 is tried again (TestBoundRetryAfterAway).
			req, err := http.NewRequest(http.MethodPut, "https://example.invalid/api", http.NoBody)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if diff := cmp.Diff(tc.want, resp.Header.Get("Retry-After")); diff != "" {
				t.Errorf("Retry-After (-want +got):\n%s", diff)
			}
		})
	}
}

// script answers each try with the next of its answers (an error, or a status and body), then
// 200 OK, and counts the tries.
type script struct {
	tries   atomic.Int32
	answers []any // error, or answer with a body
}

type bodyAnswer struct {
	status int
	body   string
}

func (s *script) RoundTrip(req *http.Request) (*http.Response, error) {
	n := int(s.tries.Add(1)) - 1
	if n >= len(s.answers) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
	}
	switch a := s.answers[n].(type) {
	case error:
		return nil, a
	case bodyAnswer:
		return &http.Response{StatusCode: a.status, Header: http.Header{"Retry-After": {"1"}}, Body: io.NopCloser(strings.NewReader(a.body)), Request: req}, nil
	}
	panic("bad answer")
}

// TestBoundRetryAfterAway: a GET that finds the API server away (connection refused, reset,
// EOF) or starting (503, a 429 whose storage is initializing) is tried again by the transport
// until it is answered; a throttle's 429 and a write are handed back at once; a GET whose
// context ends stops trying.
func TestBoundRetryAfterAway(t *testing.T) {
	initializing := bodyAnswer{429, `{"kind":"Status","message":"storage is (re)initializing","reason":"TooManyRequests","code":429}`}
	throttled := bodyAnswer{429, `{"kind":"Status","message":"Too many requests, please try again later.","reason":"TooManyRequests","code":429}`}
	starting := bodyAnswer{503, `{"kind":"Status","code":503}`}
	cases := []struct {
		name       string
		method     string
		answers    []any
		wantTries  int32
		wantStatus int
	}{
		{"a restarting API server, then its watch cache loading", http.MethodGet,
			[]any{syscall.ECONNREFUSED, syscall.ECONNRESET, io.EOF, starting, initializing}, 6, 200},
		{"APF's 429 is a throttle: Retry-After's", http.MethodGet, []any{throttled}, 1, 429},
		{"a write is not sent twice", http.MethodPut, []any{starting}, 1, 503},
		{"a 500 is not a server away", http.MethodGet, []any{bodyAnswer{500, "{}"}}, 1, 500},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{answers: tc.answers}
			rt := BoundRetryAfter(&rest.Config{}, time.Second).WrapTransport(s)
			var body io.Reader
			if tc.method != http.MethodGet {
				body = http.NoBody
			}
			req, err := http.NewRequest(tc.method, "https://example.invalid/api", body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.wantStatus || s.tries.Load() != tc.wantTries {
				t.Errorf("got %d after %d tries, want %d after %d", resp.StatusCode, s.tries.Load(), tc.wantStatus, tc.wantTries)
			}
			if tc.wantStatus == 429 {
				if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), "Too many requests") {
					t.Errorf("the 429's body was not handed on: %q", b)
				}
			}
		})
	}
	t.Run("a GET whose context ends stops trying", func(t *testing.T) {
		s := &script{answers: []any{syscall.ECONNREFUSED, syscall.ECONNREFUSED, syscall.ECONNREFUSED, syscall.ECONNREFUSED, syscall.ECONNREFUSED, syscall.ECONNREFUSED}}
		rt := BoundRetryAfter(&rest.Config{}, time.Second).WrapTransport(s)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://example.invalid/api", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v, want the context's deadline", err)
		}
		if n := s.tries.Load(); n < 2 || n > 4 {
			t.Errorf("%d tries in 60 ms, want 2-4 (25 ms doubling)", n)
		}
	})
	t.Run("a server away past awayFor is handed to client-go", func(t *testing.T) {
		// The plugin's bound: a person typing a command hears "connection refused" after a few
		// seconds, not the manager's 30. With awayFor 0 it is at once, one try.
		s := &script{answers: []any{syscall.ECONNREFUSED, syscall.ECONNREFUSED}}
		rt := BoundRetryAfterAway(&rest.Config{}, time.Second, 0).WrapTransport(s)
		req, err := http.NewRequest(http.MethodGet, "https://example.invalid/api", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || s.tries.Load() != 1 {
			t.Errorf("got %v after %d tries, want connection refused after 1", err, s.tries.Load())
		}
	})
}

package client

import (
	"net/http"
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
			req, err := http.NewRequest(http.MethodGet, "https://example.invalid/api", nil)
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

package client

import (
	"net/http"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
)

// BoundRetryAfter makes every client built from cfg wait at most limit when the API server
// answers 429 or 5xx with a Retry-After longer than that. client-go honours Retry-After as
// sent, and a kube-apiserver that is still starting answers `503 Retry-After: 5` (and 429s
// can ask for more): a runner waiting on a lock, or the manager, would sleep through seconds
// of a server that is back. Retry-After is in whole seconds, so limit is rounded up to at least
// 1 s. It returns cfg, changed in place.
func BoundRetryAfter(cfg *rest.Config, limit time.Duration) *rest.Config {
	secs := max(1, int((limit+time.Second-1)/time.Second))
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return retryAfterBound{rt: rt, secs: secs} })
	return cfg
}

type retryAfterBound struct {
	rt   http.RoundTripper
	secs int
}

func (b retryAfterBound) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.rt.RoundTrip(req)
	if err != nil || resp == nil {
		return resp, err
	}
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500 {
		return resp, nil
	}
	if v := resp.Header.Get("Retry-After"); v != "" {
		if n, perr := strconv.Atoi(v); perr == nil && n > b.secs {
			resp.Header.Set("Retry-After", strconv.Itoa(b.secs))
		}
	}
	return resp, nil
}

package client

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// BoundRetryAfter makes every client built from cfg wait at most limit when the API server
// answers 429 or 5xx with a Retry-After longer than that. client-go honours Retry-After as
// sent, and a kube-apiserver that is still starting answers `503 Retry-After: 5` (and 429s
// can ask for more): a runner waiting on a lock, or the manager, would sleep through seconds
// of a server that is back. Retry-After is in whole seconds, so limit is rounded up to at least
// 1 s. It returns cfg, changed in place.
//
// A GET (get, list, watch: it changes nothing) that finds the API server away or starting is
// also sent again by the transport itself, every awayBackoff, while its context lasts and for
// up to awayLimit, before client-go sees the failure: the connection refused, reset or closed
// before an answer (a server stopping or restarting), a 503 (one starting), or a 429 saying its
// storage is (re)initializing (a watch cache still loading after a restart). client-go waits a
// whole second between such tries (Retry-After is in seconds, and it answers a lost connection
// with an artificial Retry-After: 1), and an informer that sees the failure backs off 0.8 s
// doubling to 30 s (docs/faults.md). A 429 from API Priority and Fairness is a throttle, not a
// server away: it is left to Retry-After.
func BoundRetryAfter(cfg *rest.Config, limit time.Duration) *rest.Config {
	return BoundRetryAfterAway(cfg, limit, awayLimit)
}

// BoundRetryAfterAway is BoundRetryAfter with GETs sent again to a server away or starting for
// at most awayFor (0: not at all). A command a person types wants an answer sooner than a
// controller does: the plugin gives up on a server that refuses connections after a few
// seconds, as kubectl would at once.
func BoundRetryAfterAway(cfg *rest.Config, limit, awayFor time.Duration) *rest.Config {
	secs := max(1, int((limit+time.Second-1)/time.Second))
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return retryAfterBound{rt: rt, secs: secs, awayFor: awayFor}
	})
	return cfg
}

// awayBackoff is how often a GET tries a server that is away or starting: 25 ms doubling to
// 250 ms. awayLimit is how long it keeps trying before it hands client-go the failure.
var (
	awayFirst = 25 * time.Millisecond
	awayCap   = 250 * time.Millisecond
	awayLimit = 30 * time.Second
)

type retryAfterBound struct {
	rt      http.RoundTripper
	secs    int
	awayFor time.Duration
}

func (b retryAfterBound) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.rt.RoundTrip(req)
	// guard:away-retries-writes
	if req.Method == http.MethodGet && req.Body == nil {
		delay, start := awayFirst, time.Now()
		for away(resp, err) && time.Since(start) < b.awayFor {
			if resp != nil {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
				resp.Body.Close()
			}
			select {
			case <-req.Context().Done():
				return nil, req.Context().Err()
			case <-time.After(delay):
			}
			delay = min(2*delay, awayCap)
			resp, err = b.rt.RoundTrip(req)
		}
	}
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

// away says whether an answer means the API server is away or starting: a connection lost or
// refused before any answer, a 503, or a 429 whose storage is (re)initializing. It reads (and
// puts back) the body of a 429 to tell that from a throttle.
func away(resp *http.Response, err error) bool {
	if err != nil {
		return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) || utilnet.IsHTTP2ConnectionLost(err)
	}
	switch resp.StatusCode {
	case http.StatusServiceUnavailable:
		return true
	case http.StatusTooManyRequests:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		// guard:away-retries-throttle
		return bytes.Contains(body, []byte(storageInitializing))
	}
	return false
}

// storageInitializing is what kube-apiserver's watch cache answers (429) until it has loaded.
const storageInitializing = "storage is (re)initializing"

package spoke

import (
	"testing"
	"time"

	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
)

// TestNextRenewal: while the hub answers, a renewal every RenewEvery and at once when kicked;
// while it does not, RetryAfter after each failed round, and a kick (each held grant kicks once
// a second) renews no sooner than a backoff of 1 s doubled with each failure in a row, up to
// RetryAfter, so a cut costs no round of calls each second, and its end is still noticed within
// RetryAfter.
func TestNextRenewal(t *testing.T) {
	s := skew.Settings{Lease: 40 * time.Second, Grace: 15 * time.Second, MaxSkew: 2 * time.Second} // RenewEvery 13.33s, RetryAfter 6.67s
	last := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		failures int
		kicked   bool
		want     time.Duration
	}{
		{"the hub answers: every third of L", 0, false, s.RenewEvery()},
		{"the hub answers, kicked: at once", 0, true, 0},
		{"one failure: retried after RetryAfter", 1, false, s.RetryAfter()},
		{"one failure, kicked: after 1s", 1, true, time.Second},
		{"two failures, kicked: after 2s", 2, true, 2 * time.Second},
		{"three failures, kicked: after 4s", 3, true, 4 * time.Second},
		{"four failures, kicked: RetryAfter, the cap", 4, true, s.RetryAfter()},
		{"a long cut, kicked: still RetryAfter", 100, true, s.RetryAfter()},
		{"a long cut: RetryAfter", 100, false, s.RetryAfter()},
	} {
		if got := nextRenewal(s, last, tc.failures, tc.kicked).Sub(last); got != tc.want {
			t.Errorf("%s: next renewal after %s, want %s", tc.name, got, tc.want)
		}
	}
}

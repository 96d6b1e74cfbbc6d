package keeper

import (
	"strings"
	"testing"
	"time"
)

func TestFits(t *testing.T) {
	for _, tc := range []struct {
		name         string
		d, grace     time.Duration
		ttl, wantFit bool
	}{
		{name: "a failed renewal and its retry fit exactly", d: 12 * time.Second, grace: 3 * time.Second, wantFit: true},
		{name: "one second too long", d: 12 * time.Second, grace: 4 * time.Second},
		{name: "grace as long as the lease", d: 40 * time.Second, grace: 40 * time.Second},
		{name: "30s grace needs 66s", d: 66 * time.Second, grace: 30 * time.Second, wantFit: true},
		{name: "ttl pays for renewals counted in whole seconds", d: 12 * time.Second, grace: 3 * time.Second, ttl: true},
		{name: "ttl that fits", d: 16 * time.Second, grace: 3 * time.Second, ttl: true, wantFit: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why := FitGrace("--lease-duration", tc.d, tc.grace)
			if tc.ttl {
				why = FitTTL("--ttl", tc.d, tc.grace)
			}
			if (why == "") != tc.wantFit {
				t.Errorf("fit(%s, grace %s) = %q, want fit %v", tc.d, tc.grace, why, tc.wantFit)
			}
			if why != "" && !strings.Contains(why, "--grace of at most") {
				t.Errorf("the refusal must say what would fit: %q", why)
			}
		})
	}
}

func TestStopAt(t *testing.T) {
	renewed := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		expires time.Time
		want    time.Time
	}{
		{name: "the lease lapses first", expires: renewed.Add(time.Hour), want: renewed.Add(40*time.Second - StopMargin - 15*time.Second)},
		{name: "the grant expires first", expires: renewed.Add(20 * time.Second), want: renewed.Add(20*time.Second - StopMargin - 15*time.Second)},
		{name: "expiry unknown", want: renewed.Add(40*time.Second - StopMargin - 15*time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := StopAt(renewed, tc.expires, 40*time.Second, 15*time.Second); !got.Equal(tc.want) {
				t.Errorf("StopAt = %s, want %s", got, tc.want)
			}
		})
	}
}

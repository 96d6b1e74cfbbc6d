package spoke

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
)

// TestForgetUnusedNamespaces: the agent forgets the partition clock and renewal lock of a
// namespace unused for longer than L, so neither map grows with every namespace ever used, and a
// stale clock's skew samples (a clock that was off once, in a namespace used once) leave the
// bound the agent publishes; a namespace in use, or unused for less than L, is kept, and so is
// one whose renewal is under way.
func TestForgetUnusedNamespaces(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	settings := skew.Settings{Lease: 40 * time.Second, Grace: 15 * time.Second, MaxSkew: 2 * time.Second}
	a := &Agent{opts: Options{Settings: settings, Clock: clocktesting.NewFakeClock(now)}, clocks: map[string]*hubClock{}, renewals: map[string]*sync.Mutex{}}
	clockWith := func(bound time.Duration, used time.Time) *hubClock {
		return &hubClock{st: skew.State{Renewed: used, Skew: skew.Bound{}.Add(skew.Sample{Low: -bound, High: bound})}, tried: true, used: used}
	}
	a.clocks["team-once"] = clockWith(9*time.Second, now.Add(-41*time.Second))
	a.renewals["team-once"] = &sync.Mutex{}
	a.clocks["team-idle"] = clockWith(time.Second, now.Add(-39*time.Second))
	a.clocks["team-busy"] = clockWith(500*time.Millisecond, now.Add(-time.Hour))
	a.clocks["team-renewing"] = clockWith(time.Second, now.Add(-time.Hour))
	renewing := &sync.Mutex{}
	renewing.Lock()
	a.renewals["team-renewing"] = renewing

	if b, _ := a.skewBound(); b != 9*time.Second {
		t.Fatalf("skew bound before = %s, want the stale 9s", b)
	}
	a.forget(map[string]bool{"team-busy": true, FleetNamespace: true}, now)
	var kept []string
	for ns := range a.clocks {
		kept = append(kept, ns)
	}
	slices.Sort(kept)
	if diff := cmp.Diff([]string{"team-busy", "team-idle", "team-renewing", FleetNamespace}, kept); diff != "" {
		t.Errorf("clocks kept (-want +got)\n%s", diff)
	}
	if _, ok := a.renewals["team-once"]; ok {
		t.Error("the renewal lock of a namespace unused for longer than L is kept")
	}
	if a.renewals["team-renewing"] != renewing {
		t.Error("the renewal lock of a namespace whose renewal is under way is forgotten")
	}
	if b, _ := a.skewBound(); b != time.Second {
		t.Errorf("skew bound after = %s, want 1s: the stale namespace's 9s is forgotten", b)
	}
	if got := a.clocks["team-busy"].used; !got.Equal(now) {
		t.Errorf("a namespace in use is marked used at %s, want now", got)
	}
	renewing.Unlock()
	a.forget(map[string]bool{}, now.Add(41*time.Second))
	if len(a.clocks) != 0 || len(a.renewals) != 0 {
		t.Errorf("after L unused, clocks %v and renewals %v are left", a.clocks, a.renewals)
	}
}

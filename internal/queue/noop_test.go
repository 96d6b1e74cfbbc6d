package queue

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// A decision fed back its own writes (through the API server's precision) decides
// nothing: statuses are written only when they change.
func TestDecideWritesOnlyChanges(t *testing.T) {
	applyFrozen, _ := ResolveFreezes([]locksv1.CommandLock{commandLock("apply", true, "maintenance window", nil)}, FreezeFlags{}, now)
	aging := testConfig()
	aging.AgingStep = 10 * time.Minute
	capped := testConfig()
	capped.QueueCap = 1
	cfg := testConfig()
	// aliceHolds: alice's a was granted two minutes before now.
	aliceHolds := func(w *world) {
		w.add(makeReq("a").Owner("alice", 100).Obj())
		w.decide(name1, now.Add(-2*time.Minute), cfg)
	}
	// bobWaits: and bob's b queued behind her a minute before now.
	bobWaits := func(w *world) {
		aliceHolds(w)
		w.add(makeReq("b").Owner("bob", 7).Obj())
		w.decide(name1, now.Add(-time.Minute), cfg)
	}

	cases := map[string]struct {
		// tc builds the world up to the decision at now: it may decide earlier itself.
		tc  func(w *world)
		cfg Config
	}{
		"a fresh grant": {
			tc: func(w *world) { w.add(makeReq("a").Owner("alice", 100).Obj()) },
		},
		"waiters behind a holder": {
			tc: func(w *world) {
				w.add(makeReq("a").Owner("alice", 100).Obj())
				w.decide(name1, now.Add(-time.Minute), cfg)
				w.add(makeReq("b").Owner("bob", 7).Obj())
				w.add(makeReq("c").Owner("carol", 9).Priority(locksv1.PriorityHigh).Obj())
			},
		},
		"a release hands on": {
			tc: func(w *world) {
				aliceHolds(w)
				w.add(makeReq("b").Owner("bob", 7).Obj())
				w.add(makeReq("c").Owner("carol", 9).Obj())
				w.decide(name1, now.Add(-time.Minute), cfg)
				w.get("a").Spec.Release = true
				w.get("a").Generation++
			},
		},
		"an expiry hands on": {
			tc: func(w *world) {
				w.add(makeReq("a").Owner("alice", 100).TTL(time.Minute).Obj())
				w.decide(name1, now.Add(-2*time.Minute), cfg)
				w.add(makeReq("b").Owner("bob", 7).Obj())
				w.decide(name1, now.Add(-90*time.Second), cfg)
			},
		},
		"a deleted holder is replaced": {
			tc: func(w *world) {
				bobWaits(w)
				w.del("uid-a")
			},
		},
		"a renewal": {
			tc: func(w *world) {
				aliceHolds(w)
				a := w.get("a")
				a.Spec.TTL = &metav1.Duration{Duration: time.Hour}
				a.Generation++
			},
		},
		"a re-entry ahead of the queue": {
			tc: func(w *world) {
				bobWaits(w)
				w.add(makeReq("a2").Owner("alice", 100).Command("apply").Obj())
			},
		},
		"a force-unlock": {
			tc: func(w *world) {
				bobWaits(w)
				delete(w.locks, name1)
			},
		},
		"try-once and timed-out waiters fail": {
			tc: func(w *world) {
				aliceHolds(w)
				w.add(makeReq("c").Owner("carol", 9).WaitTimeout(30 * time.Second).Obj())
				w.decide(name1, now.Add(-time.Minute), cfg)
				w.add(makeReq("b").Owner("bob", 7).WaitTimeout(0).Obj())
			},
		},
		"a frozen apply waits while a plan is granted": {
			tc: func(w *world) {
				w.freezes = applyFrozen
				w.add(makeReq("a").Owner("bob", 1).Command("apply").Obj())
				w.add(makeReq("p").Owner("carol", 2).Command("plan").Obj())
			},
		},
		"a full queue": {
			cfg: capped,
			tc: func(w *world) {
				w.add(makeReq("a").Owner("alice", 100).Obj())
				w.decide(name1, now.Add(-2*time.Minute), capped)
				w.add(makeReq("b").Owner("bob", 7).Obj())
				w.add(makeReq("c").Owner("carol", 9).Obj())
			},
		},
		"an aged queue": {
			cfg: aging,
			tc: func(w *world) {
				w.add(makeReq("a").Owner("alice", 100).Obj())
				w.decide(name1, now.Add(-25*time.Minute), aging)
				w.add(makeReq("low").Owner("bob", 7).Priority(locksv1.PriorityLow).Obj())
				w.decide(name1, now.Add(-24*time.Minute), aging)
				w.add(makeReq("n").Owner("carol", 9).Obj())
			},
		},
		"the first key of a multi-lock request": {
			tc: func(w *world) { w.add(makeReq("m").Owner("carol", 9).Targets(tgt2, tgt1).Obj()) },
		},
		"a lost holder": {
			tc: func(w *world) {
				aliceHolds(w)
				w.add(makeReq("b").Owner("bob", 7).Obj())
				w.lost = map[types.UID]string{"uid-a": "Lease team-a/runner lapsed"}
			},
		},
		"an invalid ttl": {
			tc: func(w *world) { w.add(makeReq("a").Owner("alice", 100).TTL(3 * time.Hour).Obj()) },
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := tc.cfg
			if c == (Config{}) {
				c = cfg
			}
			w := newWorld(t)
			tc.tc(w)
			if first := w.decide(name1, now, c); empty(first) {
				t.Fatalf("the scenario's decision at now wrote nothing: nothing to feed back")
			}
			for _, at := range []time.Time{now, now.Add(time.Second)} {
				if again := Decide(w.input(name1, at, c)); !empty(again) {
					t.Errorf("deciding again at now+%s writes:\n%s", at.Sub(now), describeDecision(again))
				}
			}
		})
	}
}

// A waiter's conditions keep their lastTransitionTime while only the message moves.
func TestDecideKeepsTransitionTimes(t *testing.T) {
	cfg := testConfig()
	w := newWorld(t)
	w.add(makeReq("a").Owner("alice", 100).TTL(2 * time.Hour).Obj())
	w.decide(name1, now.Add(-time.Hour), cfg)
	w.add(makeReq("b").Owner("bob", 7).Priority(locksv1.PriorityLow).Obj())
	w.decide(name1, now, cfg)
	w.add(makeReq("c").Owner("carol", 9).Obj())
	d := w.decide(name1, now.Add(time.Minute), cfg)

	var b *Update
	for i := range d.Waiting {
		if d.Waiting[i].Request.Name == "b" {
			b = &d.Waiting[i]
		}
	}
	if b == nil {
		t.Fatalf("b's position moved but nothing was written:\n%s", describeDecision(d))
	}
	if got, want := findCond(b.Status.Conditions, locksv1.ConditionReconciling).Message, lockedByAlice+"; position 2 of 2"; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
	if !b.Refresh || b.Event != nil {
		t.Errorf("a position refresh: Refresh = %v, Event = %+v; want a deferrable write without an event", b.Refresh, b.Event)
	}
	got := map[string]time.Time{}
	for _, c := range b.Status.Conditions {
		got[c.Type] = c.LastTransitionTime.UTC()
	}
	want := map[string]time.Time{}
	for _, typ := range []string{locksv1.ConditionGranted, locksv1.ConditionReady, locksv1.ConditionReconciling, locksv1.ConditionStalled} {
		want[typ] = t0 // when b started waiting: now, to the second
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lastTransitionTime (-want +got):\n%s", diff)
	}
	if lt := findCond(w.locks[name1].Status.Conditions, locksv1.ConditionLocked).LastTransitionTime.UTC(); !lt.Equal(now.Add(-time.Hour).Truncate(time.Second)) {
		t.Errorf("ProjectLock Locked lastTransitionTime = %v, want the first grant's %v", lt, now.Add(-time.Hour).Truncate(time.Second))
	}
}

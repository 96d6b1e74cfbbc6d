package queue

// The adversarial review of shared locks (issue #31): targeted tables for what the review
// found, and the regressions it leaves behind.

import (
	"fmt"
	"testing"
	"time"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// TestSharedCapReentrant: the MaxSharedHolders bound holds on every path a shared request
// takes to the key. Shared requests of the identity that holds the whole key re-enter at once,
// and before the review they did so past the bound: 101 readers of one identity were written
// to status.sharedHolders, which the API server refuses (maxItems 100): every decision's
// ProjectLock write failed, so none of them was granted and no waiter's status was written,
// for as long as they all waited — stuck. The same through an exclusive holding of that
// identity: its shared requests joined beyond the bound (the holding is Exclusive, its
// status.holder.requests unbounded), and once the exclusive request was released the holding
// turned Shared with 101: that decision's ProjectLock write failed, and every one after it
// (mutant shared-holders-uncapped-reentrant).
func TestSharedCapReentrant(t *testing.T) {
	cfg := testConfig()
	check := func(t *testing.T, w *world, d Decision, wantQueue int) {
		t.Helper()
		st := w.locks[name1].Status
		if got := len(st.SharedHolders); got > locksv1.MaxSharedHolders {
			t.Fatalf("%d shared holders written, over the API server's bound of %d", got, locksv1.MaxSharedHolders)
		}
		shared := len(st.SharedHolders)
		if h := st.Holder; h != nil {
			shared = 0
			for _, hr := range h.Requests {
				if r := w.get(hr.Name); r != nil && r.Spec.Locks[0].Mode.IsShared() {
					shared++
				}
			}
		}
		if shared > locksv1.MaxSharedHolders {
			t.Fatalf("%d shared requests hold the key, over %d: the holding turns Shared with them", shared, locksv1.MaxSharedHolders)
		}
		if len(d.Queue) != wantQueue {
			t.Fatalf("%d waiting, want %d", len(d.Queue), wantQueue)
		}
	}
	t.Run("readers of one identity", func(t *testing.T) {
		w := newWorld(t)
		for i := range locksv1.MaxSharedHolders + 1 {
			w.add(reader(fmt.Sprintf("r%03d", i), "alice"))
		}
		check(t, w, w.decide(name1, now, cfg), 1)
		// One leaves: the one waiting takes its place.
		w.get("r000").Spec.Release = true
		d := w.decide(name1, now.Add(time.Second), cfg)
		check(t, w, d, 0)
		if tokenOf(t, w, fmt.Sprintf("r%03d", locksv1.MaxSharedHolders)) == 0 {
			t.Fatalf("the waiting reader is not granted once a holder left")
		}
	})
	t.Run("readers joining their identity's exclusive holding", func(t *testing.T) {
		w := newWorld(t)
		w.add(writer("x", "alice"))
		w.decide(name1, now, cfg)
		for i := range locksv1.MaxSharedHolders + 1 {
			w.add(reader(fmt.Sprintf("r%03d", i), "alice"))
		}
		check(t, w, w.decide(name1, now.Add(time.Second), cfg), 1)
		w.get("x").Spec.Release = true
		check(t, w, w.decide(name1, now.Add(2*time.Second), cfg), 1)
		if st := w.locks[name1].Status; st.Mode != locksv1.ModeShared {
			t.Fatalf("mode %q once the exclusive request left, want Shared", st.Mode)
		}
	})
}

// TestSharedQueueFullWriterHoldsBackNobody: a newcomer writer that the queue cap turns away
// (QueueFull) leaves in the decision that fails it, as a writer that tries once does: the
// readers behind it that the shared holders would take are granted in that same decision.
// Before the review they were held back by it (writer preference) and granted only by the next
// decision, which the rejected writer's own status write triggers: the decision was not a fixed
// point (deciding again granted them).
func TestSharedQueueFullWriterHoldsBackNobody(t *testing.T) {
	cfg := testConfig()
	cfg.QueueCap = 3
	w := newWorld(t)
	w.add(reader("r1", "alice"))
	w.decide(name1, now, cfg)
	w.add(writer("w0", "bob"))
	w.add(reader("r2", "carol"))
	w.add(reader("r3", "dave"))
	w.decide(name1, now.Add(time.Second), cfg)
	if tokenOf(t, w, "r2") != 0 || tokenOf(t, w, "r3") != 0 {
		t.Fatalf("r2 and r3 hold while w0 waits ahead of them")
	}
	// w0 gives up; a writer of High priority arrives, ahead of r2 and r3, into a full queue (the
	// operator lowered the cap; requests already queued keep their place whatever their number,
	// as multi-key requests queued by their first key do).
	cfg.QueueCap = 2
	w.get("w0").Spec.Release = true
	w.add(makeReq("w1").Owner("erin", 0).Priority(locksv1.PriorityHigh).Obj())
	d := w.decideOnce(name1, now.Add(2*time.Second), cfg)
	if got := w.get("w1").Status.Phase; got != locksv1.PhaseFailed {
		t.Fatalf("w1 is %s, want Failed (QueueFull)", got)
	}
	if tokenOf(t, w, "r2") == 0 || tokenOf(t, w, "r3") == 0 {
		t.Errorf("r2 (token %d) and r3 (token %d) wait behind w1, which this decision turned away; waiting: %v",
			tokenOf(t, w, "r2"), tokenOf(t, w, "r3"), names(d.Queue))
	}
	if again := Decide(w.input(name1, now.Add(2*time.Second), cfg)); !empty(again) {
		t.Errorf("not a fixed point: deciding again writes\n%s", describeDecision(again))
	}
}

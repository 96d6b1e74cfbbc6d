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

// TestDecideOnStaleProjectLockWritesNothing: a manager whose request cache does not have a
// holder yet reads it live (the controller's confirmHolders), but decides on its cached
// ProjectLock, which may be older than a write that holder has seen. The walk of lagging
// managers (TestSharedStaleManagersWalk's world, seed 1292 of its first version) found it with
// an exclusive request: M1 lists r at token T1 and crashes before r's held write; M2 re-issues
// the grant at T2 > T1 and writes r holding at T2; M3, its request cache from before r existed
// and its ProjectLock cache at M1's write, reads r live (holding at T2), takes it for a confirmed
// holder of the token it sees listed, and writes r holding at T1: r's token for the key goes
// down (TM; the controller's live ProjectLock read on a token ahead, hole 8, looks only at cached
// requests), and nothing stops the write: the ProjectLock status the decision computes is the
// one read, so the plan has no ProjectLock write to fail on its stale resourceVersion. A shared
// holder keeps its own token (holderTokens), so the shared case wrote a ProjectLock status that
// would fail; the exclusive one regressed. Decide now decides nothing on a ProjectLock older than
// a token its holders show, and comes back shortly (mutant decide-on-stale-projectlock).
func TestDecideOnStaleProjectLockWritesNothing(t *testing.T) {
	cfg := testConfig()
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprint("shared=", shared), func(t *testing.T) {
			w := newWorld(t)
			b := makeReq("r").Owner("alice", 0)
			if shared {
				b.Shared()
			}
			w.add(b.Obj())
			// M1 creates the ProjectLock and lists r, then crashes before r's held write.
			in := w.input(name1, now, cfg)
			w.apply(name1, in, Decide(in), stageAll) // create
			in = w.input(name1, now, cfg)
			w.apply(name1, in, Decide(in), stageLock)
			stale := w.locks[name1].DeepCopy() // M3's ProjectLock cache stays here
			t1 := stale.Status.FencingToken
			// M2 re-issues the unconfirmed grant and writes it.
			w.decide(name1, now, cfg)
			t2 := tokenOf(t, w, "r")
			if t2 <= t1 {
				t.Fatalf("re-issued at %d, not above %d", t2, t1)
			}
			// M3: the stale ProjectLock, r as read live.
			in = w.input(name1, now, cfg)
			in.Lock = stale
			d := Decide(in)
			// Written in full, as the ProjectLock write that would fail on its stale
			// resourceVersion is not in the plan: its status is the one read.
			if !shared && d.Lock != nil {
				t.Fatalf("the plan writes the ProjectLock (which fails on its stale resourceVersion):\n%s", describeDecision(d))
			}
			for _, u := range d.Grant {
				if l := u.Status.Locks[0]; l.Held && l.FencingToken < t2 {
					t.Fatalf("r is written holding at token %d, below %d its status shows:\n%s", l.FencingToken, t2, describeDecision(d))
				}
			}
			if !empty(d) || d.RequeueAfter <= 0 || !d.Stale {
				t.Fatalf("a decision on a ProjectLock older than its holder's token writes (requeue %s):\n%s", d.RequeueAfter, describeDecision(d))
			}
		})
	}
}

// TestAgainFencesRejectedDemotions: a decision that must take a gone holder out first (its
// token unknown: Again) writes a fence for every listed request it drops, before the
// ProjectLock write. A listed grant that never landed, whose command froze since, is demoted;
// if it also may not wait (waitTimeout 0s, or the queue cap for a request never queued before)
// the decision fails it instead — and before the review the Again split wrote neither: the
// ProjectLock dropped it with no write to the request, so a held write still in flight for it
// (the decision that listed it) landed on a request no ProjectLock listed (J; then a second
// identity could be granted beside it: ME). The walk of lagging managers found it (seed 2475 of
// TestSharedStaleManagersWalk's second version: the grant had landed, the deciding manager's
// request and freeze caches were older). Mutant again-drops-rejected-demotions.
func TestAgainFencesRejectedDemotions(t *testing.T) {
	cfg := testConfig()
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprint("shared=", shared), func(t *testing.T) {
			w := newWorld(t)
			g := makeReq("g").Owner("alice", 0)
			u := makeReq("u").Owner("alice", 0).Command("apply").WaitTimeout(0)
			if shared {
				g.Shared()
				u = makeReq("u").Owner("carol", 0).Command("apply").WaitTimeout(0).Shared()
			}
			w.add(g.Obj())
			w.decide(name1, now, cfg)
			// u is listed beside g, and its own held write never lands (a crash).
			w.add(u.Obj())
			in := w.input(name1, now, cfg)
			w.apply(name1, in, Decide(in), stageLock)
			if pl := w.locks[name1]; len(pl.Status.HolderRequests()) != 2 {
				t.Fatalf("u is not listed beside g: %+v", pl.Status)
			}
			// apply freezes; g is deleted and its delete event lost; bob waits.
			applyFrozen, _ := ResolveFreezes([]locksv1.CommandLock{commandLock("apply", true, "maintenance", nil)}, FreezeFlags{}, now)
			w.freezes = applyFrozen
			w.del(w.get("g").UID)
			w.forgetGone()
			w.add(writer("b", "bob"))
			in = w.input(name1, now.Add(time.Second), cfg)
			d := Decide(in)
			if !d.Again {
				t.Fatalf("want a decision that takes g out first (Again):\n%s", describeDecision(d))
			}
			fenced := false
			for _, wr := range d.Writes {
				if wr.Kind == WriteLockStatus {
					break
				}
				fenced = fenced || (wr.Update != nil && wr.Update.Request.Name == "u")
			}
			if !fenced {
				t.Fatalf("the ProjectLock drops u with no write to u before it:\n%s", describeDecision(d))
			}
		})
	}
}

package queue

// Counting locks (issue #45): at most maxHolders requests hold a key, each counted grant with a
// token of its own.

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

func counted(name, owner string, maxHolders int32) *locksv1.LockRequest {
	return makeReq(name).Owner(owner, 0).MaxHolders(maxHolders).Obj()
}

// holdersOf is who holds the key as the requests' statuses say, "name:token" in token order.
func holdersOf(t *testing.T, w *world, reqs ...string) []string {
	t.Helper()
	var out []string
	for _, n := range reqs {
		if tok := tokenOf(t, w, n); tok != 0 {
			out = append(out, n+":"+itoa(tok))
		}
	}
	return out
}

// TestCountingAtMostN: five upgrades of five clusters ask for one key with maxHolders 3: three
// hold, each granted by a ProjectLock write of its own with a token above every token before it,
// two wait and are told how full the key is; a holder that leaves lets exactly the next one in
// (mutants counting-unbounded, counting-grants-share-a-write, counting-decides-again).
func TestCountingAtMostN(t *testing.T) {
	cfg := testConfig()
	w := newWorld(t)
	for i := range 5 {
		w.add(counted(fmt.Sprintf("up%d", i), fmt.Sprintf("cluster-%d", i), 3))
	}
	in := w.input(name1, now, cfg)
	d := Decide(in)
	if !d.CreateLock {
		t.Fatalf("first decision: want the ProjectLock created, got\n%s", describeDecision(d))
	}
	w.apply(name1, in, d, stageAll)
	// Each counted grant has the write to itself: one grant, and the plan says decide again.
	var tokens []int64
	for i := range 3 {
		in := w.input(name1, now, cfg)
		d := Decide(in)
		if len(d.Grant) != 1 || !d.Grant[0].Acquires || d.Lock == nil {
			t.Fatalf("decision %d: want one new grant and its ProjectLock write, got\n%s", i, describeDecision(d))
		}
		// Until the key is full, a waiter could hold: the plan decides again at once.
		if full := i == 2; d.More == full || d.DecidesAgain() == full {
			t.Fatalf("decision %d: More %v, DecidesAgain %v; want %v", i, d.More, d.DecidesAgain(), !full)
		}
		w.apply(name1, in, d, stageAll)
		tokens = append(tokens, d.Grant[0].Status.Locks[0].FencingToken)
	}
	if d = w.decide(name1, now, cfg); !empty(d) {
		t.Fatalf("the key is full: want no grant and no next decision, got\n%s", describeDecision(d))
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens %v: each counted grant's must be above the one before", tokens)
		}
	}
	want := []string{"up0:" + itoa(tokens[0]), "up1:" + itoa(tokens[1]), "up2:" + itoa(tokens[2])}
	if diff := cmp.Diff(want, holdersOf(t, w, "up0", "up1", "up2", "up3", "up4")); diff != "" {
		t.Fatalf("holders (-want +got):\n%s", diff)
	}
	st := w.locks[name1].Status
	if st.HolderCount != 3 || st.MaxHolders != 3 || st.Mode != locksv1.ModeShared {
		t.Errorf("ProjectLock holderCount %d, maxHolders %d, mode %q; want 3, 3, Shared", st.HolderCount, st.MaxHolders, st.Mode)
	}
	if c := findCond(st.Conditions, locksv1.ConditionLocked); c == nil || c.Message != "locked by cluster-0 and 2 other shared holders (3 of at most 3 hold it)" {
		t.Errorf("Locked condition %+v", c)
	}
	if got := w.get("up3").Status.BlockedBy; got != "locked by cluster-0 and 2 other shared holders (3 of at most 3 hold it)" {
		t.Errorf("up3 blockedBy %q", got)
	}
	// One leaves: the next one in queue order takes its place, above every token before.
	w.get("up1").Spec.Release = true
	w.decide(name1, now.Add(time.Second), cfg)
	got := holdersOf(t, w, "up0", "up1", "up2", "up3", "up4")
	if len(got) != 3 || tokenOf(t, w, "up3") <= tokens[2] || tokenOf(t, w, "up4") != 0 {
		t.Fatalf("after up1 left: holders %v; want up0, up2 and up3 (token above %d), up4 waiting", got, tokens[2])
	}
	if again := w.decide(name1, now.Add(2*time.Second), cfg); !empty(again) {
		t.Errorf("deciding again writes:\n%s", describeDecision(again))
	}
}

// TestCountingBoundsDisagree: every holder's bound holds. A request with maxHolders 1 holds
// alone; one with 3 waits for it (mutant counting-joiner-bound-only), then holds, and a reader
// joins it (2 of at most 3); a request with maxHolders 2 then waits (it would be the third).
func TestCountingBoundsDisagree(t *testing.T) {
	cfg := testConfig()
	w := newWorld(t)
	at := now
	step := func() Decision {
		at = at.Add(time.Second)
		return w.decide(name1, at, cfg)
	}
	w.add(counted("one", "alice", 1))
	step()
	w.add(counted("three", "bob", 3))
	w.add(reader("r", "carol"))
	d := step()
	if diff := cmp.Diff([]string{"one:" + itoa(tokenOf(t, w, "one"))}, holdersOf(t, w, "one", "three", "r")); diff != "" {
		t.Fatalf("alice's bound of 1 holds (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"three", "r"}, names(d.Queue)); diff != "" {
		t.Errorf("queue (-want +got):\n%s", diff)
	}
	if st := w.locks[name1].Status; st.MaxHolders != 1 {
		t.Errorf("ProjectLock maxHolders %d, want 1 (alice's)", st.MaxHolders)
	}
	w.get("one").Spec.Release = true
	step()
	if got := holdersOf(t, w, "one", "three", "r"); len(got) != 2 || tokenOf(t, w, "r") <= tokenOf(t, w, "three") {
		t.Fatalf("after alice left: holders %v; want bob's and then carol's reader, above it", got)
	}
	w.add(counted("two", "dave", 2))
	d = step()
	if tokenOf(t, w, "two") != 0 || len(d.Queue) != 1 {
		t.Fatalf("dave's bound of 2 is below the 3 that would hold: he waits; queue %v", names(d.Queue))
	}
	if got := w.get("two").Status.BlockedBy; got != "locked by carol and 1 other shared holder (2 of at most 3 hold it)" {
		t.Errorf("two blockedBy %q", got)
	}
}

// TestCountingFIFOAtTheBound: a shared waiter that a bound keeps out stops everyone behind it,
// as a writer does: two readers hold, a counted request with maxHolders 2 waits for one of them
// to leave, and a reader after it does not pass it (mutant counting-fifo-at-the-bound).
func TestCountingFIFOAtTheBound(t *testing.T) {
	cfg := testConfig()
	w := newWorld(t)
	w.add(reader("r1", "alice"))
	w.add(reader("r2", "bob"))
	w.decide(name1, now, cfg)
	w.add(counted("c", "carol", 2))
	w.add(reader("r3", "dave"))
	d := w.decide(name1, now.Add(time.Second), cfg)
	if tokenOf(t, w, "r3") != 0 {
		t.Fatalf("r3 passed carol's counted request waiting ahead of it: queue %v", names(d.Queue))
	}
	if diff := cmp.Diff([]string{"c", "r3"}, names(d.Queue)); diff != "" {
		t.Errorf("queue (-want +got):\n%s", diff)
	}
	w.get("r1").Spec.Release = true
	w.decide(name1, now.Add(2*time.Second), cfg)
	if tokenOf(t, w, "c") == 0 || tokenOf(t, w, "r3") != 0 {
		t.Fatalf("after r1 left: c must hold beside r2 (2 of at most 2) and r3 wait; holders %v", holdersOf(t, w, "r1", "r2", "c", "r3"))
	}
}

// TestCountingReissueGoesAlone: an unconfirmed grant (a crash between the ProjectLock write and
// its own) is re-issued with a new token; a counted waiter is not granted in that write, and a
// counted grant re-issued takes the write alone, so no two requests show one token (mutant
// counting-grants-share-a-write).
func TestCountingReissueGoesAlone(t *testing.T) {
	cfg := testConfig()
	for name, tc := range map[string]struct {
		first, second *locksv1.LockRequest
	}{
		"a reader re-issued, a counted waiter": {first: reader("a", "alice"), second: counted("b", "bob", 3)},
		"a counted grant re-issued, a reader":  {first: counted("a", "alice", 3), second: reader("b", "bob")},
		"a counted grant re-issued, another":   {first: counted("a", "alice", 3), second: counted("b", "bob", 3)},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			w.add(tc.first)
			in := w.input(name1, now, cfg)
			w.apply(name1, in, Decide(in), stageAll) // the ProjectLock created
			in = w.input(name1, now, cfg)
			w.apply(name1, in, Decide(in), stageLock) // a listed, a crash before its own write
			if tokenOf(t, w, "a") != 0 {
				t.Fatalf("a is written holding: the crash came too late")
			}
			w.add(tc.second)
			in = w.input(name1, now.Add(time.Second), cfg)
			d := Decide(in)
			if len(d.Grant) != 1 || d.Grant[0].Request.Name != "a" || !d.More {
				t.Fatalf("want a re-issued alone and b left for the next decision, got\n%s", describeDecision(d))
			}
			w.apply(name1, in, d, stageAll)
			w.decide(name1, now.Add(time.Second), cfg)
			ta, tb := tokenOf(t, w, "a"), tokenOf(t, w, "b")
			if ta == 0 || tb <= ta {
				t.Fatalf("tokens a %d, b %d: both hold, b's above a's", ta, tb)
			}
		})
	}
}

// TestCountingDeferredIsNotBusy: a waiter left for the next decision (a counted grant took the
// write) could hold: it is neither failed as busy when it tries once (waitTimeout 0s) nor turned
// away by the queue cap (mutants counting-deferred-not-busy, counting-deferred-not-full).
func TestCountingDeferredIsNotBusy(t *testing.T) {
	t.Run("tries once", func(t *testing.T) {
		cfg := testConfig()
		w := newWorld(t)
		w.add(counted("a", "alice", 3))
		w.add(makeReq("b").Owner("bob", 0).MaxHolders(3).WaitTimeout(0).Obj())
		w.decide(name1, now, cfg)
		if tokenOf(t, w, "a") == 0 || tokenOf(t, w, "b") == 0 {
			t.Fatalf("both fit under maxHolders 3: a %+v, b %+v", w.get("a").Status, w.get("b").Status)
		}
	})
	t.Run("the queue cap", func(t *testing.T) {
		cfg := testConfig()
		cfg.QueueCap = 1
		w := newWorld(t)
		// A frozen apply waits (stamped), filling the queue; two counted newcomers fit.
		w.freezes, _ = ResolveFreezes([]locksv1.CommandLock{commandLock("apply", true, "maintenance window", nil)}, FreezeFlags{}, now)
		w.add(makeReq("f").Owner("frank", 0).Command("apply").Obj())
		w.decide(name1, now, cfg)
		w.add(counted("a", "alice", 3))
		w.add(counted("b", "bob", 3))
		w.decide(name1, now.Add(time.Second), cfg)
		if tokenOf(t, w, "a") == 0 || tokenOf(t, w, "b") == 0 {
			t.Fatalf("both fit under maxHolders 3: a %+v, b %+v", w.get("a").Status, w.get("b").Status)
		}
	})
}

package queue

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// deepQueue is a key with a holder and n stamped waiters whose statuses are up to date.
func deepQueue(t testing.TB, n int) *world {
	w := newWorld(t)
	w.add(makeReq("holder").Owner("h", 1).Obj())
	w.decide(name1, now, testConfig())
	for i := range n {
		w.add(makeReq(fmt.Sprintf("w%04d", i)).Owner("w", int64(i+2)).Obj())
	}
	w.decide(name1, now.Add(time.Second), testConfig())
	return w
}

func TestRefreshBudget(t *testing.T) {
	cases := map[string]struct {
		budget       RefreshBudget
		handOff      bool
		arrival      bool    // a newcomer joins the back of the queue
		wantRefresh  []int32 // positions written by refresh-only updates
		wantDeferred bool
	}{
		"a hand-off with no bound refreshes every waiter": {
			handOff: true, wantRefresh: []int32{1, 2, 3, 4},
		},
		"a hand-off with a budget of 2 refreshes the head and defers the rest": {
			budget: RefreshBudget{Limited: true, N: 2}, handOff: true, wantRefresh: []int32{1, 2}, wantDeferred: true,
		},
		"a budget of 0 defers them all": {
			budget: RefreshBudget{Limited: true, N: 0}, handOff: true, wantDeferred: true,
		},
		"a budget larger than the queue defers nothing": {
			budget: RefreshBudget{Limited: true, N: 10}, handOff: true, wantRefresh: []int32{1, 2, 3, 4},
		},
		"nothing moved: nothing deferred, even with no budget": {
			budget: RefreshBudget{Limited: true, N: 0},
		},
		"an arrival with no bound refreshes every waiter: their messages quote the new length": {
			arrival: true, wantRefresh: []int32{1, 2, 3, 4, 5},
		},
		"an arrival with a budget of 2 refreshes the head and defers the rest": {
			budget: RefreshBudget{Limited: true, N: 2}, arrival: true, wantRefresh: []int32{1, 2}, wantDeferred: true,
		},
		"an arrival with a budget of 0 defers them all, and still enqueues the newcomer": {
			budget: RefreshBudget{Limited: true, N: 0}, arrival: true, wantDeferred: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := deepQueue(t, 5)
			if tc.handOff {
				w.del("uid-holder")
			}
			if tc.arrival {
				w.add(makeReq("late").Owner("late", 99).Obj())
			}
			in := w.input(name1, now.Add(2*time.Second), testConfig())
			in.Refreshes = tc.budget
			d := Decide(in)
			var got []int32
			for _, u := range d.Waiting {
				if u.Refresh {
					got = append(got, u.Status.QueuePosition)
				}
			}
			if diff := cmp.Diff(tc.wantRefresh, got); diff != "" {
				t.Errorf("refreshed positions (-want +got):\n%s", diff)
			}
			if d.RefreshDeferred != tc.wantDeferred {
				t.Errorf("RefreshDeferred = %v, want %v", d.RefreshDeferred, tc.wantDeferred)
			}
			if tc.handOff && len(d.Grant) != 1 {
				t.Errorf("the hand-off must grant the head whatever the budget, got %d grants", len(d.Grant))
			}
			if tc.arrival {
				var enqueued []int32
				for _, u := range d.Waiting {
					if !u.Refresh {
						enqueued = append(enqueued, u.Status.QueuePosition)
					}
				}
				if diff := cmp.Diff([]int32{6}, enqueued); diff != "" {
					t.Errorf("the newcomer is enqueued whatever the budget (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestDecisionsBeforeRefreshes: in the plan, a waiter's first status (a decision: until it is
// written the request reads undecided) comes before every position refresh (information), so a
// newcomer is never undecided behind a deep queue's refreshes (issue #47).
func TestDecisionsBeforeRefreshes(t *testing.T) {
	w := deepQueue(t, 5)
	w.del("uid-holder")
	w.add(makeReq("late").Owner("late", 99).Obj())
	d := Decide(w.input(name1, now.Add(2*time.Second), testConfig()))
	var got []string
	refreshing := false
	for _, wr := range d.Writes {
		if wr.Kind != WriteWaiting {
			continue
		}
		got = append(got, wr.Object)
		if wr.Update.Refresh {
			refreshing = true
		} else if refreshing {
			t.Errorf("the first status of %s is planned after a position refresh: %v", wr.Object, got)
		}
	}
	if len(got) != 5 || got[0] != "late" {
		t.Errorf("waiter writes %v: want the newcomer's first status, then the 4 refreshes (the head is granted)", got)
	}
}

// BenchmarkDecideHandOffDepth1000 is the reconcile after a hand-off in a deep queue, with the
// refresh budget a key's default write rate allows at once.
func BenchmarkDecideHandOffDepth1000(b *testing.B) {
	benchDeepQueue(b, func(w *world) { w.del("uid-holder") })
}

// BenchmarkDecideArrivalDepth1000 is the reconcile an arrival at the back of a settled deep
// queue pays, with the refresh budget a key's default write rate allows at once.
func BenchmarkDecideArrivalDepth1000(b *testing.B) {
	benchDeepQueue(b, func(w *world) { w.add(makeReq("late").Owner("late", 5000).Obj()) })
}

// benchDeepQueue measures the decision on a settled queue 1000 deep after change.
func benchDeepQueue(b *testing.B, change func(w *world)) {
	w := deepQueue(b, 1000)
	change(w)
	in := w.input(name1, now.Add(2*time.Second), testConfig())
	in.Refreshes = RefreshBudget{Limited: true, N: 20}
	b.ReportAllocs()
	for b.Loop() {
		Decide(in)
	}
}

// TestIsPositionText: the budget check compares a stored message with the one a waiter would
// be given without building it; it must agree with positionText exactly, or a waiter whose
// message changed would be skipped (or one that did not, rewritten).
func TestIsPositionText(t *testing.T) {
	const prefix = "locked by pull #100 (alice)"
	cases := map[string]struct {
		msg  string
		i, n int
		want bool
	}{
		"same":                          {msg: prefix + "; position 3 of 5", i: 2, n: 5, want: true},
		"other length of queue":         {msg: prefix + "; position 3 of 5", i: 2, n: 6},
		"other position":                {msg: prefix + "; position 3 of 5", i: 3, n: 5},
		"digits that only share a head": {msg: prefix + "; position 1 of 10", i: 0, n: 1},
		"digits that only share a tail": {msg: prefix + "; position 11 of 12", i: 0, n: 12},
		"other prefix, same length":     {msg: "locked by pull #101 (alice); position 3 of 5", i: 2, n: 5},
		"deep queue":                    {msg: prefix + "; position 1000 of 1001", i: 999, n: 1001, want: true},
		"empty message":                 {msg: "", i: 0, n: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := isPositionText(tc.msg, prefix, tc.i, tc.n); got != tc.want {
				t.Errorf("isPositionText(%q, %d, %d) = %t, want %t", tc.msg, tc.i, tc.n, got, tc.want)
			}
			if built := positionText(prefix, tc.i, tc.n) == tc.msg; built != tc.want {
				t.Errorf("positionText agrees %t, want %t", built, tc.want)
			}
		})
	}
}

// A demotion is a fence, never a position refresh. A backup decides with a
// refresh budget of zero (and an owner whose key's write rate is spent, likewise): if the
// demotion of an unconfirmed grant counted as a refresh it would be left for later while the
// ProjectLock write drops the request, and the held write of the decision that listed it, still
// in flight, would land on a request the ProjectLock no longer lists (J, then ME).
func TestDemotionIsNeverDeferredAsARefresh(t *testing.T) {
	applyFrozen, _ := ResolveFreezes([]locksv1.CommandLock{commandLock("apply", true, "maintenance window", nil)}, FreezeFlags{}, now)
	// bob waited behind alice (position 1, blocked by her); alice left, a manager listed bob and
	// has not written him as holding yet; apply froze since.
	bob := bobWaits().Command("apply").Waiting(locksv1.ReasonQueued, "locked by alice; position 1 of 1", 1, "alice")
	lock := makeLock(tgt1).token(41).holder(now, bob.Obj()).rv("90").Obj()
	for _, budget := range []RefreshBudget{{}, {Limited: true, N: 0}} {
		in := Input{Now: now, Name: name1, Lock: lock, Requests: reqs(bob), Freezes: applyFrozen, Config: testConfig(), Refreshes: budget}
		d := Decide(in)
		if d.Lock == nil {
			t.Fatalf("budget %+v: the ProjectLock is not written; want bob dropped from its holders", budget)
		}
		if d.Lock.Holder != nil && len(d.Lock.Holder.Requests) > 0 {
			t.Fatalf("budget %+v: bob still listed: %+v", budget, d.Lock.Holder)
		}
		if len(d.Demote) != 1 || d.Demote[0].Request.Name != "w" {
			t.Errorf("budget %+v: the ProjectLock drops bob but his demotion is not written first: Demote %d, Waiting %d, RefreshDeferred %v",
				budget, len(d.Demote), len(d.Waiting), d.RefreshDeferred)
		}
	}
}

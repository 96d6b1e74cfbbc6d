package queue

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// Several targets are taken in canonical order (tgt1 before tgt2, whatever the spec
// order), and the request is Granted only when it holds them all.
func TestDecideMultiLock(t *testing.T) {
	const fresh = createdRV
	grant30 := t0.Add(30 * time.Minute)
	// carol asks for tgt2 and tgt1, in that spec order: Held reads "<tgt2><tgt1>".
	multi := func() *wrappers.LockRequestWrapper { return makeReq("m").Owner("carol", 9).Targets(tgt2, tgt1) }
	firstMsg := fmt.Sprintf("waiting for %s first (locks are taken in canonical order)", key1)
	daveOn2 := func() *wrappers.LockRequestWrapper { return makeReq("d").Owner("dave", 4).Targets(tgt2) }
	daveLock := func() *locksv1.ProjectLock {
		return makeLock(tgt2).token(50).holder(t0.Add(-time.Minute), daveOn2().Granted(t0.Add(-time.Minute), 50).Obj()).Obj()
	}
	mHolds1 := func() *wrappers.LockRequestWrapper {
		return multi().Held(tgt1).FencingToken(77).QueuedAt(t0.Add(-2*time.Minute)).
			Waiting(locksv1.ReasonQueued, "locked by pull #4 (dave); position 1 of 1", 1, "locked by pull #4 (dave)")
	}
	lock1HeldByM := makeLock(tgt1).token(77).holder(t0.Add(-2*time.Minute), mHolds1().Obj()).Obj()

	cases := map[string]decideCase{
		"the second key does not grant before the first is held": {
			key:      name2,
			lock:     createdLockOf(tgt2),
			reqs:     reqs(multi()),
			wantLock: &lockView{Queue: []string{"m:Normal"}, Length: 1},
			wantWaiting: map[string]reqView{"m": {Phase: locksv1.PhasePending, Reason: locksv1.ReasonQueued, Message: firstMsg,
				Held: "00", True: truePending, Event: locksv1.ReasonQueued}},
			wantQueue: []string{"m"},
		},
		"the first key is granted; the request stays Pending": {
			key:        name1,
			lock:       createdLockOf(tgt1),
			reqs:       reqs(multi()),
			wantHolder: "carol#9",
			wantLock:   &lockView{Holder: "pull #9 (carol)", Requests: []string{"m"}, Token: fresh},
			wantGrant: map[string]reqView{"m": {Phase: locksv1.PhasePending, Reason: locksv1.ReasonQueued,
				Message: fmt.Sprintf("holds %s; waiting for %s next (locks are taken in canonical order)", key1, key2),
				Token:   fresh, Held: "01", True: truePending}},
		},
		"the second key is granted once the status holds the first: Granted": {
			key:        name2,
			lock:       createdLockOf(tgt2),
			reqs:       reqs(multi().Held(tgt1).FencingToken(77).QueuedAt(t0.Add(-time.Minute))),
			wantHolder: "carol#9",
			wantLock:   &lockView{Holder: "pull #9 (carol)", Requests: []string{"m"}, Token: fresh, Expires: grant30},
			wantGrant: map[string]reqView{"m": {Phase: locksv1.PhaseGranted, Reason: locksv1.ReasonGranted,
				Message: grantedMsg("2 locks", 77, grant30), Token: 77, Held: "11", True: trueGranted, Event: locksv1.ReasonGranted}},
			wantRequeue: untilFromNow(grant30),
		},
		"a waiter that has not reached this key does not block the next": {
			key:        name2,
			lock:       createdLockOf(tgt2),
			reqs:       reqs(multi().QueuedAt(t0.Add(-time.Hour)).Waiting(locksv1.ReasonQueued, firstMsg, 0, ""), daveOn2()),
			wantHolder: "dave#4",
			wantLock:   &lockView{Holder: "pull #4 (dave)", Requests: []string{"d"}, Token: fresh, Queue: []string{"m:Normal"}, Length: 1, Expires: grant30},
			wantGrant: map[string]reqView{"d": {Phase: locksv1.PhaseGranted, Reason: locksv1.ReasonGranted, Message: grantedMsg(key2, fresh, grant30),
				Token: fresh, Held: "1", True: trueGranted, Event: locksv1.ReasonGranted}},
			wantQueue:   []string{"m"},
			wantRequeue: untilFromNow(grant30),
		},
		"waitTimeout 0s: the second key leaves a request that has not reached it to the first key": {
			key:        name2,
			lock:       daveLock(),
			reqs:       append(reqs(multi().WaitTimeout(0)), daveOn2().Granted(t0.Add(-time.Minute), 50).Obj()),
			wantHolder: "dave#4",
			wantLock: &lockView{Holder: "pull #4 (dave)", Requests: []string{"d"}, Token: 50, Queue: []string{"m:Normal"}, Length: 1,
				Expires: t0.Add(29 * time.Minute)},
			wantWaiting: map[string]reqView{"m": {Phase: locksv1.PhasePending, Reason: locksv1.ReasonQueued, Message: firstMsg,
				Held: "00", True: truePending, Event: locksv1.ReasonQueued}},
			wantQueue:   []string{"m"},
			wantRequeue: untilFromNow(t0.Add(29 * time.Minute)),
		},
		"waitTimeout 0s: busy at the key it has reached fails Busy": {
			key:        name2,
			lock:       daveLock(),
			reqs:       append(reqs(multi().WaitTimeout(0).Held(tgt1).FencingToken(77).QueuedAt(now)), daveOn2().Granted(t0.Add(-time.Minute), 50).Obj()),
			wantHolder: "dave#4",
			wantFinish: map[string]reqView{"m": {Phase: locksv1.PhaseFailed, Reason: locksv1.ReasonBusy,
				Message: key2 + " is busy and waitTimeout is 0s: locked by pull #4 (dave)", Token: 77, Held: "00", True: trueFailed, Event: locksv1.ReasonBusy}},
			wantRequeue: untilFromNow(t0.Add(29 * time.Minute)),
		},
		"the held first key leaves the message of the key it waits for alone": {
			key:        name1,
			lock:       lock1HeldByM,
			reqs:       reqs(mHolds1()),
			wantHolder: "carol#9",
		},
	}
	runDecideCases(t, cases)
}

// Two keys deciding one multi-lock request in turn must reach a fixed point: neither key may
// overwrite what the other wrote, or each write triggers the other key forever.
func TestDecideMultiLockSettles(t *testing.T) {
	cfg := testConfig()
	w := newWorld(t)
	w.add(makeReq("d").Owner("dave", 4).Targets(tgt2).Obj())
	at := now
	w.decide(name2, at, cfg) // dave holds tgt2
	w.add(makeReq("m").Owner("carol", 9).Targets(tgt2, tgt1).Obj())

	settle := func(what string) {
		t.Helper()
		for round := 0; round < 6; round++ {
			d1 := w.decide(name1, at, cfg)
			d2 := w.decide(name2, at, cfg)
			if empty(d1) && empty(d2) {
				return
			}
			at = at.Add(time.Second)
			if round == 5 {
				t.Fatalf("%s: keys still rewrite each other after %d rounds:\nkey1:\n%skey2:\n%s", what, round+1, describeDecision(d1), describeDecision(d2))
			}
		}
	}
	settle("carol waits for dave's tgt2")
	m := w.get("m")
	if diff := cmp.Diff([]bool{false, true}, []bool{m.Status.Locks[0].Held, m.Status.Locks[1].Held}); diff != "" {
		t.Errorf("held (spec order tgt2, tgt1) (-want +got):\n%s", diff)
	}
	if got, want := findCond(m.Status.Conditions, locksv1.ConditionGranted).Message, "locked by pull #4 (dave); position 1 of 1"; got != want {
		t.Errorf("message = %q, want %q (the key it waits for speaks)", got, want)
	}
	if m.Status.QueuePosition != 1 || m.Status.Phase != locksv1.PhasePending {
		t.Errorf("phase %s position %d, want Pending at 1", m.Status.Phase, m.Status.QueuePosition)
	}

	w.del(w.get("d").UID) // dave is done
	settle("dave gone")
	m = w.get("m")
	if m.Status.Phase != locksv1.PhaseGranted || !m.Status.Locks[0].Held || !m.Status.Locks[1].Held {
		t.Fatalf("m = %s %+v, want Granted holding both", m.Status.Phase, m.Status.Locks)
	}
	top := max(w.locks[name1].Status.FencingToken, w.locks[name2].Status.FencingToken)
	if m.Status.FencingToken != top {
		t.Errorf("FencingToken = %d, want the highest of its keys' tokens %d", m.Status.FencingToken, top)
	}
	for _, n := range []string{name1, name2} {
		if h := w.locks[n].Status.Holder; h == nil || h.ExpiresAt == nil || !h.ExpiresAt.Equal(m.Status.ExpiresAt) {
			t.Errorf("ProjectLock %s holder %+v: want carol with expiresAt %v", n, h, m.Status.ExpiresAt)
		}
	}
}

// `kubectl delete projectlock` is a force-unlock. The ProjectLock's finalizer keeps it
// until its holders are told; the waiters then create it anew (docs/protocol.md, step 2).
func TestDecideForceUnlock(t *testing.T) {
	grant30 := t0.Add(30 * time.Minute)
	claimant := func(token int64) *wrappers.LockRequestWrapper {
		return makeReq("c").Owner("alice", 100).Granted(t0.Add(-5*time.Minute), token)
	}
	forceMsg := fmt.Sprintf("ProjectLock %s was deleted: the lock on %s was force-unlocked", name1, key1)
	unlocked := func(token int64, held string) reqView {
		return reqView{Phase: locksv1.PhaseReleased, Reason: locksv1.ReasonForceUnlocked, Message: forceMsg,
			Token: token, Held: held, True: trueEnded, Event: locksv1.ReasonForceUnlocked}
	}
	deleting := func(holders ...*locksv1.LockRequest) *locksv1.ProjectLock {
		pl := makeLock(tgt1).token(41).holder(t0.Add(-5*time.Minute), holders...).Obj()
		pl.Finalizers = []string{locksv1.ReleaseHoldersFinalizer}
		ts := metav1.NewTime(t0)
		pl.DeletionTimestamp = &ts
		return pl
	}
	runDecideCases(t, map[string]decideCase{
		"a deleted ProjectLock: its holder is told, then the finalizer goes; nobody is granted on it": {
			lock:        deleting(claimant(41).Obj()),
			reqs:        reqs(claimant(41), bobWaits()),
			wantFinish:  map[string]reqView{"c": unlocked(41, "0")},
			wantRelease: true,
		},
		"a multi-lock holder loses all its locks": {
			lock:        deleting(makeReq("c").Owner("alice", 100).Targets(tgt1, tgt2).Granted(t0.Add(-5*time.Minute), 41).Obj()),
			reqs:        reqs(makeReq("c").Owner("alice", 100).Targets(tgt1, tgt2).Granted(t0.Add(-5*time.Minute), 41), bobWaits()),
			wantFinish:  map[string]reqView{"c": unlocked(41, "00")},
			wantRelease: true,
		},
		"a holder that is gone or already final needs no write": {
			lock:        deleting(claimant(41).Obj(), makeReq("gone").Owner("alice", 100).Granted(t0, 41).Obj()),
			reqs:        reqs(claimant(41).Phase(locksv1.PhaseReleased), bobWaits()),
			wantRelease: true,
		},
		"without the finalizer (removed by hand) the holders are still told": {
			lock: func() *locksv1.ProjectLock {
				pl := deleting(claimant(41).Obj())
				pl.Finalizers = nil
				return pl
			}(),
			reqs:       reqs(claimant(41)),
			wantFinish: map[string]reqView{"c": unlocked(41, "0")},
		},
		"a claimant the ProjectLock does not list (it was deleted past its finalizer) is told; the next is granted": {
			lock:        createdLock(),
			reqs:        reqs(claimant(41), bobWaits()),
			wantHolder:  "bob#7",
			wantLock:    &lockView{Holder: "pull #7 (bob)", Requests: []string{"w"}, Token: createdRV, Expires: grant30},
			wantFinish:  map[string]reqView{"c": unlocked(41, "0")},
			wantGrant:   map[string]reqView{"w": bobGranted(createdRV, grant30)},
			wantRequeue: untilFromNow(grant30),
		},
		"with nobody waiting such a claimant is told and no ProjectLock is created": {
			reqs:       reqs(claimant(41)),
			wantFinish: map[string]reqView{"c": unlocked(41, "0")},
		},
	})
}

// The queue cap fails newcomers, never a request already queued.
func TestDecideQueueCap(t *testing.T) {
	capped := testConfig()
	capped.QueueCap = 2
	h := aliceHolder().Obj()
	hExpires := t0.Add(25 * time.Minute)
	w1 := func() *wrappers.LockRequestWrapper {
		return makeReq("w1").Owner("bob", 1).QueuedAt(t0.Add(-3 * time.Minute))
	}
	w2 := func() *wrappers.LockRequestWrapper {
		return makeReq("w2").Owner("carol", 2).QueuedAt(t0.Add(-2 * time.Minute))
	}
	w3 := func() *wrappers.LockRequestWrapper {
		return makeReq("w3").Owner("erin", 5).QueuedAt(t0.Add(-1 * time.Minute))
	}
	newcomer := func() *wrappers.LockRequestWrapper { return makeReq("n").Owner("dave", 3) }
	pending := func(msg string, pos int32, event string) reqView {
		return reqView{Phase: locksv1.PhasePending, Reason: locksv1.ReasonQueued, Message: msg, Position: pos, Held: "0", True: truePending, Event: event}
	}
	full := map[string]reqView{"n": {Phase: locksv1.PhaseFailed, Reason: locksv1.ReasonQueueFull,
		Message: fmt.Sprintf("the queue for %s is full (2 waiting, the operator's cap); try again later", key1),
		Held:    "0", True: trueFailed, Event: locksv1.ReasonQueueFull}}
	twoWaiting := map[string]reqView{
		"w1": pending(lockedByAlice+"; position 1 of 2", 1, ""),
		"w2": pending(lockedByAlice+"; position 2 of 2", 2, ""),
	}
	aliceWithQueue := func(expires time.Time, requests []string, q ...string) *lockView {
		return &lockView{Holder: "pull #100 (alice)", Requests: requests, Token: 41, Queue: q, Length: int32(len(q)), Expires: expires}
	}
	// overCap is the decision on newcomer n when w1 and w2 fill the queue to its cap: n fails
	// QueueFull and the queue stays as it was.
	overCap := func(n *wrappers.LockRequestWrapper) decideCase {
		return decideCase{
			cfg:         &capped,
			lock:        aliceLock(h),
			reqs:        reqs(aliceHolder(), w1(), w2(), n),
			wantHolder:  "alice#100",
			wantLock:    aliceWithQueue(hExpires, []string{"h"}, "w1:Normal", "w2:Normal"),
			wantFinish:  full,
			wantWaiting: twoWaiting,
			wantQueue:   []string{"w1", "w2"},
			wantRequeue: untilFromNow(hExpires),
		}
	}

	cases := map[string]decideCase{
		"a newcomer over the cap fails QueueFull": overCap(newcomer()),
		"requests already queued are never failed by the cap": {
			cfg:        &capped,
			lock:       aliceLock(h),
			reqs:       reqs(aliceHolder(), w1(), w2(), w3()),
			wantHolder: "alice#100",
			wantLock:   aliceWithQueue(hExpires, []string{"h"}, "w1:Normal", "w2:Normal", "w3:Normal"),
			wantWaiting: map[string]reqView{
				"w1": pending(lockedByAlice+"; position 1 of 3", 1, ""),
				"w2": pending(lockedByAlice+"; position 2 of 3", 2, ""),
				"w3": pending(lockedByAlice+"; position 3 of 3", 3, ""),
			},
			wantQueue:   []string{"w1", "w2", "w3"},
			wantRequeue: untilFromNow(hExpires),
		},
		"a Critical newcomer cannot push the queue past the cap": overCap(newcomer().Priority(locksv1.PriorityCritical)),
		"the holder's own identity re-enters however full the queue": {
			cfg:        &capped,
			lock:       aliceLock(h),
			reqs:       reqs(aliceHolder(), w1(), w2(), makeReq("r").Owner("alice", 100)),
			wantHolder: "alice#100",
			wantLock:   aliceWithQueue(t0.Add(30*time.Minute), []string{"h", "r"}, "w1:Normal", "w2:Normal"),
			wantGrant: map[string]reqView{"r": {Phase: locksv1.PhaseGranted, Reason: locksv1.ReasonGranted,
				Message: grantedMsg(key1, 41, t0.Add(30*time.Minute)), Token: 41, Held: "1", True: trueGranted, Event: locksv1.ReasonGranted}},
			wantWaiting: twoWaiting,
			wantQueue:   []string{"w1", "w2"},
			wantRequeue: untilFromNow(hExpires),
		},
		"a hand-off in the same decision makes room for a newcomer": {
			cfg:        &capped,
			lock:       aliceLock(h),
			reqs:       reqs(aliceHolder().Release(), w1(), w2(), newcomer()),
			wantHolder: "bob#1",
			wantLock: &lockView{Holder: "pull #1 (bob)", Requests: []string{"w1"}, Token: 42, Queue: []string{"w2:Normal", "n:Normal"}, Length: 2,
				Expires: t0.Add(30 * time.Minute)},
			wantFinish: map[string]reqView{"h": {Phase: locksv1.PhaseReleased, Reason: locksv1.ReasonReleased, Message: "released",
				Token: 41, Held: "0", True: trueReleased, Event: locksv1.ReasonReleased}},
			wantGrant: map[string]reqView{"w1": {Phase: locksv1.PhaseGranted, Reason: locksv1.ReasonGranted,
				Message: grantedMsg(key1, 42, t0.Add(30*time.Minute)), Token: 42, Held: "1", True: trueGranted, Event: locksv1.ReasonGranted}},
			wantWaiting: map[string]reqView{
				"w2": pending("locked by pull #1 (bob); position 1 of 2", 1, ""),
				"n":  pending("locked by pull #1 (bob); position 2 of 2", 2, locksv1.ReasonQueued),
			},
			wantQueue:   []string{"w2", "n"},
			wantRequeue: untilFromNow(t0.Add(30 * time.Minute)),
		},
	}
	runDecideCases(t, cases)
}

// A grant listed by the ProjectLock whose own write never landed (a crash, or a lost race, between
// the two writes) is re-issued by a decision that writes the ProjectLock again, with a new token;
// or, if its command froze since, taken back before the ProjectLock stops listing it
// (docs/protocol.md, steps 3 and 4).
func TestDecideUnconfirmedGrant(t *testing.T) {
	grant30 := t0.Add(30 * time.Minute)
	applyFrozen, _ := ResolveFreezes([]locksv1.CommandLock{commandLock("apply", true, "maintenance window", nil)}, FreezeFlags{}, now)
	maintenance := "Apply commands are locked globally: maintenance window"
	// bob was listed at token 41; the ProjectLock has been written since (resourceVersion 90).
	listed := func(holders ...*locksv1.LockRequest) *locksv1.ProjectLock {
		return makeLock(tgt1).token(41).holder(now, holders...).rv("90").Obj()
	}
	runDecideCases(t, map[string]decideCase{
		"re-issued with the ProjectLock's resourceVersion as its token": {
			lock:        listed(bobWaits().Obj()),
			reqs:        reqs(bobWaits()),
			wantHolder:  "bob#7",
			wantLock:    &lockView{Holder: "pull #7 (bob)", Requests: []string{"w"}, Token: 90, Expires: grant30},
			wantGrant:   map[string]reqView{"w": bobGranted(90, grant30)},
			wantRequeue: untilFromNow(grant30),
		},
		"a re-entrant request whose write never landed: its identity's holders all take the new token": {
			lock:       listed(bobWaits().Granted(now, 41).Obj(), makeReq("w2").Owner("bob", 7).Obj()),
			reqs:       reqs(bobWaits().Granted(now, 41), makeReq("w2").Owner("bob", 7).QueuedAt(t0.Add(-time.Minute))),
			wantHolder: "bob#7",
			wantLock:   &lockView{Holder: "pull #7 (bob)", Requests: []string{"w", "w2"}, Token: 90, Expires: grant30},
			wantGrant: map[string]reqView{
				"w":  {Phase: locksv1.PhaseGranted, Reason: locksv1.ReasonGranted, Message: grantedMsg(key1, 90, grant30), Token: 90, Held: "1", True: trueGranted},
				"w2": bobGranted(90, grant30),
			},
			wantRequeue: untilFromNow(grant30),
		},
		"its command froze since: it waits again, and is told before the ProjectLock drops it": {
			lock:        listed(bobWaits().Command("apply").Obj()),
			reqs:        reqs(bobWaits().Command("apply")),
			freezes:     applyFrozen,
			wantLock:    &lockView{Token: 41, Queue: []string{"w:Normal"}, Length: 1},
			wantQueue:   []string{"w"},
			wantRequeue: 0,
			wantDemote: map[string]reqView{"w": {Phase: locksv1.PhasePending, Reason: locksv1.ReasonCommandLocked,
				Message: maintenance + "; position 1 of 1", Position: 1, Held: "0", True: truePending, Event: locksv1.ReasonCommandLocked}},
		},
		"frozen, and the holder leaving with it is gone with a token nobody knows: it is demoted in the write that only takes the leavers out": {
			// The Again split must not drop an unconfirmed grant from the holders without
			// writing it first: the held write of the decision that listed it may still be in
			// flight, and would land on a request the ProjectLock no longer lists (the spin
			// model's mutation 8).
			lock:      listed(makeReq("g").Owner("bob", 7).Obj(), bobWaits().Command("apply").Obj()),
			reqs:      reqs(bobWaits().Command("apply"), makeReq("c").Owner("carol", 9).QueuedAt(t0.Add(-time.Minute))),
			freezes:   applyFrozen,
			wantLock:  &lockView{Token: 41},
			wantAgain: true,
			wantDemote: map[string]reqView{"w": {Phase: locksv1.PhasePending, Reason: locksv1.ReasonCommandLocked,
				Message: maintenance + "; position 1 of 1", Position: 1, Held: "0", True: truePending, Event: locksv1.ReasonCommandLocked}},
		},
		"a holder whose write landed keeps its grant under the freeze": {
			lock:        listed(bobWaits().Command("apply").Granted(now, 41).Obj()),
			reqs:        reqs(bobWaits().Command("apply").Granted(now, 41)),
			freezes:     applyFrozen,
			wantHolder:  "bob#7",
			wantRequeue: untilFromNow(now.Truncate(time.Second).Add(30 * time.Minute)),
		},
	})
}

// The token of a key's next holder is above every token its leaving holder showed, per key or
// for the whole request — also a multi-lock holder whose other key was granted after this
// ProjectLock was last written (docs/protocol.md, TM). The spin model found that case.
func TestDecideTokenAboveLeavingHolders(t *testing.T) {
	grant30 := t0.Add(30 * time.Minute)
	// m held tgt1 at 41 and then tgt2 at 99, a ProjectLock written after tgt1's (revision 50).
	m := func() *wrappers.LockRequestWrapper {
		return makeReq("m").Owner("alice", 100).Targets(tgt1, tgt2).Granted(t0.Add(-5*time.Minute), 99)
	}
	lockOf := func(holder *locksv1.LockRequest) *locksv1.ProjectLock {
		return makeLock(tgt1).token(41).holder(t0.Add(-5*time.Minute), holder).rv("50").Obj()
	}
	runDecideCases(t, map[string]decideCase{
		"a releasing holder: the next token is above its request token": {
			lock:       lockOf(m().Obj()),
			reqs:       []*locksv1.LockRequest{tokenFor(m().Release().Obj(), 0, 41), bobWaits().Obj()},
			wantHolder: "bob#7",
			wantLock:   &lockView{Holder: "pull #7 (bob)", Requests: []string{"w"}, Token: 100, Expires: grant30},
			wantFinish: map[string]reqView{"m": {Phase: locksv1.PhaseReleased, Reason: locksv1.ReasonReleased, Message: "released",
				Token: 99, Held: "00", True: trueReleased, Event: locksv1.ReasonReleased}},
			wantGrant:   map[string]reqView{"w": bobGranted(100, grant30)},
			wantRequeue: untilFromNow(grant30),
		},
		"a deleted holder whose delete event said its token": {
			lock:        lockOf(m().Obj()),
			reqs:        reqs(bobWaits()),
			gone:        map[types.UID]int64{"uid-m": 99},
			wantHolder:  "bob#7",
			wantLock:    &lockView{Holder: "pull #7 (bob)", Requests: []string{"w"}, Token: 100, Expires: grant30},
			wantGrant:   map[string]reqView{"w": bobGranted(100, grant30)},
			wantRequeue: untilFromNow(grant30),
		},
		"a deleted holder whose token nobody knows: take it out, grant on the next revision": {
			lock:      lockOf(m().Obj()),
			reqs:      reqs(bobWaits()),
			wantLock:  &lockView{Token: 41},
			wantAgain: true,
		},
	})
}

// tokenFor sets lr's per-key token for its i-th target (spec order): a request that holds its
// keys at different tokens, its request-level token the highest.
func tokenFor(lr *locksv1.LockRequest, i int, token int64) *locksv1.LockRequest {
	lr.Status.Locks[i].FencingToken = token
	return lr
}

// A demotion is written even when the request's status already reads like it (say, a queue
// write of this manager's, made under the same freeze, is what its cache shows): that write is
// what makes a held write still in flight for the request fail, before the ProjectLock drops
// it. Skipping it as "unchanged" let the held write land on a request no ProjectLock listed
// (the seeded simulation, seed 10). And the write must change the stored object (hole A of
// issue #26): the API server answers an update equal to the stored object with the same
// resourceVersion, which fences nothing, so every demotion raises status.fences.
func TestDecideDemotesEvenWhenUnchanged(t *testing.T) {
	applyFrozen, _ := ResolveFreezes([]locksv1.CommandLock{commandLock("apply", true, "maintenance window", nil)}, FreezeFlags{}, now)
	bob := makeReq("w").Owner("bob", 7).Command("apply").QueuedAt(t0.Add(-time.Minute)).Obj()
	pl := makeLock(tgt1).token(41).holder(now, bob).rv("90").Obj()
	in := Input{Name: pl.Name, Lock: pl, Requests: []*locksv1.LockRequest{bob}, Freezes: applyFrozen, Now: now, Config: testConfig()}
	first := Decide(in)
	if len(first.Demote) != 1 {
		t.Fatalf("first decision: Demote = %d updates, want 1", len(first.Demote))
	}
	// The request now shows the status the demotion writes; the ProjectLock still lists it.
	again := bob.DeepCopy()
	again.Status = first.Demote[0].Status
	in.Requests = []*locksv1.LockRequest{again}
	d := Decide(in)
	if len(d.Demote) != 1 || d.Demote[0].Request.Name != "w" {
		t.Fatalf("Demote = %v, want w written again before the ProjectLock drops it", views(d.Demote))
	}
	if d.Lock == nil || d.Lock.Holder != nil {
		t.Errorf("Lock = %+v, want the ProjectLock written without holders", d.Lock)
	}
	for i, dec := range []Decision{first, d} {
		read := in.Requests[0].Status
		if i == 0 {
			read = bob.Status
		}
		got := dec.Demote[0].Status
		if got.Fences != read.Fences+1 {
			t.Errorf("decision %d: the demotion writes fences %d over %d read, want one more", i, got.Fences, read.Fences)
		}
		if equalStatus(read, got) {
			t.Errorf("decision %d: the demotion writes the status read: the API server would keep its resourceVersion", i)
		}
	}
}

package queue

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

const lockedByAlice = "locked by pull #100 (alice)"

// grantedMsg is the Granted condition's message for a grant of key with token until exp.
func grantedMsg(key string, token int64, exp time.Time) string {
	return fmt.Sprintf("holds %s (fencing token %d) until %s", key, token, exp.UTC().Format(time.RFC3339))
}

// alice holds tgt1 since five minutes before t0 with token 41 (expires t0+25m).
func aliceHolder() *wrappers.LockRequestWrapper {
	return makeReq("h").Owner("alice", 100).Granted(t0.Add(-5*time.Minute), 41)
}

// bobWaits is bob's request w, queued on tgt1 a minute before t0.
func bobWaits() *wrappers.LockRequestWrapper {
	return makeReq("w").Owner("bob", 7).QueuedAt(t0.Add(-time.Minute))
}

// createdRV is the resourceVersion of createdLock: the token of its first grant.
const createdRV = 57

// createdLock is tgt1's ProjectLock as the controller has just created it.
func createdLock() *locksv1.ProjectLock { return createdLockOf(tgt1) }

// createdLockOf is t's ProjectLock as the controller has just created it.
func createdLockOf(t locksv1.LockTarget) *locksv1.ProjectLock {
	pl := makeLock(t).Obj()
	pl.ResourceVersion = fmt.Sprint(createdRV)
	pl.Finalizers = []string{locksv1.ReleaseHoldersFinalizer}
	return pl
}

func aliceLock(holders ...*locksv1.LockRequest) *locksv1.ProjectLock {
	return makeLock(tgt1).token(41).holder(t0.Add(-5*time.Minute), holders...).Obj()
}

// decideCase is one Decide call and what it must decide.
type decideCase struct {
	now     time.Time // zero: now
	cfg     *Config   // nil: testConfig()
	key     string    // zero: name1
	lock    *locksv1.ProjectLock
	reqs    []*locksv1.LockRequest
	freezes Freezes
	lost    map[types.UID]string
	gone    map[types.UID]int64

	wantCreate  bool
	wantHolder  string
	wantLock    *lockView
	wantFinish  map[string]reqView
	wantGrant   map[string]reqView
	wantWaiting map[string]reqView
	wantQueue   []string
	wantRequeue time.Duration
	// wantDemote, wantAgain and wantRelease (ReleaseFinalizer) are checked in every case; their
	// zero values say a decision demotes nobody, needs no second pass and keeps the finalizer.
	wantDemote  map[string]reqView
	wantAgain   bool
	wantRelease bool
}

func (tc decideCase) input() Input {
	in := Input{Now: tc.now, Name: tc.key, Lock: tc.lock, Requests: tc.reqs, Freezes: tc.freezes, LostHolders: tc.lost, GoneTokens: tc.gone}
	if in.Now.IsZero() {
		in.Now = now
	}
	if in.Name == "" {
		in.Name = name1
	}
	in.Config = testConfig()
	if tc.cfg != nil {
		in.Config = *tc.cfg
	}
	return in
}

func runDecideCases(t *testing.T, cases map[string]decideCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := Decide(tc.input())
			if diff := cmp.Diff(tc.wantCreate, d.CreateLock); diff != "" {
				t.Errorf("CreateLock (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantHolder, holderText(d)); diff != "" {
				t.Errorf("Holder (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantLock, lockViewOf(d.Lock)); diff != "" {
				t.Errorf("Lock (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantFinish, views(d.Finish)); diff != "" {
				t.Errorf("Finish (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantGrant, views(d.Grant)); diff != "" {
				t.Errorf("Grant (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWaiting, views(d.Waiting)); diff != "" {
				t.Errorf("Waiting (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantQueue, names(d.Queue)); diff != "" {
				t.Errorf("Queue (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantRequeue, d.RequeueAfter); diff != "" {
				t.Errorf("RequeueAfter (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantDemote, views(d.Demote)); diff != "" {
				t.Errorf("Demote (-want +got):\n%s", diff)
			}
			if d.Again != tc.wantAgain {
				t.Errorf("Again = %v, want %v", d.Again, tc.wantAgain)
			}
			if d.ReleaseFinalizer != tc.wantRelease {
				t.Errorf("ReleaseFinalizer = %v, want %v", d.ReleaseFinalizer, tc.wantRelease)
			}
		})
	}
}

// bobGranted is the grant of bob's request w on key1 with token, until exp.
func bobGranted(token int64, exp time.Time) reqView {
	return reqView{Phase: locksv1.PhaseGranted, Reason: locksv1.ReasonGranted, Message: grantedMsg(key1, token, exp),
		Token: token, Held: "1", True: trueGranted, Event: locksv1.ReasonGranted}
}

// untilFromNow is the RequeueAfter for a deadline at t, seen from now.
func untilFromNow(t time.Time) time.Duration { return t.Sub(now) }

// A free key and one request: the ProjectLock is created, the request granted, every
// field of both statuses as written.
// No ProjectLock yet: create it, and decide nothing else until it exists — a grant's token is
// the resourceVersion of the object it is written to.
func TestDecideCreatesProjectLockFirst(t *testing.T) {
	in := Input{Now: now, Name: name1, Requests: reqs(makeReq("a").Owner("alice", 100)), Config: testConfig()}
	want := Decision{CreateLock: true, Writes: []Write{{Kind: WriteCreate, Step: StepCreate, Object: name1,
		Why: "someone needs the key; a grant is decided on the created ProjectLock"}}}
	if diff := cmp.Diff(want, Decide(in)); diff != "" {
		t.Errorf("Decision (-want +got):\n%s", diff)
	}
	// Nobody needs it: a claimant of a ProjectLock that is gone is only told so.
	in.Requests = reqs(makeReq("a").Owner("alice", 100).Granted(t0, 7))
	d := Decide(in)
	if d.CreateLock || len(d.Finish) != 1 || d.Finish[0].Event.Reason != locksv1.ReasonForceUnlocked {
		t.Errorf("want only a ForceUnlocked finish, got create=%v:\n%s", d.CreateLock, describeDecision(d))
	}
}

func TestDecideGrantsFreeKey(t *testing.T) {
	cases := map[string]struct {
		tc          *wrappers.LockRequestWrapper
		lock        *locksv1.ProjectLock
		wantToken   int64
		wantExpires time.Time
	}{
		"a created ProjectLock: the token is its resourceVersion": {
			tc:          makeReq("a").Owner("alice", 100),
			lock:        makeLock(tgt1).rv("57").Obj(),
			wantToken:   57,
			wantExpires: t0.Add(30 * time.Minute),
		},
		"spec.ttl sets expiresAt": {
			tc:          makeReq("a").Owner("alice", 100).TTL(45 * time.Minute),
			lock:        makeLock(tgt1).rv("57").Obj(),
			wantToken:   57,
			wantExpires: t0.Add(45 * time.Minute),
		},
		"a free ProjectLock: the token is the resourceVersion the write replaces, above the last": {
			tc:          makeReq("a").Owner("alice", 100),
			lock:        makeLock(tgt1).token(41).rv("90").Obj(),
			wantToken:   90,
			wantExpires: t0.Add(30 * time.Minute),
		},
		"a token above the resourceVersion (written before tokens were revisions) counts on by one": {
			tc:          makeReq("a").Owner("alice", 100),
			lock:        makeLock(tgt1).token(41).rv("7").Obj(),
			wantToken:   42,
			wantExpires: t0.Add(30 * time.Minute),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := tc.tc.Obj()
			in := Input{Now: now, Name: name1, Lock: tc.lock, Requests: []*locksv1.LockRequest{req}, Config: testConfig()}
			d := Decide(in)

			if d.CreateLock {
				t.Errorf("CreateLock with a ProjectLock")
			}
			if d.Lock == nil {
				t.Fatalf("Decide wrote no ProjectLock status")
			}
			expires := metav1.NewTime(tc.wantExpires)
			since := metav1.NewTime(t0)
			wantLock := locksv1.ProjectLockStatus{
				Mode:        locksv1.ModeExclusive,
				HolderCount: 1,
				Holder: &locksv1.LockHolder{
					Owner: "alice", Pull: 100,
					Requests:  []locksv1.HolderRequest{{Name: "a", UID: "uid-a"}},
					Since:     since,
					ExpiresAt: &expires,
				},
				FencingToken:       tc.wantToken,
				ObservedGeneration: 1, // a created ProjectLock is at generation 1
				Conditions: []metav1.Condition{
					cond(locksv1.ConditionLocked, metav1.ConditionTrue, locksv1.ReasonHeld, lockedByAlice, 1, t0),
				},
			}
			if diff := cmp.Diff(wantLock, *d.Lock); diff != "" {
				t.Errorf("ProjectLock status (-want +got):\n%s", diff)
			}

			queued := metav1.NewMicroTime(now.Truncate(time.Microsecond))
			msg := grantedMsg(key1, tc.wantToken, tc.wantExpires)
			wantReq := locksv1.LockRequestStatus{
				Phase:              locksv1.PhaseGranted,
				Locks:              []locksv1.LockStatus{{Key: key1, Name: name1, Held: true, FencingToken: tc.wantToken}},
				FencingToken:       tc.wantToken,
				QueuedAt:           &queued,
				ArrivalRevision:    1000000000000,
				GrantedAt:          &since,
				ExpiresAt:          &expires,
				ObservedGeneration: 1,
				Conditions: []metav1.Condition{
					cond(locksv1.ConditionGranted, metav1.ConditionTrue, locksv1.ReasonGranted, msg, 1, t0),
					cond(locksv1.ConditionReady, metav1.ConditionTrue, locksv1.ReasonGranted, msg, 1, t0),
					cond(locksv1.ConditionReconciling, metav1.ConditionFalse, locksv1.ReasonGranted, "granted", 1, t0),
					cond(locksv1.ConditionStalled, metav1.ConditionFalse, locksv1.ReasonGranted, "granted", 1, t0),
				},
			}
			if len(d.Grant) != 1 {
				t.Fatalf("Grant = %d updates, want 1:\n%s", len(d.Grant), describeDecision(d))
			}
			if diff := cmp.Diff(wantReq, d.Grant[0].Status); diff != "" {
				t.Errorf("LockRequest status (-want +got):\n%s", diff)
			}
			wantEvent := &Event{"Normal", locksv1.ReasonGranted, fmt.Sprintf("granted %s to pull #100 (alice) (fencing token %d)", key1, tc.wantToken)}
			if diff := cmp.Diff(wantEvent, d.Grant[0].Event); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
			if len(d.Finish)+len(d.Waiting) != 0 || len(d.Queue) != 0 {
				t.Errorf("unexpected writes:\n%s", describeDecision(d))
			}
			if diff := cmp.Diff("alice#100", holderText(d)); diff != "" {
				t.Errorf("Holder (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantExpires.Sub(now), d.RequeueAfter); diff != "" {
				t.Errorf("RequeueAfter (-want +got):\n%s", diff)
			}
		})
	}
}

// A new request on a held key queues, with an actionable message and an event.
func TestDecideQueuesBehindHolder(t *testing.T) {
	h := aliceHolder().Obj()
	in := Input{Now: now, Name: name1, Lock: aliceLock(h), Config: testConfig(),
		Requests: []*locksv1.LockRequest{h, makeReq("b").Owner("bob", 7).Obj()}}
	d := Decide(in)

	wantMsg := "locked by pull #100 (alice); position 1 of 1"
	if diff := cmp.Diff(map[string]reqView{
		"b": {Phase: locksv1.PhasePending, Reason: locksv1.ReasonQueued, Message: wantMsg, Position: 1, Held: "0", True: truePending, Event: locksv1.ReasonQueued},
	}, views(d.Waiting)); diff != "" {
		t.Fatalf("Waiting (-want +got):\n%s", diff)
	}
	u := d.Waiting[0]
	if diff := cmp.Diff(&Event{"Normal", locksv1.ReasonQueued, wantMsg}, u.Event); diff != "" {
		t.Errorf("event (-want +got):\n%s", diff)
	}
	if u.Refresh {
		t.Errorf("a first Pending write is marked Refresh; the caller could defer it")
	}
	if u.Status.QueuedAt == nil || !u.Status.QueuedAt.Time.Equal(now.Truncate(time.Microsecond)) {
		t.Errorf("QueuedAt = %v, want %v", u.Status.QueuedAt, now.Truncate(time.Microsecond))
	}
	if diff := cmp.Diff(lockedByAlice, u.Status.BlockedBy); diff != "" {
		t.Errorf("BlockedBy (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&lockView{Holder: "pull #100 (alice)", Requests: []string{"h"}, Token: 41, Queue: []string{"b:Normal"}, Length: 1, Expires: t0.Add(25 * time.Minute)},
		lockViewOf(d.Lock)); diff != "" {
		t.Errorf("Lock (-want +got):\n%s", diff)
	}
	if len(d.Finish)+len(d.Grant) != 0 || d.CreateLock {
		t.Errorf("unexpected writes:\n%s", describeDecision(d))
	}
	if diff := cmp.Diff(untilFromNow(t0.Add(25*time.Minute)), d.RequeueAfter); diff != "" {
		t.Errorf("RequeueAfter (-want +got):\n%s", diff)
	}
}

func TestDecide(t *testing.T) {
	h := aliceHolder().Obj()
	hExpires := t0.Add(25 * time.Minute)
	grant30 := t0.Add(30 * time.Minute)
	bobHolds := func(token int64) *lockView {
		return &lockView{Holder: "pull #7 (bob)", Requests: []string{"w"}, Token: token, Expires: grant30}
	}
	pending := func(msg string, pos int32) reqView {
		return reqView{Phase: locksv1.PhasePending, Reason: locksv1.ReasonQueued, Message: msg, Position: pos, Held: "0", True: truePending}
	}
	finished := func(phase locksv1.LockRequestPhase, reason, msg string, token int64) reqView {
		trues := trueEnded
		if reason == locksv1.ReasonReleased {
			trues = trueReleased
		}
		return reqView{Phase: phase, Reason: reason, Message: msg, Token: token, Held: "0", True: trues, Event: reason}
	}
	failed := func(reason, msg string) reqView {
		return reqView{Phase: locksv1.PhaseFailed, Reason: reason, Message: msg, Held: "0", True: trueFailed, Event: reason}
	}
	// handedToBob is c, in which the key passes to bob's w with the next token, 42, for 30m.
	handedToBob := func(c decideCase) decideCase {
		c.wantHolder, c.wantLock, c.wantRequeue = "bob#7", bobHolds(42), untilFromNow(grant30)
		c.wantGrant = map[string]reqView{"w": bobGranted(42, grant30)}
		return c
	}
	renewed := aliceHolder().Obj()
	renewed.Spec.TTL = &metav1.Duration{Duration: 35 * time.Minute}
	renewed.Generation = 2
	expiredAtT0 := makeReq("h").Owner("alice", 100).Granted(t0.Add(-30*time.Minute), 41).Obj()

	cases := map[string]decideCase{
		// Release and deletion hand on in the same decision.
		"spec.release finishes the holder and grants the next, token + 1": handedToBob(decideCase{
			lock:       aliceLock(h),
			reqs:       reqs(aliceHolder().Release(), bobWaits()),
			wantFinish: map[string]reqView{"h": finished(locksv1.PhaseReleased, locksv1.ReasonReleased, "released", 41)},
		}),
		"a deleted holder (gone from the requests, its delete event seen) is replaced": handedToBob(decideCase{
			lock: aliceLock(h),
			reqs: reqs(bobWaits()),
			gone: map[types.UID]int64{"uid-h": 41},
		}),
		"a holder being deleted (a finalizer keeps it) is told before the next is granted": handedToBob(decideCase{
			lock:       aliceLock(h),
			reqs:       reqs(aliceHolder().Deleting(t0.Add(-time.Second)), bobWaits()),
			wantFinish: map[string]reqView{"h": finished(locksv1.PhaseReleased, locksv1.ReasonReleased, "deleted while it held the lock", 41)},
		}),
		"a waiter released before its grant leaves the queue": {
			lock:        aliceLock(h),
			reqs:        reqs(aliceHolder(), bobWaits().Release()),
			wantHolder:  "alice#100",
			wantFinish:  map[string]reqView{"w": finished(locksv1.PhaseReleased, locksv1.ReasonReleased, "released before it was granted", 0)},
			wantRequeue: untilFromNow(hExpires),
		},

		// TTL.
		"an expired holder finishes Expired and the next is granted": handedToBob(decideCase{
			lock:       aliceLock(expiredAtT0),
			reqs:       []*locksv1.LockRequest{expiredAtT0, bobWaits().Obj()},
			wantFinish: map[string]reqView{"h": finished(locksv1.PhaseExpired, locksv1.ReasonExpired, "the grant expired after its ttl of 30m0s", 41)},
		}),
		"a grant expires at exactly grantedAt + ttl": {
			now:        t0,
			lock:       aliceLock(expiredAtT0),
			reqs:       []*locksv1.LockRequest{expiredAtT0},
			wantLock:   &lockView{Token: 41},
			wantFinish: map[string]reqView{"h": finished(locksv1.PhaseExpired, locksv1.ReasonExpired, "the grant expired after its ttl of 30m0s", 41)},
		},
		"a grant one nanosecond from expiry stays and requeues then": {
			now:         t0.Add(-time.Nanosecond),
			lock:        aliceLock(expiredAtT0),
			reqs:        []*locksv1.LockRequest{expiredAtT0},
			wantHolder:  "alice#100",
			wantRequeue: time.Nanosecond,
		},
		"renewing (raising spec.ttl) keeps the holder and moves expiresAt to the renewal + ttl": {
			lock:       aliceLock(h),
			reqs:       []*locksv1.LockRequest{renewed},
			wantHolder: "alice#100",
			wantLock:   &lockView{Holder: "pull #100 (alice)", Requests: []string{"h"}, Token: 41, Expires: t0.Add(35 * time.Minute)},
			wantGrant: map[string]reqView{"h": {Phase: locksv1.PhaseGranted, Reason: locksv1.ReasonGranted,
				Message: grantedMsg(key1, 41, t0.Add(35*time.Minute)), Token: 41, Held: "1", True: trueGranted, Event: locksv1.ReasonRenewed}},
			wantRequeue: untilFromNow(t0.Add(35 * time.Minute)),
		},

		// Wait timeouts.
		"waitTimeout 0s on a busy key fails Busy": {
			lock:       aliceLock(h),
			reqs:       reqs(aliceHolder(), makeReq("n").Owner("bob", 7).WaitTimeout(0)),
			wantHolder: "alice#100",
			wantFinish: map[string]reqView{"n": failed(locksv1.ReasonBusy,
				key1+" is busy and waitTimeout is 0s: "+lockedByAlice)},
			wantRequeue: untilFromNow(hExpires),
		},
		"waitTimeout 0s on a free key is granted": {
			lock:        createdLock(),
			reqs:        reqs(makeReq("n").Owner("bob", 7).WaitTimeout(0)),
			wantHolder:  "bob#7",
			wantLock:    &lockView{Holder: "pull #7 (bob)", Requests: []string{"n"}, Token: createdRV, Expires: grant30},
			wantGrant:   map[string]reqView{"n": {Phase: locksv1.PhaseGranted, Reason: locksv1.ReasonGranted, Message: grantedMsg(key1, createdRV, grant30), Token: createdRV, Held: "1", True: trueGranted, Event: locksv1.ReasonGranted}},
			wantRequeue: untilFromNow(grant30),
		},
		"an elapsed waitTimeout fails Timeout": {
			lock:        aliceLock(h),
			reqs:        reqs(aliceHolder(), makeReq("w").Owner("bob", 7).QueuedAt(t0.Add(-10*time.Minute)).WaitTimeout(10*time.Minute)),
			wantHolder:  "alice#100",
			wantFinish:  map[string]reqView{"w": failed(locksv1.ReasonTimeout, "not granted within waitTimeout 10m0s")},
			wantRequeue: untilFromNow(hExpires),
		},
		"the wait deadline is the requeue when it is nearest": {
			lock:        aliceLock(h),
			reqs:        reqs(aliceHolder(), bobWaits().WaitTimeout(5*time.Minute)),
			wantHolder:  "alice#100",
			wantLock:    &lockView{Holder: "pull #100 (alice)", Requests: []string{"h"}, Token: 41, Queue: []string{"w:Normal"}, Length: 1, Expires: hExpires},
			wantWaiting: map[string]reqView{"w": pending(lockedByAlice+"; position 1 of 1", 1)},
			wantQueue:   []string{"w"},
			wantRequeue: untilFromNow(t0.Add(4 * time.Minute)),
		},
		"the holder's expiry is the requeue when it is nearest": {
			lock:        aliceLock(h),
			reqs:        reqs(aliceHolder(), bobWaits().WaitTimeout(time.Hour)),
			wantHolder:  "alice#100",
			wantLock:    &lockView{Holder: "pull #100 (alice)", Requests: []string{"h"}, Token: 41, Queue: []string{"w:Normal"}, Length: 1, Expires: hExpires},
			wantWaiting: map[string]reqView{"w": pending(lockedByAlice+"; position 1 of 1", 1)},
			wantQueue:   []string{"w"},
			wantRequeue: untilFromNow(hExpires),
		},

		// Re-entrancy.
		"the holder's owner+pull re-enters at once, ahead of the queue, same token": {
			lock:       aliceLock(h),
			reqs:       reqs(aliceHolder(), makeReq("w").Owner("bob", 7).QueuedAt(t0.Add(-2*time.Minute)), makeReq("r").Owner("alice", 100).Command("apply")),
			wantHolder: "alice#100",
			wantLock:   &lockView{Holder: "pull #100 (alice)", Requests: []string{"h", "r"}, Token: 41, Queue: []string{"w:Normal"}, Length: 1, Expires: grant30},
			wantGrant: map[string]reqView{"r": {Phase: locksv1.PhaseGranted, Reason: locksv1.ReasonGranted, Message: grantedMsg(key1, 41, grant30),
				Token: 41, Held: "1", True: trueGranted, Event: locksv1.ReasonGranted}},
			wantWaiting: map[string]reqView{"w": pending(lockedByAlice+"; position 1 of 1", 1)},
			wantQueue:   []string{"w"},
			wantRequeue: untilFromNow(hExpires),
		},
		"the same owner with another pull is not the holder": {
			lock:       aliceLock(h),
			reqs:       reqs(aliceHolder(), makeReq("w").Owner("bob", 7).QueuedAt(t0.Add(-2*time.Minute)), makeReq("r").Owner("alice", 101)),
			wantHolder: "alice#100",
			wantLock:   &lockView{Holder: "pull #100 (alice)", Requests: []string{"h"}, Token: 41, Queue: []string{"w:Normal", "r:Normal"}, Length: 2, Expires: hExpires},
			wantWaiting: map[string]reqView{
				"w": pending(lockedByAlice+"; position 1 of 2", 1),
				"r": func() reqView {
					v := pending(lockedByAlice+"; position 2 of 2", 2)
					v.Event = locksv1.ReasonQueued
					return v
				}(),
			},
			wantQueue:   []string{"w", "r"},
			wantRequeue: untilFromNow(hExpires),
		},

		// The holder's Lease lapsed.
		"a lost holder is released (HolderLost) and the next granted": handedToBob(decideCase{
			lock:       aliceLock(h),
			reqs:       reqs(aliceHolder(), bobWaits()),
			lost:       map[types.UID]string{"uid-h": "Lease team-a/runner-1 expired"},
			wantFinish: map[string]reqView{"h": finished(locksv1.PhaseReleased, locksv1.ReasonHolderLost, "Lease team-a/runner-1 expired", 41)},
		}),

		// A spec the operator cannot honor.
		"ttl over MaxTTL fails Invalid with what to ask for": {
			// Nobody holds or waits, so no ProjectLock is created for the key.
			reqs: reqs(makeReq("n").Owner("bob", 7).TTL(3 * time.Hour)),
			wantFinish: map[string]reqView{"n": failed(locksv1.ReasonInvalid,
				"spec.ttl 3h0m0s is over this operator's maximum of 2h0m0s; ask for at most 2h0m0s")},
		},
		"ttl at MaxTTL is fine": {
			lock:        createdLock(),
			reqs:        reqs(makeReq("n").Owner("bob", 7).TTL(2 * time.Hour)),
			wantHolder:  "bob#7",
			wantLock:    &lockView{Holder: "pull #7 (bob)", Requests: []string{"n"}, Token: createdRV, Expires: t0.Add(2 * time.Hour)},
			wantGrant:   map[string]reqView{"n": {Phase: locksv1.PhaseGranted, Reason: locksv1.ReasonGranted, Message: grantedMsg(key1, createdRV, t0.Add(2*time.Hour)), Token: createdRV, Held: "1", True: trueGranted, Event: locksv1.ReasonGranted}},
			wantRequeue: untilFromNow(t0.Add(2 * time.Hour)),
		},
		"final requests are left alone": {
			lock:        aliceLock(h),
			reqs:        reqs(aliceHolder(), makeReq("old").Owner("bob", 7).QueuedAt(t0.Add(-time.Hour)).Phase(locksv1.PhaseFailed)),
			wantHolder:  "alice#100",
			wantRequeue: untilFromNow(hExpires),
		},
	}
	runDecideCases(t, cases)
}

// Time is requeue, not polling: following RequeueAfter alone must reach the expiry, and a grant
// ends exactly at the expiresAt it showed the holder and the ProjectLock, also for ttls that
// are not whole seconds (the API accepts "1500ms" or "90.5s").
func TestDecideExpiryFollowsRequeue(t *testing.T) {
	cases := map[string]struct {
		tc          time.Duration
		at          time.Time
		wantExpires time.Time
	}{
		"whole seconds":                      {tc: 30 * time.Minute, at: now, wantExpires: t0.Add(30 * time.Minute)},
		"1500ms":                             {tc: 1500 * time.Millisecond, at: now, wantExpires: t0.Add(time.Second)},
		"1800ms, granted late in its second": {tc: 1800 * time.Millisecond, at: t0.Add(900 * time.Millisecond), wantExpires: t0.Add(time.Second)},
		"90.5s":                              {tc: 90500 * time.Millisecond, at: now, wantExpires: t0.Add(90 * time.Second)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig()
			w := newWorld(t)
			w.add(makeReq("a").Owner("alice", 100).TTL(tc.tc).Obj())
			d := w.decide(name1, tc.at, cfg)
			a := w.get("a")
			if a.Status.Phase != locksv1.PhaseGranted {
				t.Fatalf("not granted:\n%s", describeDecision(d))
			}
			if !a.Status.ExpiresAt.Time.Equal(tc.wantExpires) {
				t.Errorf("status.expiresAt = %v, want %v", a.Status.ExpiresAt.UTC(), tc.wantExpires)
			}
			if got := w.locks[name1].Status.Holder.ExpiresAt; got == nil || !got.Time.Equal(a.Status.ExpiresAt.Time) {
				t.Errorf("ProjectLock holder expiresAt = %v, want the request's %v", got, a.Status.ExpiresAt.UTC())
			}
			clock := tc.at
			for i := 0; ; i++ {
				if d.RequeueAfter <= 0 {
					t.Fatalf("at %v the grant (expiresAt %v) is live and no requeue is asked for", clock, a.Status.ExpiresAt.UTC())
				}
				if i == 5 {
					t.Fatalf("still granted after %d requeues", i)
				}
				clock = clock.Add(d.RequeueAfter)
				d = w.decide(name1, clock, cfg)
				if a = w.get("a"); a.Status.Phase.IsFinal() {
					break
				}
			}
			if a.Status.Phase != locksv1.PhaseExpired || !clock.Equal(tc.wantExpires) {
				t.Errorf("finished %s at %v, want Expired at %v", a.Status.Phase, clock, tc.wantExpires)
			}
		})
	}
}

// Decide owns time: a freeze thawing while someone waits and a holder Lease lapsing are its
// inputs, and its one requeue is the nearest deadline of all (nextDeadline).
func TestDecideRequeuesForThawsAndLeaseLapses(t *testing.T) {
	h := aliceHolder().Obj() // expires at t0+25m
	waiter := makeReq("b").Owner("bob", 7).Obj()
	cases := map[string]struct {
		waiters         []*locksv1.LockRequest
		thaw, lapse     time.Time
		wantRequeueTill time.Time
	}{
		"only the holder's expiry": {
			waiters: []*locksv1.LockRequest{waiter}, wantRequeueTill: t0.Add(25 * time.Minute),
		},
		"a freeze thaws first while someone waits": {
			waiters: []*locksv1.LockRequest{waiter}, thaw: t0.Add(time.Minute),
			wantRequeueTill: t0.Add(time.Minute + time.Millisecond),
		},
		"a thaw with nobody waiting is no deadline": {
			thaw: t0.Add(time.Minute), wantRequeueTill: t0.Add(25 * time.Minute),
		},
		"a holder Lease lapses first": {
			waiters: []*locksv1.LockRequest{waiter}, thaw: t0.Add(time.Minute), lapse: t0.Add(30 * time.Second),
			wantRequeueTill: t0.Add(30*time.Second + time.Millisecond),
		},
		"a Lease lapse after the expiry": {
			lapse: t0.Add(time.Hour), wantRequeueTill: t0.Add(25 * time.Minute),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			in := Input{Now: now, Name: name1, Lock: aliceLock(h), Config: testConfig(),
				Requests: append([]*locksv1.LockRequest{h}, tc.waiters...), NextThaw: tc.thaw, NextLeaseLapse: tc.lapse}
			if diff := cmp.Diff(untilFromNow(tc.wantRequeueTill), Decide(in).RequeueAfter); diff != "" {
				t.Errorf("RequeueAfter (-want +got):\n%s", diff)
			}
		})
	}
}

// holderText renders a decision's holder for the tables ("" when the key is free). The tables'
// owners contain no '#'; TestDecideComparesIdentitiesStructurally covers those that do.
func holderText(d Decision) string {
	if !d.HasHolder {
		return ""
	}
	return d.Holder.String()
}

// A fleet spoke's holder that opted out of the partition stop (NoExpiry: a cluster's request
// with no holder Lease, annotated keep-running) is granted without an end: no expiresAt, on the
// request or the ProjectLock, no requeue for one, still granted long past the default ttl and
// past a ttl it asked for; released, it ends. The annotation alone (a request of the hub's own),
// or a cluster's request on a Lease, expire as any other.
func TestDecideKeepRunningHasNoExpiry(t *testing.T) {
	keep := func(w *wrappers.LockRequestWrapper) *locksv1.LockRequest {
		lr := w.Obj()
		lr.Annotations = map[string]string{locksv1.AnnotationOnPartition: locksv1.OnPartitionKeepRunning}
		return lr
	}
	cfg := testConfig()
	for name, tc := range map[string]struct {
		req        *locksv1.LockRequest
		wantExpiry bool
	}{
		"a spoke's keep-running holder":            {keep(makeReq("a").Owner("alice", 100).Cluster("eu-west-1")), false},
		"a spoke's keep-running holder with a ttl": {keep(makeReq("a").Owner("alice", 100).Cluster("eu-west-1").TTL(time.Minute)), false},
		"a hub request annotated keep-running":     {keep(makeReq("a").Owner("alice", 100)), true},
		"a spoke's request on its Lease":           {keep(makeReq("a").Owner("alice", 100).Cluster("eu-west-1").Lease("spoke-eu-west-1")), true},
		"a spoke's request without the annotation": {makeReq("a").Owner("alice", 100).Cluster("eu-west-1").Obj(), true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := NoExpiry(tc.req); got == tc.wantExpiry {
				t.Errorf("NoExpiry = %v", got)
			}
			if tc.wantExpiry {
				return
			}
			w := newWorld(t)
			w.add(tc.req)
			d := w.decide(name1, now, cfg)
			a := w.get("a")
			if a.Status.Phase != locksv1.PhaseGranted || a.Status.ExpiresAt != nil {
				t.Fatalf("phase %s, expiresAt %v; want Granted without an end:\n%s", a.Status.Phase, a.Status.ExpiresAt, describeDecision(d))
			}
			if h := w.locks[name1].Status.Holder; h == nil || h.ExpiresAt != nil {
				t.Errorf("ProjectLock holder %+v, want one without expiresAt", h)
			}
			if d.RequeueAfter != 0 {
				t.Errorf("a requeue after %s for a grant without an end", d.RequeueAfter)
			}
			if c := meta.FindStatusCondition(a.Status.Conditions, locksv1.ConditionGranted); c == nil || !strings.Contains(c.Message, "until released: keep-running") {
				t.Errorf("Granted condition %+v, want it to say it holds until released", c)
			}
			w.decide(name1, now.Add(3*cfg.MaxTTL), cfg)
			if a = w.get("a"); a.Status.Phase != locksv1.PhaseGranted || a.Status.ExpiresAt != nil {
				t.Fatalf("past every ttl: phase %s, expiresAt %v; want still Granted", a.Status.Phase, a.Status.ExpiresAt)
			}
			a.Spec.Release = true
			w.decide(name1, now.Add(3*cfg.MaxTTL+time.Second), cfg)
			if a = w.get("a"); a.Status.Phase != locksv1.PhaseReleased {
				t.Errorf("released: phase %s, want Released", a.Status.Phase)
			}
		})
	}
}

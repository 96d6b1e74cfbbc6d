// Package queue is the pure heart of Turnstile: given one lock key's ProjectLock, the requests
// that name the key, the freezes in force and the time, Decide returns who holds the key next,
// the queue in grant order and the status every affected request should have. It calls no client
// and reads no clock, so every rule here is tested by tables.
package queue

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
)

// Config holds the operator's policy flags that shape decisions.
type Config struct {
	// DefaultTTL applies to requests without spec.ttl.
	DefaultTTL time.Duration
	// MaxTTL bounds spec.ttl, so no grant reaches more than MaxTTL past its grant or its last
	// renewal: a longer ttl fails a request with reason Invalid, and is refused as a renewal.
	MaxTTL time.Duration
	// AgingStep lifts a waiting request one priority per step waited, never above High. Zero
	// disables aging.
	AgingStep time.Duration
	// QueueCap is the most requests that may wait for one key; the next fails with QueueFull.
	// Zero means no cap.
	QueueCap int
	// HeadSize is how many queue entries ProjectLock.status.queue shows.
	HeadSize int
}

// DefaultConfig is the policy the manager starts with unless flags say otherwise.
func DefaultConfig() Config {
	return Config{DefaultTTL: 30 * time.Minute, MaxTTL: 2 * time.Hour, AgingStep: 10 * time.Minute, QueueCap: 1000, HeadSize: 20}
}

// Input is everything Decide looks at for one key.
type Input struct {
	// Now is the decision time.
	Now time.Time
	// Name is the ProjectLock's name; Target its key.
	Name   string
	Target locksv1.LockTarget
	// Lock is the ProjectLock as read, or nil when it does not exist.
	Lock *locksv1.ProjectLock
	// Requests are the live requests that name this key (any phase). A holder that is not
	// among them is gone: the caller has confirmed that with a live read.
	Requests []*locksv1.LockRequest
	// Freezes are the command freezes in force at Now; NextThaw is when one thaws by itself
	// (zero: none does), which no event announces.
	Freezes  Freezes
	NextThaw time.Time
	// LostHolders are requests whose holder Lease lapsed, with a message saying how.
	LostHolders map[types.UID]string
	// UnprotectedLeases are requests admitted under the admission policies whose holder Lease
	// is not protected by them (not labelled locks.turnstile.dev/role, or created by someone
	// other than the request's owner or creator), with a message saying what to do. Such a
	// request does not come to hold: anyone who may delete the Lease could release it.
	UnprotectedLeases map[types.UID]string
	// NextLeaseLapse is the earliest time a live holder Lease of these requests lapses unless it
	// is renewed (zero: none can), which no event announces either.
	NextLeaseLapse time.Time
	// GoneTokens are the request-level tokens that listed holders missing from Requests showed
	// last (the watch's delete event carries them). The token of the key's next holder must be
	// above them; a gone holder missing here has a token nobody knows any more.
	GoneTokens map[types.UID]int64
	// Refreshes bounds the refresh-only updates the caller will write now (its rate limit);
	// the zero value is no bound.
	Refreshes RefreshBudget
	Config    Config
}

// RefreshBudget is how many refresh-only updates the caller can write now.
type RefreshBudget struct {
	Limited bool
	N       int
}

// Update is a request status to write, and the event to emit once written.
type Update struct {
	Request *locksv1.LockRequest
	Status  locksv1.LockRequestStatus
	// Refresh marks a write that only refreshes a waiter's position or message; the caller may
	// defer it to bound the write rate. Every other update changes what the request may do.
	Refresh bool
	// Acquires marks a write that makes the request hold the key for the first time. It is
	// written only after the ProjectLock write that lists it, and only if the request's command
	// is not frozen as the API server says then (docs/protocol.md, steps 4-6).
	Acquires bool
	Event    *Event
}

// Event is a Kubernetes event about a request.
type Event struct {
	Type, Reason, Message string
}

// Decision is what to write, in this order: Finish (outgoing holders and failed waiters) and
// Demote, then Lock (the ProjectLock status, with the resourceVersion read), then Grant (the
// holders' requests) and Waiting. Every request that leaves the ProjectLock's holders is written
// before the ProjectLock, and every request is written as newly holding the key only after the
// ProjectLock write of the same decision listed it (docs/protocol.md).
type Decision struct {
	Finish []Update
	// Demote takes back a grant that was listed but never written to its request (a crash or a
	// lost race between the two writes) because its command froze since: the request waits
	// again, and is written so before the ProjectLock stops listing it.
	Demote []Update
	// Lock is the ProjectLock status to write, or nil when unchanged.
	Lock *locksv1.ProjectLockStatus
	// CreateLock is true when the ProjectLock does not exist and someone needs it: create it,
	// and decide again on the created object (a grant's token is its resourceVersion). Nothing
	// else is decided then.
	CreateLock bool
	// Again is true when the ProjectLock write only takes leaving holders out: one of them is
	// gone and its token unknown, so the next holder is granted by a decision on the written
	// ProjectLock, at a revision above every token that holder can have shown.
	Again bool
	// ReleaseFinalizer is true when the ProjectLock is being deleted (a force-unlock) and, once
	// Finish is written, none of its holders holds it any more: remove the finalizer, with the
	// resourceVersion read, and let it go.
	ReleaseFinalizer bool
	Grant            []Update
	Waiting          []Update
	// Holder is the identity that holds the key after the decision; HasHolder is false when the
	// key is free (Holder is then the zero identity).
	Holder    locksv1.HolderID
	HasHolder bool
	// Queue is every waiting request in grant order.
	Queue []*locksv1.LockRequest
	// RequeueAfter is when the key needs deciding again without any event (a TTL, a wait
	// timeout, an aging step, a freeze thawing, a holder Lease lapsing); zero when nothing is
	// due. It is the decision's one requeue (nextDeadline).
	RequeueAfter time.Duration
	// RefreshDeferred is true when waiters whose position moved were left for later because
	// the refresh budget ran out: decide again once the caller can write more.
	RefreshDeferred bool
}

// entry is one request as seen from this key.
type entry struct {
	req      *locksv1.LockRequest
	ref      lockkey.Ref
	refs     []lockkey.Ref    // canonical order
	pos      int              // index of this key in refs
	id       locksv1.HolderID // owner, pull and session: compared with ==, never joined
	heldHere bool             // listed as holder in the ProjectLock
	claims   bool             // its status says it holds this key
	arrival  time.Time
	stamped  bool
	priority int // after aging
	ttl      time.Duration
	term     term // a granted request's expiry, renewals included (renew.go)
	frozen   *Freeze
	final    bool
	outcome  *outcome // set when it leaves the queue or the holder set now
	demoted  bool     // an unconfirmed grant taken back: it waits again
	ticket   int64    // the arrival order the API server gave it (Revision)
}

type outcome struct {
	phase   locksv1.LockRequestPhase
	reason  string
	message string
	event   string // event type
}

// TTL is the grant duration of a request under cfg.
func TTL(req *locksv1.LockRequest, cfg Config) time.Duration {
	if req.Spec.TTL != nil && req.Spec.TTL.Duration > 0 {
		return req.Spec.TTL.Duration
	}
	return cfg.DefaultTTL
}

// Decide computes the next state of one key. See the package comment.
func Decide(in Input) Decision {
	var d Decision
	now := in.Now
	lock := in.Lock

	holderUIDs := map[types.UID]bool{}
	var holder *locksv1.LockHolder
	token := int64(0)
	if lock != nil {
		token = lock.Status.FencingToken
		if lock.Status.Holder != nil {
			holder = lock.Status.Holder
			for _, r := range holder.Requests {
				holderUIDs[types.UID(r.UID)] = true
			}
		}
	}

	entries := make([]*entry, 0, len(in.Requests))
	for _, req := range in.Requests {
		e := newEntry(req, in.Name, in.Config, now)
		if e == nil {
			continue
		}
		e.heldHere = holderUIDs[req.UID]
		// guard:window-judged-per-request
		if fr, ok := in.Freezes.ForRequest(req); ok {
			e.frozen = &fr
		}
		entries = append(entries, e)
	}
	agedAsShown(lock, entries, in.Config, now)
	if lock != nil && lock.DeletionTimestamp != nil {
		return forceUnlock(lock, entries, now)
	}

	// 1. Who leaves the holder set or the queue now.
	for _, e := range entries {
		e.outcome = leaving(e, in)
	}

	// 2. The holders that stay. One listed but never written as holding (a crash, or a lost
	// race, between the ProjectLock write and its own) is an unconfirmed grant: only a decision
	// that writes the ProjectLock itself may write a holder, so it is re-issued, with a new
	// token; or, if its command froze since, taken back (demoted) before anyone is told of it.
	var holders []*entry
	reissue := false
	for _, e := range entries {
		if !e.heldHere || e.final || e.outcome != nil {
			continue
		}
		if !e.claims {
			if e.frozen != nil {
				e.heldHere, e.demoted = false, true
				continue
			}
			reissue = true
		}
		holders = append(holders, e)
	}
	var holderID locksv1.HolderID
	hasHolder := len(holders) > 0
	if hasHolder {
		holderID = holders[0].id
	}

	// 3. The queue, in grant order.
	var waiting []*entry
	for _, e := range entries {
		if !e.heldHere && !e.final && e.outcome == nil {
			waiting = append(waiting, e)
		}
	}
	sortQueue(waiting)
	// Requests seen for the first time get distinct arrivals in their sorted order, so FIFO holds
	// even among requests created within the same second.
	stamp := now.Truncate(time.Microsecond)
	for _, e := range waiting {
		if !e.stamped {
			e.arrival = stamp
			stamp = stamp.Add(time.Microsecond)
		}
	}

	// 4. Grants: the holder's own identity re-enters at once; a free key goes to the first
	// grantable request, together with its identity's other grantable requests.
	grantable := func(e *entry) bool {
		return e.frozen == nil && reached(e)
	}
	var granted []*entry
	newHolder := false
	if !hasHolder {
		for _, e := range waiting {
			if grantable(e) {
				holderID, hasHolder = e.id, true
				newHolder = true
				break
			}
		}
	}
	if hasHolder {
		rest := waiting[:0]
		for _, e := range waiting {
			if e.id == holderID && grantable(e) {
				granted = append(granted, e)
				continue
			}
			rest = append(rest, e)
		}
		waiting = rest
	}

	// 5. waitTimeout 0s: try once, fail at once. A request that does not hold its earlier keys
	// yet is not trying this key: the key it has reached decides whether it is busy.
	rest := waiting[:0]
	for _, e := range waiting {
		if e.req.Spec.WaitTimeout != nil && e.req.Spec.WaitTimeout.Duration == 0 && (e.frozen != nil || reached(e)) {
			if e.frozen != nil {
				e.outcome = &outcome{locksv1.PhaseFailed, locksv1.ReasonCommandLocked, e.frozen.Message, "Warning"}
			} else {
				e.outcome = &outcome{locksv1.PhaseFailed, locksv1.ReasonBusy,
					fmt.Sprintf("%s is busy and waitTimeout is 0s: %s", e.ref.Key, blockerText(holders, granted, waiting, e)), "Warning"}
			}
			continue
		}
		rest = append(rest, e)
	}
	waiting = rest

	// 6. The cap. It counts who still waits after this decision's grants (the holder's own
	// identity re-enters however long the queue). Requests already queued keep their place
	// whatever their number; newcomers, in grant order, take what room is left.
	if capN := in.Config.QueueCap; capN > 0 {
		n := 0
		for _, e := range waiting {
			if e.stamped {
				n++
			}
		}
		kept := waiting[:0]
		for _, e := range waiting {
			if !e.stamped {
				if n >= capN {
					e.outcome = &outcome{locksv1.PhaseFailed, locksv1.ReasonQueueFull,
						fmt.Sprintf("the queue for %s is full (%d waiting, the operator's cap); try again later", e.ref.Key, n), "Warning"}
					continue
				}
				n++
			}
			kept = append(kept, e)
		}
		waiting = kept
	}

	// 7. The ProjectLock status.
	allHolders := append(append([]*entry{}, holders...), granted...)
	again := false
	if lock == nil {
		// Only a key somebody holds or waits for needs its ProjectLock: after a force-unlock
		// with nobody waiting, the deleted ProjectLock stays deleted. A grant is decided on the
		// created object: its token is that object's resourceVersion.
		if len(allHolders) > 0 || len(waiting) > 0 {
			return Decision{CreateLock: true}
		}
	} else {
		if newHolder || reissue {
			top, unknown := leavingTokens(lock, entries, in.GoneTokens)
			// Decided below, once the demotions are: they leave in the same write.
			again = unknown && newHolder
			token = nextToken(token, Revision(lock.ResourceVersion), top)
		}
		status := lockStatus(lock, allHolders, waiting, token, newHolder, now, in.Config)
		if !statusEqual(lock.Status, status) {
			d.Lock = &status
		}
	}
	d.Holder, d.HasHolder = holderID, hasHolder
	for _, e := range waiting {
		d.Queue = append(d.Queue, e.req)
	}

	// 8. Request statuses.
	for _, e := range entries {
		if e.outcome != nil {
			d.Finish = append(d.Finish, Update{Request: e.req, Status: finishedStatus(e, now), Event: &Event{e.outcome.event, e.outcome.reason, e.outcome.message}})
		}
	}
	for _, e := range allHolders {
		st, changed := heldStatus(e, token, now)
		if !changed {
			continue
		}
		u := Update{Request: e.req, Status: st, Acquires: !e.claims}
		if st.Phase == locksv1.PhaseGranted && e.req.Status.Phase != locksv1.PhaseGranted {
			u.Event = &Event{"Normal", locksv1.ReasonGranted, grantedMessage(e, st)}
		} else if ev := renewalEvent(e, st); ev != nil {
			u.Event = ev
		}
		d.Grant = append(d.Grant, u)
	}
	refreshes := 0
	told := newBlockers(holders, granted, waiting)
	for i, e := range waiting {
		refresh := e.stamped && e.req.Status.Phase == locksv1.PhasePending && !e.demoted
		// Past the budget, a waiter whose position or message visibly changed is left for a
		// later decision without building its status: in a deep queue every hand-off moves them
		// all and every arrival changes the length their messages quote, and only the budget's
		// worth can be written anyway. One that may not have changed is still checked exactly,
		// so nothing is deferred that would not be written.
		if refresh && in.Refreshes.Limited && refreshes >= in.Refreshes.N && visiblyChanged(e, i, len(waiting), told) {
			d.RefreshDeferred = true
			continue
		}
		st := waitingStatus(e, i, len(waiting), told, now)
		// A demotion is a fence: its write must make the held write still in flight for the
		// request fail (its precondition) before the ProjectLock stops listing it. An update
		// equal to the stored object is a no-op that keeps the resourceVersion, so the demotion
		// raises status.fences: it always changes the stored object (docs/protocol.md, "A fence
		// must change the stored object").
		if e.demoted {
			st.Fences = e.req.Status.Fences + 1
		}
		if equalStatus(e.req.Status, st) {
			continue
		}
		if refresh {
			refreshes++
		}
		u := Update{Request: e.req, Status: st, Refresh: refresh}
		if !e.stamped || e.demoted {
			u.Event = &Event{"Normal", condReason(st), condMessage(st)}
		}
		if e.demoted {
			d.Demote = append(d.Demote, u)
			continue
		}
		d.Waiting = append(d.Waiting, u)
	}
	if again {
		return dropFirst(lock, entries, d.Demote, now, in.Config)
	}

	d.RequeueAfter = nextDeadline(in, allHolders, waiting)
	return d
}

// leaving is why e leaves the key's holders or its queue in this decision, or nil if it stays:
// the first step of Decide. The order of the cases is the order of precedence: an object being
// deleted or released is that before anything the clock says of it.
func leaving(e *entry, in Input) *outcome {
	req := e.req
	switch {
	case e.final:
		// Already final: if still listed as holder, it just drops out of the holders.
		return nil
	case req.DeletionTimestamp != nil:
		// Its object is going (a finalizer keeps it a while): its runner may still be
		// watching it, so it is told before the key moves on.
		msg := "deleted while it held the lock"
		if !e.heldHere && req.Status.Phase != locksv1.PhaseGranted {
			msg = "deleted before it was granted"
		}
		return &outcome{locksv1.PhaseReleased, locksv1.ReasonReleased, msg, "Normal"}
	case req.Spec.Release:
		msg := "released"
		if !e.heldHere && req.Status.Phase != locksv1.PhaseGranted {
			msg = "released before it was granted"
		}
		return &outcome{locksv1.PhaseReleased, locksv1.ReasonReleased, msg, "Normal"}
	case in.LostHolders[req.UID] != "":
		return &outcome{locksv1.PhaseReleased, locksv1.ReasonHolderLost, in.LostHolders[req.UID], "Warning"}
	case in.UnprotectedLeases[req.UID] != "" && !e.heldHere && req.Status.Phase != locksv1.PhaseGranted:
		// A grant made before (an older manager) stands until it ends; no new one is made.
		return &outcome{locksv1.PhaseFailed, locksv1.ReasonHolderLeaseUnprotected, in.UnprotectedLeases[req.UID], "Warning"}
	case e.claims && !e.heldHere:
		// Its status says it holds this key but the ProjectLock does not list it: the
		// ProjectLock was deleted (or re-created) under it, an admin's force-unlock.
		return &outcome{locksv1.PhaseReleased, locksv1.ReasonForceUnlocked,
			fmt.Sprintf("ProjectLock %s was deleted: the lock on %s was force-unlocked", in.Name, e.ref.Key), "Warning"}
	case e.heldHere && !e.term.expiry.IsZero() && !in.Now.Before(e.term.expiry):
		return &outcome{locksv1.PhaseExpired, locksv1.ReasonExpired, expiredMessage(e), "Warning"}
	case !e.heldHere && in.Config.MaxTTL > 0 && e.ttl > in.Config.MaxTTL:
		return &outcome{locksv1.PhaseFailed, locksv1.ReasonInvalid,
			fmt.Sprintf("spec.ttl %s is over this operator's maximum of %s; ask for at most %s", e.ttl, in.Config.MaxTTL, in.Config.MaxTTL), "Warning"}
	case !e.heldHere && e.stamped && req.Spec.WaitTimeout != nil && req.Spec.WaitTimeout.Duration > 0 &&
		!in.Now.Before(e.arrival.Add(req.Spec.WaitTimeout.Duration)):
		return &outcome{locksv1.PhaseFailed, locksv1.ReasonTimeout,
			fmt.Sprintf("not granted within waitTimeout %s", req.Spec.WaitTimeout.Duration), "Warning"}
	}
	return nil
}

// forceUnlock decides a ProjectLock that is being deleted: every request it lists that is not
// final yet is released (reason ForceUnlocked), then its finalizer goes. A listed request that
// is not among the entries is gone (the caller confirmed it). Nobody is granted on it: the
// waiters create it anew once it is gone.
func forceUnlock(lock *locksv1.ProjectLock, entries []*entry, now time.Time) Decision {
	var d Decision
	for _, e := range entries {
		if !e.heldHere || e.final {
			continue
		}
		e.outcome = &outcome{locksv1.PhaseReleased, locksv1.ReasonForceUnlocked,
			fmt.Sprintf("ProjectLock %s was deleted: the lock on %s was force-unlocked", lock.Name, e.ref.Key), "Warning"}
		d.Finish = append(d.Finish, Update{Request: e.req, Status: finishedStatus(e, now), Event: &Event{e.outcome.event, e.outcome.reason, e.outcome.message}})
	}
	d.ReleaseFinalizer = slices.Contains(lock.Finalizers, locksv1.ReleaseHoldersFinalizer)
	return d
}

func newEntry(req *locksv1.LockRequest, name string, cfg Config, now time.Time) *entry {
	refs := lockkey.Refs(req.Spec.Locks)
	pos := -1
	for i, r := range refs {
		if r.Name == name {
			pos = i
			break
		}
	}
	if pos < 0 {
		return nil
	}
	e := &entry{
		req:   req,
		ref:   refs[pos],
		refs:  refs,
		pos:   pos,
		id:    req.Spec.Holder.ID(),
		ttl:   TTL(req, cfg),
		final: req.Status.Phase.IsFinal(),
	}
	e.claims = !e.final && HoldsKey(req, e.ref)
	e.term = grantTerm(req, e.ttl, cfg, now)
	if req.Status.QueuedAt != nil {
		e.arrival, e.stamped = req.Status.QueuedAt.Time, true
	} else {
		e.arrival = now
		if ct := req.CreationTimestamp.Time; !ct.IsZero() && ct.After(now) {
			e.arrival = ct
		}
	}
	e.ticket = req.Status.ArrivalRevision
	if !e.stamped {
		e.ticket = Revision(req.ResourceVersion)
	}
	e.priority = AgedPriority(req.Spec.Priority, now.Sub(e.arrival), cfg.AgingStep)
	return e
}

// nextDeadline is the one time-driven requeue of a decision: the nearest of the holders'
// expiries, the waiters' timeouts and aging steps, a freeze thawing while someone waits, and a
// live holder Lease lapsing. The clock-driven inputs are decided a millisecond after their time,
// so the decision then sees them passed.
func nextDeadline(in Input, holders, waiting []*entry) time.Duration {
	now, cfg := in.Now, in.Config
	var next time.Time
	consider := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, e := range holders {
		if exp := expiresAt(e, now); exp != nil {
			consider(exp.Time)
		}
	}
	for _, e := range waiting {
		if wt := e.req.Spec.WaitTimeout; wt != nil && wt.Duration > 0 {
			consider(e.arrival.Add(wt.Duration))
		}
		if cfg.AgingStep > 0 && e.priority < locksv1.PriorityHigh.Rank() {
			waited := now.Sub(e.arrival)
			steps := waited/cfg.AgingStep + 1
			consider(e.arrival.Add(steps * cfg.AgingStep))
		}
	}
	if !in.NextThaw.IsZero() && len(waiting) > 0 {
		consider(in.NextThaw.Add(time.Millisecond))
	}
	if !in.NextLeaseLapse.IsZero() {
		consider(in.NextLeaseLapse.Add(time.Millisecond))
	}
	if next.IsZero() {
		return 0
	}
	return next.Sub(now)
}

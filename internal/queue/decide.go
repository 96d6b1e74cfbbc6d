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
	"github.com/turnstile-dev/turnstile/internal/fleet/members"
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
	// Stale says nothing was decided: the ProjectLock was read older than a token one of its
	// holders shows (staleLock). The key is decided again after RequeueAfter; what the caller
	// reports of the key (its queue depth, its refresh budget) stays as it was.
	Stale bool
	// More is true when a waiter could hold now but was left for the next decision: a counted
	// grant has the ProjectLock write to itself (counting.go), so the key is decided again on
	// what this plan wrote, at once.
	More bool
	// Writes is the plan: every write above in the order docs/protocol.md proves safe, each with
	// its object, its precondition and why it is made (plan.go). The caller applies them one at
	// a time, and stops at the first that fails.
	Writes []Write
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
	idx      int      // its place among the key's requests as read: the order of their writes
	shared   bool     // it asks for this key in Shared mode
	tok      int64    // its token for the key once the decision is made (holderTokens)
	behind   *entry   // the exclusive waiter it may not pass (writer preference), if any
	deferred bool     // it could hold now, but not in this write: the next decision grants it
}

type outcome struct {
	phase   locksv1.LockRequestPhase
	reason  string
	message string
	event   string // event type
}

// TTL is the grant duration of a request under cfg.
func TTL(req *locksv1.LockRequest, cfg Config) time.Duration {
	// guard:queue-keep-running-no-expiry
	if NoExpiry(req) {
		return 0
	}
	if req.Spec.TTL != nil && req.Spec.TTL.Duration > 0 {
		return req.Spec.TTL.Duration
	}
	return cfg.DefaultTTL
}

// NoExpiry says a grant of req has no end (TTL 0: no status.expiresAt): a fleet spoke's holder
// that opted out of the partition stop (docs/fleet.md "Opting out"): a request of a cluster
// (spec.holder.cluster) with no holder Lease, annotated fleet.turnstile.dev/on-partition:
// keep-running. The hub keeps its lock across any partition and any death of the spoke, until
// the spoke releases it or an admin does; a ttl the spoke cannot renew while cut off would hand
// the lock on while its workload runs. The admission policies let only a spoke make such a
// request for a user of the spoke with the keeprunning permission, or a hub user with both
// delegate and keeprunning.
func NoExpiry(req *locksv1.LockRequest) bool {
	return req.Spec.Holder.Cluster != "" && req.Spec.Holder.Lease == "" && locksv1.KeepsRunning(req.Annotations)
}

// Decide computes the next state of one key as a plan: the writes of docs/protocol.md's steps
// 1-6, in order (Decision.Writes). It is a pipeline of named steps, each taking values and
// returning new ones — collect, leave, stay, order, admit, reject, grantToken, then the plan —
// and none changes what an earlier step returned.
func Decide(in Input) Decision {
	s := collect(in)
	// guard:decide-on-stale-projectlock
	if staleLock(s) {
		return plan(Decision{RequeueAfter: staleLockRetry, Stale: true}, in.Name, s.lock)
	}
	if s.lock != nil && s.lock.DeletionTimestamp != nil {
		return plan(forceUnlock(s.lock, s.entries, in.Now), in.Name, s.lock)
	}
	st := stay(leave(s.entries, in))
	a, waiting, rejected := admitAndReject(st.holders, order(st.entries, in.Now), in.Config)
	allHolders := append(append([]*entry{}, st.holders...), a.granted...)
	waiting = markBehindWriter(allHolders, waiting)
	if s.lock == nil {
		// Only a key somebody holds or waits for needs its ProjectLock: after a force-unlock
		// with nobody waiting, the deleted ProjectLock stays deleted. A grant is decided on the
		// created object: its token is that object's resourceVersion.
		if len(allHolders) > 0 || len(waiting) > 0 {
			return plan(Decision{CreateLock: true}, in.Name, nil)
		}
		return plan(statuses(in, st, a, waiting, rejected, allHolders, s.token), in.Name, nil)
	}
	// A shared request joining shared holders is a new grant too: a new token.
	token, again := grantToken(s, st, a.newHolder || a.joins, in.GoneTokens)
	allHolders = holderTokens(allHolders, token)
	d := statuses(in, st, a, waiting, rejected, allHolders, token)
	d.More = a.more
	if again {
		d = dropFirst(s.lock, st.entries, holderTokens(st.holders, s.token), d.Demote, rejected, in.Now, in.Config)
		return plan(d, in.Name, s.lock)
	}
	status := lockStatus(s.lock, allHolders, waiting, token, a.newHolder, in.Now, in.Config)
	if !statusEqual(s.lock.Status, status) {
		d.Lock = &status
	}
	return plan(d, in.Name, s.lock)
}

// staleLockRetry is when a key whose ProjectLock was read older than a holder's token is decided
// again (staleLock): by then the cache has usually caught up with the write the holder saw.
const staleLockRetry = 100 * time.Millisecond

// staleLock reports whether a holder the ProjectLock lists shows a token for the key above the
// ProjectLock's: the ProjectLock was read before a write the holder has seen (a re-issued grant),
// so a decision on it would write that holder the older token it lists (docs/protocol.md: a
// holder's token is written only from a ProjectLock at least as new as every token its holders
// show). The caller reads the ProjectLock live when a cached claimant is ahead; a holder it read
// live because its cache did not have it yet (confirmHolders) can be ahead too, and Decide then
// decides nothing. A claimant the ProjectLock does not list (one re-created after a
// force-unlock) is not its holder, and is decided on (force-unlocked) as before.
func staleLock(s snapshot) bool {
	for _, e := range s.entries {
		if e.heldHere && e.claims && e.req.Status.Locks[e.ref.Index].FencingToken > s.token {
			return true
		}
	}
	return false
}

// snapshot is the key as read: its ProjectLock (nil when there is none), its fencing token, and
// one entry per request that names the key, aged as the ProjectLock's queue shows it.
type snapshot struct {
	lock    *locksv1.ProjectLock
	token   int64
	entries []*entry
}

// collect builds the snapshot Decide works from.
func collect(in Input) snapshot {
	now := in.Now
	lock := in.Lock
	holderUIDs := map[types.UID]bool{}
	token := int64(0)
	if lock != nil {
		token = lock.Status.FencingToken
		for _, r := range lock.Status.HolderRequests() {
			holderUIDs[types.UID(r.UID)] = true
		}
	}
	entries := make([]*entry, 0, len(in.Requests))
	for _, req := range in.Requests {
		e := newEntry(req, in.Name, in.Config, now)
		if e == nil {
			continue
		}
		e.heldHere = holderUIDs[req.UID]
		e.idx = len(entries)
		// guard:window-judged-per-request
		if fr, ok := in.Freezes.ForRequest(req); ok {
			e.frozen = &fr
		}
		entries = append(entries, e)
	}
	// guard:aging-by-own-clock
	agedAsShown(lock, entries, in.Config, now)
	return snapshot{lock: lock, token: token, entries: entries}
}

// leave is why each request leaves the key's holders or its queue now (protocol step 3): new
// entries, each with its outcome, or none when it stays.
func leave(entries []*entry, in Input) []*entry {
	out := make([]*entry, len(entries))
	for i, e := range entries {
		c := *e
		c.outcome = leaving(e, in)
		out[i] = &c
	}
	return out
}

// standing is who holds the key once the leavers are out: the holders that stay, whether one of
// them is an unconfirmed grant to re-issue, and every entry, the demoted ones waiting again.
type standing struct {
	entries []*entry
	holders []*entry
	reissue bool
}

// stay judges the listed holders that do not leave. One listed but never written as holding (a
// crash, or a lost race, between the ProjectLock write and its own) is an unconfirmed grant:
// only a decision that writes the ProjectLock itself may write a holder, so it is re-issued,
// with a new token; or, if its command froze since, taken back (demoted) before anyone is told
// of it (protocol step 3).
func stay(entries []*entry) standing {
	st := standing{entries: make([]*entry, 0, len(entries))}
	for _, e := range entries {
		if !e.heldHere || e.final || e.outcome != nil {
			st.entries = append(st.entries, e)
			continue
		}
		if !e.claims {
			// guard:no-demotion
			if e.frozen != nil {
				st.entries = append(st.entries, demoted(e))
				continue
			}
			// guard:no-reissue
			st.reissue = true
		}
		st.holders = append(st.holders, e)
		st.entries = append(st.entries, e)
	}
	return st
}

// demoted is e taken out of the holders, waiting again.
func demoted(e *entry) *entry {
	c := *e
	c.heldHere, c.demoted = false, true
	return &c
}

// order is the queue in grant order: every entry that neither holds nor leaves. Requests seen
// for the first time get distinct arrivals in their sorted order, so FIFO holds even among
// requests created within the same second.
func order(entries []*entry, now time.Time) []*entry {
	var waiting []*entry
	for _, e := range entries {
		if !e.heldHere && !e.final && e.outcome == nil {
			waiting = append(waiting, e)
		}
	}
	sortQueue(waiting)
	stamp := now.Truncate(time.Microsecond)
	for i, e := range waiting {
		if !e.stamped {
			c := *e
			c.arrival = stamp
			waiting[i] = &c
			stamp = stamp.Add(time.Microsecond)
		}
	}
	return waiting
}

// admission is who holds the key after the decision and who waits on.
type admission struct {
	holderID  locksv1.HolderID
	hasHolder bool
	newHolder bool // the key changes hands: a new token
	joins     bool // shared requests join shared holders that stay: a new token too
	more      bool // a waiter that could hold now is left for the next decision (deferred)
	granted   []*entry
	waiting   []*entry
}

// grantable reports whether a waiter could hold the key now, holders aside: its command is not
// frozen and it holds its earlier keys.
func grantable(e *entry) bool {
	return e.frozen == nil && reached(e)
}

// admit picks the new holders (protocol step 6): the holder's own identity re-enters at once; a
// free key goes to the first grantable request, together with its identity's other grantable
// requests; shared requests hold together, and none passes an exclusive waiter ahead of it
// (admitModes, shared.go).
func admit(holders, waiting []*entry) admission {
	granted, rest, more := admitModes(holders, waiting)
	a := admission{granted: granted, waiting: rest, more: more, hasHolder: len(holders) > 0 || len(granted) > 0}
	a.newHolder = len(holders) == 0 && len(granted) > 0
	switch {
	case len(holders) > 0:
		a.holderID = holders[0].id
	case a.newHolder:
		a.holderID = granted[0].id
	}
	a.joins = sharedJoin(a.newHolder, holders, granted)
	return a
}

// admitAndReject is who holds the key after the decision (admit) and who of the rest waits on
// and who is failed (reject). A newcomer the queue cap turns away leaves in this decision, so
// it holds back nobody: if it was an exclusive waiter that kept readers behind it (writer
// preference), the admission is made again without it, or they would be granted only by the
// next decision (not a fixed point).
func admitAndReject(holders, queue []*entry, cfg Config) (admission, []*entry, []*entry) {
	a := admit(holders, queue)
	waiting, rejected := reject(holders, a, cfg)
	away := map[types.UID]bool{}
	for _, e := range rejected {
		if e.outcome.reason == locksv1.ReasonQueueFull && !e.shared {
			away[e.req.UID] = true
		}
	}
	// guard:shared-queue-full-writer-holds-back
	if len(away) == 0 {
		return a, waiting, rejected
	}
	var rest []*entry
	for _, e := range queue {
		if !away[e.req.UID] {
			rest = append(rest, e)
		}
	}
	a = admit(holders, rest)
	waiting, again := reject(holders, a, cfg)
	for _, e := range rejected {
		if away[e.req.UID] {
			again = append(again, e)
		}
	}
	return a, waiting, again
}

// reject fails the waiters that may not wait on: waitTimeout 0s (try once, fail at once), and
// newcomers past the queue cap. It returns who still waits and the rejected, with outcomes.
func reject(holders []*entry, a admission, cfg Config) (waiting, rejected []*entry) {
	waiting, rejected = tryOnce(holders, a)
	waiting, full := queueCap(waiting, cfg.QueueCap)
	return waiting, append(rejected, full...)
}

// tryOnce fails the waiters with waitTimeout 0s. A request that does not hold its earlier keys
// yet is not trying this key: the key it has reached decides whether it is busy.
func tryOnce(holders []*entry, a admission) (waiting, rejected []*entry) {
	for _, e := range a.waiting {
		// A waiter left for the next decision (a counted grant took the write) could hold.
		// guard:counting-deferred-not-busy
		if !triesOnce(e) || (e.frozen == nil && !reached(e)) || e.deferred {
			waiting = append(waiting, e)
			continue
		}
		c := *e
		if e.frozen != nil {
			c.outcome = &outcome{locksv1.PhaseFailed, locksv1.ReasonCommandLocked, e.frozen.Message, "Warning"}
		} else {
			c.outcome = &outcome{locksv1.PhaseFailed, locksv1.ReasonBusy,
				fmt.Sprintf("%s is busy and waitTimeout is 0s: %s", e.ref.Key, blockerText(holders, a.granted, a.waiting, e)), "Warning"}
		}
		rejected = append(rejected, &c)
	}
	return waiting, rejected
}

// queueCap fails the newcomers past the cap. It counts who still waits after this decision's
// grants (the holder's own identity re-enters however long the queue). Requests already queued
// keep their place whatever their number; newcomers, in grant order, take what room is left.
func queueCap(waiting []*entry, capN int) (kept, rejected []*entry) {
	if capN <= 0 {
		return waiting, nil
	}
	n := 0
	for _, e := range waiting {
		if e.stamped {
			n++
		}
	}
	for _, e := range waiting {
		// guard:counting-deferred-not-full
		if !e.stamped && !e.deferred {
			if n >= capN {
				c := *e
				c.outcome = &outcome{locksv1.PhaseFailed, locksv1.ReasonQueueFull,
					fmt.Sprintf("the queue for %s is full (%d waiting, the operator's cap); try again later", e.ref.Key, n), "Warning"}
				rejected = append(rejected, &c)
				continue
			}
			n++
		}
		kept = append(kept, e)
	}
	return kept, rejected
}

// grantToken is the token the ProjectLock write of step 4 carries: a new one when the key
// changes hands or an unconfirmed grant is re-issued, else the one read. again is true when a
// leaving holder is gone with a token nobody knows: the write then only takes the leavers out
// (dropFirst), and the grant is decided on the written ProjectLock.
func grantToken(s snapshot, st standing, newHolder bool, gone map[types.UID]int64) (token int64, again bool) {
	if !newHolder && !st.reissue {
		return s.token, false
	}
	top, unknown := leavingTokens(s.lock, st.entries, gone)
	// guard:token-below-leaving-holder/2
	return nextToken(s.token, Revision(s.lock.ResourceVersion), top), unknown && newHolder
}

// statuses is the request statuses of the decision (steps 3 and 6, and the waiters): the
// leavers and rejected written final, the holders' grants, the demotions and the waiters.
func statuses(in Input, st standing, a admission, waiting, rejected, allHolders []*entry, token int64) Decision {
	d := Decision{Holder: a.holderID, HasHolder: a.hasHolder}
	for _, e := range waiting {
		d.Queue = append(d.Queue, e.req)
	}
	d.Finish = finishUpdates(st.entries, rejected, in.Now)
	d.Grant = grantUpdates(allHolders, token, in.Now)
	told := newBlockers(st.holders, a.granted, waiting)
	d.Demote, d.Waiting, d.RefreshDeferred = waitingUpdates(waiting, told, in)
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
	// A spoke's grant released or deleted (by the spoke or by an admin here) holds the key until
	// its spoke has stopped it, or its hub Lease lapses (below, LostHolders): the spoke's view of
	// the hub may lag, and may still show the grant.
	// guard:spoke-grant-awaits-its-spoke
	// guard:spoke-grant-awaits-its-spoke-envtest
	case awaitsSpoke(e, in):
		return nil
	// guard:deleting-holder-unwritten
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
	// guard:unprotected-lease-granted
	// guard:unprotected-lease-granted-admission
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

// awaitsSpoke says whether e, a holder of the key, is a fleet spoke's grant (members.SpokeHeld)
// whose end its spoke has not confirmed yet: released or being deleted, without
// locksv1.AnnotationSpokeStopped for its token, and its hub Lease not lapsed. It stays the
// holder meanwhile (docs/fleet.md, "A spoke's grant ends when its spoke has stopped it"). Its
// expiry is not awaited: the spoke stops its holder before the grant's expiresAt by its own
// clock (the partition rule), and a ttl only grows by the spoke's own renewals. An admin who
// cannot wait deletes the spoke's hub Lease (the grant is then lost at once) or the ProjectLock.
func awaitsSpoke(e *entry, in Input) bool {
	return e.heldHere && e.claims && AwaitsSpoke(e.req) && in.LostHolders[e.req.UID] == ""
}

// AwaitsSpoke says whether lr is a fleet spoke's grant (members.SpokeHeld) released or being
// deleted whose end its spoke has not confirmed (no locksv1.AnnotationSpokeStopped for its
// token): the hub keeps it holding until then, or until the spoke's hub Lease lapses. Pure.
func AwaitsSpoke(lr *locksv1.LockRequest) bool {
	return (lr.DeletionTimestamp != nil || lr.Spec.Release) && members.SpokeHeld(lr) && !locksv1.SpokeStopped(lr)
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
		c := *e
		c.outcome = &outcome{locksv1.PhaseReleased, locksv1.ReasonForceUnlocked,
			fmt.Sprintf("ProjectLock %s was deleted: the lock on %s was force-unlocked", lock.Name, e.ref.Key), "Warning"}
		d.Finish = append(d.Finish, finishUpdate(&c, now))
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
	// guard:identity-joined-string
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
	e.shared = e.ref.Shared()
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

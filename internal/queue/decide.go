// Package queue is the pure heart of Turnstile: given one lock key's ProjectLock, the requests
// that name the key, the freezes in force and the time, Decide returns who holds the key next,
// the queue in grant order and the status every affected request should have. It calls no client
// and reads no clock, so every rule here is tested by tables.
package queue

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// Holder is the identity that holds the key after the decision, "" when free.
	Holder string
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
	refs     []lockkey.Ref // canonical order
	pos      int           // index of this key in refs
	id       string        // owner+pull
	heldHere bool          // listed as holder in the ProjectLock
	claims   bool          // its status says it holds this key
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

// Describe renders a holder for people: locksv1.Holder.Describe of owner and pull.
//
// Deprecated: use locksv1.Holder.Describe; kept for the plugin and the dashboard until they move.
func Describe(owner string, pull int64) string {
	return locksv1.Holder{Owner: owner, Pull: pull}.Describe()
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
		if fr, ok := in.Freezes.For(req.Spec.Command); ok {
			e.frozen = &fr
		}
		entries = append(entries, e)
	}
	if lock != nil && lock.DeletionTimestamp != nil {
		return forceUnlock(lock, entries, now)
	}

	// 1. Who leaves the holder set or the queue now.
	for _, e := range entries {
		req := e.req
		switch {
		case e.final:
			// Already final: if still listed as holder, it just drops out below.
		case req.DeletionTimestamp != nil:
			// Its object is going (a finalizer keeps it a while): its runner may still be
			// watching it, so it is told before the key moves on.
			msg := "deleted while it held the lock"
			if !e.heldHere && req.Status.Phase != locksv1.PhaseGranted {
				msg = "deleted before it was granted"
			}
			e.outcome = &outcome{locksv1.PhaseReleased, locksv1.ReasonReleased, msg, "Normal"}
		case req.Spec.Release:
			msg := "released"
			if !e.heldHere && req.Status.Phase != locksv1.PhaseGranted {
				msg = "released before it was granted"
			}
			e.outcome = &outcome{locksv1.PhaseReleased, locksv1.ReasonReleased, msg, "Normal"}
		case in.LostHolders[req.UID] != "":
			e.outcome = &outcome{locksv1.PhaseReleased, locksv1.ReasonHolderLost, in.LostHolders[req.UID], "Warning"}
		case e.claims && !e.heldHere:
			// Its status says it holds this key but the ProjectLock does not list it: the
			// ProjectLock was deleted (or re-created) under it, an admin's force-unlock.
			e.outcome = &outcome{locksv1.PhaseReleased, locksv1.ReasonForceUnlocked,
				fmt.Sprintf("ProjectLock %s was deleted: the lock on %s was force-unlocked", in.Name, e.ref.Key), "Warning"}
		case e.heldHere && !e.term.expiry.IsZero() && !now.Before(e.term.expiry):
			e.outcome = &outcome{locksv1.PhaseExpired, locksv1.ReasonExpired, expiredMessage(e), "Warning"}
		case !e.heldHere && in.Config.MaxTTL > 0 && e.ttl > in.Config.MaxTTL:
			e.outcome = &outcome{locksv1.PhaseFailed, locksv1.ReasonInvalid,
				fmt.Sprintf("spec.ttl %s is over this operator's maximum of %s; ask for at most %s", e.ttl, in.Config.MaxTTL, in.Config.MaxTTL), "Warning"}
		case !e.heldHere && e.stamped && req.Spec.WaitTimeout != nil && req.Spec.WaitTimeout.Duration > 0 &&
			!now.Before(e.arrival.Add(req.Spec.WaitTimeout.Duration)):
			e.outcome = &outcome{locksv1.PhaseFailed, locksv1.ReasonTimeout,
				fmt.Sprintf("not granted within waitTimeout %s", req.Spec.WaitTimeout.Duration), "Warning"}
		}
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
	holderID := ""
	if len(holders) > 0 {
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
	if holderID == "" {
		for _, e := range waiting {
			if grantable(e) {
				holderID = e.id
				newHolder = true
				break
			}
		}
	}
	if holderID != "" {
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
	d.Holder = holderID
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
		// A demotion is written even when the status it writes is the one read: the write is
		// what fences the held write still in flight for the request (its precondition then
		// fails), before the ProjectLock stops listing it.
		if equalStatus(e.req.Status, st) && !e.demoted {
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

// reached reports whether the request holds every key before this one in canonical order, so
// this key is the one it is actually trying.
func reached(e *entry) bool {
	for _, r := range e.refs[:e.pos] {
		if !HoldsKey(e.req, r) {
			return false
		}
	}
	return true
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
		id:    req.Spec.Holder.Identity(),
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

// HoldsKey reports whether the request's status says it holds ref's key.
func HoldsKey(req *locksv1.LockRequest, ref lockkey.Ref) bool {
	if ref.Index >= len(req.Status.Locks) {
		return false
	}
	ls := req.Status.Locks[ref.Index]
	return ls.Held && ls.Name == ref.Name
}

// AgedPriority is a request's rank after waiting for waited: one rank per step, never above
// High. Critical stays Critical.
func AgedPriority(p locksv1.Priority, waited, step time.Duration) int {
	rank := p.Rank()
	high := locksv1.PriorityHigh.Rank()
	if step <= 0 || rank >= high || waited <= 0 {
		return rank
	}
	rank += int(waited / step)
	if rank > high {
		rank = high
	}
	return rank
}

// sortQueue orders waiters: higher (aged) priority first, then the order the API server stored
// them in — creation time, then arrival revision — then name. No manager's clock takes part,
// so managers whose clocks disagree still serve one queue first come, first served.
func sortQueue(q []*entry) {
	slices.SortStableFunc(q, compareQueued)
}

func compareQueued(a, b *entry) int {
	if a.priority != b.priority {
		return cmp.Compare(b.priority, a.priority)
	}
	if c := a.req.CreationTimestamp.Compare(b.req.CreationTimestamp.Time); c != 0 {
		return c
	}
	if a.ticket != b.ticket {
		return cmp.Compare(a.ticket, b.ticket)
	}
	return strings.Compare(a.req.Name, b.req.Name)
}

// Revision is a resourceVersion as the number it is: resourceVersions of one resource are
// comparable integers that grow with every write (Kubernetes API, KEP-5504). 0 if rv is not one.
func Revision(rv string) int64 {
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// nextToken is the fencing token of a new grant (or a re-issued one): the ProjectLock's
// resourceVersion that the grant's write is preconditioned on, and above every token the
// holders leaving in the same write showed (left, they were too).
//
// Why that is above every token any earlier holder of the key showed, per key or request-level
// (docs/protocol.md): a holder's tokens are revisions read by ProjectLock writes made before
// its own status writes, and those came before the ProjectLock write that took it out of the
// key's holders. A later write of this ProjectLock (or of one re-created after it) reads a
// higher revision. Only the holders leaving in this very write are not behind such a write, so
// their tokens are counted here: as their statuses say, or as their delete event said
// (dropFirst when nobody knows). No clock takes part; prev+1 keeps a token written before tokens
// were revisions from going down within one ProjectLock.
func nextToken(prev, revision, leaving int64) int64 {
	return max(prev+1, revision, leaving+1)
}

// leavingTokens is the highest token, per key or request-level, shown by the holders the
// ProjectLock lists that leave it in this decision; unknown is true when one of them is gone
// and its token is not in gone.
func leavingTokens(lock *locksv1.ProjectLock, entries []*entry, gone map[types.UID]int64) (top int64, unknown bool) {
	if lock == nil || lock.Status.Holder == nil {
		return 0, false
	}
	byUID := make(map[types.UID]*entry, len(entries))
	for _, e := range entries {
		byUID[e.req.UID] = e
	}
	for _, h := range lock.Status.Holder.Requests {
		e, present := byUID[types.UID(h.UID)]
		switch {
		case !present:
			t, known := gone[types.UID(h.UID)]
			unknown = unknown || !known
			top = max(top, t)
		case e.demoted:
			// It never held the key as anyone reading it saw.
		case e.final || e.outcome != nil:
			top = max(top, e.req.Status.FencingToken)
			for _, l := range e.req.Status.Locks {
				top = max(top, l.FencingToken)
			}
		}
	}
	return top, unknown
}

// dropFirst is the decision when a holder that is gone leaves with a token nobody knows: write
// the leaving holders final, the unconfirmed grants taken back waiting again (demote), and the
// ProjectLock without any of them; grant nobody, and decide again on the written ProjectLock,
// whose revision is above anything that holder showed. Like every write that takes a request
// out of the holders, the demotion comes first: a held write for it still in flight (the
// decision that listed it) then fails its precondition instead of landing unlisted.
func dropFirst(lock *locksv1.ProjectLock, entries []*entry, demote []Update, now time.Time, cfg Config) Decision {
	d := Decision{Again: true, Demote: demote}
	for _, e := range entries {
		if e.heldHere && e.outcome != nil {
			d.Finish = append(d.Finish, Update{Request: e.req, Status: finishedStatus(e, now), Event: &Event{e.outcome.event, e.outcome.reason, e.outcome.message}})
		}
	}
	st := lockStatus(lock, nil, nil, lock.Status.FencingToken, false, now, cfg)
	d.Lock = &st
	return d
}

func lockStatus(lock *locksv1.ProjectLock, holders, waiting []*entry, token int64, newHolder bool, now time.Time, cfg Config) locksv1.ProjectLockStatus {
	// A ProjectLock about to be created will be at generation 1, like every new object: say so
	// now, or the next decision rewrites the status only to correct observedGeneration.
	st := locksv1.ProjectLockStatus{ObservedGeneration: 1}
	if lock != nil {
		st = *lock.Status.DeepCopy()
		st.ObservedGeneration = lock.Generation
	}
	st.FencingToken = token
	st.Holder = nil
	if len(holders) > 0 {
		first := holders[0].req
		h := &locksv1.LockHolder{Owner: first.Spec.Holder.Owner, Pull: first.Spec.Holder.Pull, URL: first.Spec.Holder.URL}
		h.Since = newTime(now)
		if !newHolder && lock != nil && lock.Status.Holder != nil {
			h.Since = lock.Status.Holder.Since
		}
		var expires *metav1.Time
		sorted := append([]*entry{}, holders...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i].req.Name < sorted[j].req.Name })
		for _, e := range sorted {
			h.Requests = append(h.Requests, locksv1.HolderRequest{Name: e.req.Name, UID: string(e.req.UID)})
			if exp := expiresAt(e, now); exp != nil && (expires == nil || exp.After(expires.Time)) {
				expires = exp
			}
		}
		h.ExpiresAt = expires
		st.Holder = h
	}
	st.Queue = nil
	head := cfg.HeadSize
	for i, e := range waiting {
		if i >= head {
			break
		}
		st.Queue = append(st.Queue, locksv1.QueueEntry{
			Request: e.req.Name, Owner: e.req.Spec.Holder.Owner, Pull: e.req.Spec.Holder.Pull,
			Priority: rankName(e.priority),
		})
	}
	st.QueueLength = int32(len(waiting))
	if st.Holder != nil {
		SetCondition(&st.Conditions, locksv1.ConditionLocked, metav1.ConditionTrue, locksv1.ReasonHeld,
			fmt.Sprintf("locked by %s", locksv1.Holder{Owner: st.Holder.Owner, Pull: st.Holder.Pull}.Describe()), st.ObservedGeneration, now)
	} else {
		SetCondition(&st.Conditions, locksv1.ConditionLocked, metav1.ConditionFalse, locksv1.ReasonFree, "not locked", st.ObservedGeneration, now)
	}
	return st
}

// expiresAt is when a holder's grant ends: only a fully granted request has a TTL running.
// A grant being made now is stamped grantedAt = now, to the second (heldStatus).
func expiresAt(e *entry, now time.Time) *metav1.Time {
	if !e.term.expiry.IsZero() {
		t := metav1.NewTime(e.term.expiry)
		return &t
	}
	granted := newTime(now)
	if e.req.Status.GrantedAt != nil {
		granted = *e.req.Status.GrantedAt
	} else if !allHeldAfter(e) {
		return nil
	}
	t := metav1.NewTime(grantExpiry(granted.Time, e.ttl))
	return &t
}

// grantExpiry is when a grant made at grantedAt with ttl ends: the status.expiresAt written,
// which the API server keeps to the second. The expiry check, both statuses and the requeue
// all use it, so a ttl that is not whole seconds ("1500ms") cannot leave a live grant with
// its deadline already behind the requeue.
func grantExpiry(grantedAt time.Time, ttl time.Duration) time.Time {
	return grantedAt.Add(ttl).Truncate(time.Second)
}

// allHeldAfter reports whether the request holds every key once it holds this one.
func allHeldAfter(e *entry) bool {
	for i, r := range e.refs {
		if i != e.pos && !HoldsKey(e.req, r) {
			return false
		}
	}
	return true
}

func rankName(rank int) locksv1.Priority {
	switch rank {
	case 0:
		return locksv1.PriorityLow
	case 2:
		return locksv1.PriorityHigh
	case 3:
		return locksv1.PriorityCritical
	default:
		return locksv1.PriorityNormal
	}
}

// stampArrival records, the first time a request is written, when it was queued (for its
// timeouts and aging) and its arrival revision (for its place in the queue).
func stampArrival(st *locksv1.LockRequestStatus, e *entry) {
	if st.QueuedAt == nil {
		t := newMicroTime(e.arrival)
		st.QueuedAt = &t
		st.ArrivalRevision = e.ticket
	}
}

// baseStatus is a request's status with its locks list rebuilt from spec, keeping held flags
// and per-key tokens.
func baseStatus(req *locksv1.LockRequest) locksv1.LockRequestStatus {
	st := *req.Status.DeepCopy()
	st.ObservedGeneration = req.Generation
	locks := make([]locksv1.LockStatus, len(req.Spec.Locks))
	for i, t := range req.Spec.Locks {
		locks[i] = locksv1.LockStatus{Key: lockkey.String(t), Name: lockkey.Name(t)}
		if i < len(st.Locks) && st.Locks[i].Name == locks[i].Name {
			locks[i].Held, locks[i].FencingToken = st.Locks[i].Held, st.Locks[i].FencingToken
		}
	}
	st.Locks = locks
	return st
}

// FinishedStatus is the status of a request that ends now: phase (Released, Expired or Failed)
// for reason, with message. It is the one builder of a finished status: Decide's outcomes and
// the deadlock detector's victims are written with it.
func FinishedStatus(req *locksv1.LockRequest, phase locksv1.LockRequestPhase, reason, message string, now time.Time) locksv1.LockRequestStatus {
	st := baseStatus(req)
	for i := range st.Locks {
		st.Locks[i].Held = false
	}
	st.Phase = phase
	st.QueuePosition = 0
	st.BlockedBy = ""
	if reason == locksv1.ReasonCommandLocked || reason == locksv1.ReasonBusy || reason == locksv1.ReasonDeadlock {
		st.BlockedBy = message
	}
	fin := newTime(now)
	st.FinishedAt = &fin
	g := st.ObservedGeneration
	SetCondition(&st.Conditions, locksv1.ConditionGranted, metav1.ConditionFalse, reason, message, g, now)
	SetCondition(&st.Conditions, locksv1.ConditionReady, metav1.ConditionFalse, reason, message, g, now)
	SetCondition(&st.Conditions, locksv1.ConditionReconciling, metav1.ConditionFalse, reason, "finished", g, now)
	if phase == locksv1.PhaseFailed {
		SetCondition(&st.Conditions, locksv1.ConditionStalled, metav1.ConditionTrue, reason, message, g, now)
	} else {
		SetCondition(&st.Conditions, locksv1.ConditionStalled, metav1.ConditionFalse, reason, "finished", g, now)
	}
	return st
}

// finishedStatus is FinishedStatus for an entry's outcome, stamped with its arrival if it was
// never written before.
func finishedStatus(e *entry, now time.Time) locksv1.LockRequestStatus {
	st := FinishedStatus(e.req, e.outcome.phase, e.outcome.reason, e.outcome.message, now)
	stampArrival(&st, e)
	return st
}

// heldStatus is the status of a request that holds this key after the decision.
func heldStatus(e *entry, token int64, now time.Time) (locksv1.LockRequestStatus, bool) {
	st := baseStatus(e.req)
	st.Locks[e.ref.Index].Held = true
	st.Locks[e.ref.Index].FencingToken = token
	stampArrival(&st, e)
	st.FencingToken = max(st.FencingToken, token)
	g := st.ObservedGeneration
	all := true
	for _, l := range st.Locks {
		all = all && l.Held
	}
	if all {
		st.Phase = locksv1.PhaseGranted
		st.QueuePosition = 0
		st.BlockedBy = ""
		if st.GrantedAt == nil {
			t := newTime(now)
			st.GrantedAt = &t
		}
		exp := metav1.NewTime(grantExpiry(st.GrantedAt.Time, e.ttl))
		if !e.term.expiry.IsZero() {
			exp = metav1.NewTime(e.term.expiry)
		}
		if e.term.renewed {
			t := newTime(now)
			st.RenewedAt = &t
		}
		st.ExpiresAt = &exp
		msg := fmt.Sprintf("holds %s (fencing token %d) until %s", keysText(e), st.FencingToken, exp.UTC().Format(time.RFC3339))
		if e.term.refused != "" {
			msg += "; " + e.term.refused
		}
		SetCondition(&st.Conditions, locksv1.ConditionGranted, metav1.ConditionTrue, locksv1.ReasonGranted, msg, g, now)
		SetCondition(&st.Conditions, locksv1.ConditionReady, metav1.ConditionTrue, locksv1.ReasonGranted, msg, g, now)
		SetCondition(&st.Conditions, locksv1.ConditionReconciling, metav1.ConditionFalse, locksv1.ReasonGranted, "granted", g, now)
		SetCondition(&st.Conditions, locksv1.ConditionStalled, metav1.ConditionFalse, locksv1.ReasonGranted, "granted", g, now)
	} else if st.Phase != locksv1.PhasePending || !HoldsKey(e.req, e.ref) {
		// Its part of the request was just granted: say so once. From then on the queue of the
		// key it waits for speaks for it (position, blocker); rewriting the message here on every
		// decision would undo that key's write, and each write wakes the other key again.
		next := ""
		for _, r := range e.refs {
			if !st.Locks[r.Index].Held {
				next = r.Key
				break
			}
		}
		st.QueuePosition = 0
		st.BlockedBy = ""
		msg := fmt.Sprintf("holds %s; waiting for %s next (locks are taken in canonical order)", e.ref.Key, next)
		pendingConds(&st, locksv1.ReasonQueued, msg, now)
	}
	return st, !equalStatus(e.req.Status, st)
}

func pendingConds(st *locksv1.LockRequestStatus, reason, msg string, now time.Time) {
	g := st.ObservedGeneration
	st.Phase = locksv1.PhasePending
	SetCondition(&st.Conditions, locksv1.ConditionGranted, metav1.ConditionFalse, reason, msg, g, now)
	SetCondition(&st.Conditions, locksv1.ConditionReady, metav1.ConditionFalse, reason, msg, g, now)
	SetCondition(&st.Conditions, locksv1.ConditionReconciling, metav1.ConditionTrue, reason, msg, g, now)
	SetCondition(&st.Conditions, locksv1.ConditionStalled, metav1.ConditionFalse, reason, "waiting", g, now)
}

// waitingStatus is the status of a request still in this key's queue at index i of n.
func waitingStatus(e *entry, i, n int, told blockers, now time.Time) locksv1.LockRequestStatus {
	st := baseStatus(e.req)
	stampArrival(&st, e)
	// Position and message belong to the first key the request does not hold yet; a later key's
	// queue does not speak for it.
	for _, r := range e.refs[:e.pos] {
		if !HoldsKey(e.req, r) {
			if st.Phase == "" {
				pendingConds(&st, locksv1.ReasonQueued, fmt.Sprintf("waiting for %s first (locks are taken in canonical order)", r.Key), now)
			}
			return st
		}
	}
	st.QueuePosition = int32(i + 1)
	reason, blockedBy, prefix := queuedText(e, told)
	st.BlockedBy = blockedBy
	pendingConds(&st, reason, positionText(prefix, i, n), now)
	return st
}

// queuedText is what a waiter that has reached this key is told: the reason, who or what
// blocks it, and the message of its conditions up to its place in the queue (positionText).
func queuedText(e *entry, told blockers) (reason, blockedBy, prefix string) {
	if e.frozen != nil {
		return locksv1.ReasonCommandLocked, e.frozen.Source, e.frozen.Message
	}
	blocker := told.of(e)
	return locksv1.ReasonQueued, blocker, blocker
}

// positionText ends a waiter's message with its place: "<prefix>; position 3 of 5".
func positionText(prefix string, i, n int) string {
	return prefix + "; position " + strconv.Itoa(i+1) + " of " + strconv.Itoa(n)
}

// isPositionText reports msg == positionText(prefix, i, n) without building it: deep queues
// ask it of every waiter past the refresh budget.
func isPositionText(msg, prefix string, i, n int) bool {
	var buf [48]byte
	tail := append(buf[:0], "; position "...)
	tail = strconv.AppendInt(tail, int64(i+1), 10)
	tail = append(tail, " of "...)
	tail = strconv.AppendInt(tail, int64(n), 10)
	return len(msg) == len(prefix)+len(tail) && strings.HasPrefix(msg, prefix) && msg[len(prefix):] == string(tail)
}

// visiblyChanged reports, without building its status, that the status waitingStatus builds
// for a waiter at index i of n differs from the one it has: another position, blocker or
// message. false means only that a cheap look found no change.
func visiblyChanged(e *entry, i, n int, told blockers) bool {
	st := &e.req.Status
	if !reached(e) {
		return false // its earlier key speaks for it
	}
	if st.QueuePosition != int32(i+1) {
		return true
	}
	_, blockedBy, prefix := queuedText(e, told)
	if st.BlockedBy != blockedBy {
		return true
	}
	c := findCond(st.Conditions, locksv1.ConditionGranted)
	return c == nil || !isPositionText(c.Message, prefix, i, n)
}

// blockers is who is in the way of a key's waiters. Every waiter is told the same, but for the
// head of a queue nobody holds, so it is built once per decision, not once per waiter.
type blockers struct {
	ahead string // "locked by <holder>" or "waiting behind <head>"; "" when nobody is
	head  *entry // the head of a queue nobody holds: it waits for the key alone
}

func newBlockers(holders, granted, waiting []*entry) blockers {
	for _, set := range [][]*entry{holders, granted} {
		if len(set) > 0 {
			h := set[0].req.Spec.Holder
			return blockers{ahead: "locked by " + h.Describe()}
		}
	}
	if len(waiting) > 0 {
		h := waiting[0].req.Spec.Holder
		return blockers{ahead: "waiting behind " + h.Describe(), head: waiting[0]}
	}
	return blockers{}
}

// of says who is in e's way: the holder, or the first waiter ahead of it.
func (b blockers) of(e *entry) string {
	if b.ahead == "" || e == b.head {
		return "waiting for " + e.ref.Key
	}
	return b.ahead
}

// blockerText says who is in e's way: the holder, or the first waiter ahead of it.
func blockerText(holders, granted, waiting []*entry, e *entry) string {
	return newBlockers(holders, granted, waiting).of(e)
}

func grantedMessage(e *entry, st locksv1.LockRequestStatus) string {
	return fmt.Sprintf("granted %s to %s (fencing token %d)", keysText(e), e.req.Spec.Holder.Describe(), st.FencingToken)
}

func keysText(e *entry) string {
	if len(e.refs) == 1 {
		return e.ref.Key
	}
	return fmt.Sprintf("%d locks", len(e.refs))
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

func condReason(st locksv1.LockRequestStatus) string {
	if c := findCond(st.Conditions, locksv1.ConditionGranted); c != nil {
		return c.Reason
	}
	return ""
}

func condMessage(st locksv1.LockRequestStatus) string {
	if c := findCond(st.Conditions, locksv1.ConditionGranted); c != nil {
		return c.Message
	}
	return ""
}

// Waiting is one request as it waits for a key, for callers that need the queue without a
// decision (deadlock detection).
type Waiting struct {
	Request *locksv1.LockRequest
	// Priority is the rank after aging.
	Priority int
	// Arrival is status.queuedAt, or now for a request not yet stamped.
	Arrival time.Time
}

// Order returns reqs (all waiting for the key named name) in grant order, with the same rules
// Decide uses.
func Order(name string, reqs []*locksv1.LockRequest, now time.Time, cfg Config) []Waiting {
	entries := make([]*entry, 0, len(reqs))
	for _, r := range reqs {
		if e := newEntry(r, name, cfg, now); e != nil {
			entries = append(entries, e)
		}
	}
	sortQueue(entries)
	out := make([]Waiting, len(entries))
	for i, e := range entries {
		out[i] = Waiting{Request: e.req, Priority: e.priority, Arrival: e.arrival}
	}
	return out
}

// FirstUnheld returns the ref of the first key, in acquisition order, that the request does not
// hold yet: the key it is actually waiting for. ok is false when it holds them all.
func FirstUnheld(req *locksv1.LockRequest) (lockkey.Ref, bool) {
	for _, r := range lockkey.Refs(req.Spec.Locks) {
		if !HoldsKey(req, r) {
			return r, true
		}
	}
	return lockkey.Ref{}, false
}

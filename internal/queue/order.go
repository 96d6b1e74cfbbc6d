package queue

// The grant order of a key's queue, and what a request holds.

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
)

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

// agedAsShown makes aging a ratchet across managers. Each manager ages a waiter by its own
// clock, so two managers whose clocks fall on either side of a waiter's aging step rank it
// differently, and each would write its own queue to the ProjectLock over the other's for as
// long as their clocks disagree: a write loop (docs/protocol.md, "Clocks"). A waiter therefore
// ranks at least as high as the ProjectLock's queue shows it, which is the rank a manager whose
// clock passed the step wrote; but never more than one step above its rank by this manager's
// clock, so the written rank closes a gap between clocks and is not carried over to a new
// request that reuses the name.
func agedAsShown(lock *locksv1.ProjectLock, entries []*entry, cfg Config, now time.Time) {
	if lock == nil || cfg.AgingStep <= 0 || len(lock.Status.Queue) == 0 {
		return
	}
	shown := make(map[string]locksv1.QueueEntry, len(lock.Status.Queue))
	for _, q := range lock.Status.Queue {
		shown[q.Request] = q
	}
	for _, e := range entries {
		q, ok := shown[e.req.Name]
		if !ok || e.final || e.claims || q.Owner != e.req.Spec.Holder.Owner || q.Pull != e.req.Spec.Holder.Pull {
			continue
		}
		rank := q.Priority.Rank()
		// guard:aging-ratchet-unbounded
		if rank > e.priority && rank <= AgedPriority(e.req.Spec.Priority, now.Sub(e.arrival)+cfg.AgingStep, cfg.AgingStep) {
			e.priority = rank
		}
	}
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
	// guard:fifo-by-clock
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

// HeldLocks is what a request holds by its own status: every lock it names while Granted, the
// ones marked held while it is Pending (a multi-lock request part way), none once it is final.
// The safety checkers judge mutual exclusion by it.
func HeldLocks(req *locksv1.LockRequest) []locksv1.LockStatus {
	if req.Status.Phase.IsFinal() {
		return nil
	}
	var out []locksv1.LockStatus
	for _, l := range req.Status.Locks {
		if l.Held || req.Status.Phase == locksv1.PhaseGranted {
			out = append(out, l)
		}
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

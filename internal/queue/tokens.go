package queue

// Fencing tokens: a new grant's token, and the holders that leave with theirs.

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

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
	// guard:counter-token
	// guard:token-below-leaving-holder
	return max(prev+1, revision, leaving+1)
}

// leavingTokens is the highest token, per key or request-level, shown by the holders the
// ProjectLock lists that leave it in this decision; unknown is true when one of them is gone
// and its token is not in gone.
func leavingTokens(lock *locksv1.ProjectLock, entries []*entry, gone map[types.UID]int64) (top int64, unknown bool) {
	if lock == nil {
		return 0, false
	}
	byUID := make(map[types.UID]*entry, len(entries))
	for _, e := range entries {
		byUID[e.req.UID] = e
	}
	for _, h := range lock.Status.HolderRequests() {
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
//
// stay are the holders that stay (shared holders, when shared requests were to join them): they
// stay listed with their tokens; only the grant waits for the next decision. rejected are the
// waiters the decision fails: one that was listed (an unconfirmed grant demoted, which may not
// wait: waitTimeout 0s, or the queue cap) is failed here too, as its fence, since it is neither
// demoted nor finished otherwise.
func dropFirst(lock *locksv1.ProjectLock, entries, stay []*entry, demote []Update, rejected []*entry, now time.Time, cfg Config) Decision {
	// guard:again-drops-demotions
	d := Decision{Again: true, Demote: demote}
	var done []*entry
	for _, e := range entries {
		if e.heldHere && e.outcome != nil {
			done = append(done, e)
		}
	}
	for _, e := range rejected {
		// guard:again-drops-rejected-demotions
		if e.demoted {
			done = append(done, e)
		}
	}
	slices.SortStableFunc(done, func(a, b *entry) int { return a.idx - b.idx })
	for _, e := range done {
		d.Finish = append(d.Finish, finishUpdate(e, now))
	}
	st := lockStatus(lock, stay, nil, lock.Status.FencingToken, false, now, cfg)
	d.Lock = &st
	return d
}

package queue

// Counting locks (issue #45): a Shared request with spec.locks[].maxHolders N holds the key only
// while at most N requests hold it, itself included ("at most 3 clusters upgrade at a time").
// Every bound on a key holds at once — requests on one key may ask different numbers — and each
// counted grant has a fencing token of its own (docs/protocol.md, "Counting locks").

import (
	"fmt"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
)

// bound is the most requests e holds its key beside, itself included: its maxHolders for the
// key, or 0 (none) for an exclusive request or a shared one without it.
func bound(e *entry) int32 {
	if !e.shared {
		return 0
	}
	return e.ref.MaxHolders
}

// lowestBound is the lowest bound among set (0: none of them has one).
func lowestBound(set []*entry) int32 {
	low := int32(0)
	for _, h := range set {
		if b := bound(h); b > 0 && (low == 0 || b < low) {
			low = b
		}
	}
	return low
}

// withinBounds reports whether set with e would number at most every bound among them: e's own
// and every holder's. A holder's bound is a promise to it ("you hold beside at most N-1"), so a
// request with a higher bound, or none (an exclusive request of the holders' own identity,
// re-entrant), may not break it; a request with a lower bound waits until few enough hold.
func withinBounds(set []*entry, e *entry) bool {
	low := bound(e)
	// guard:counting-joiner-bound-only
	if b := lowestBound(set); b > 0 && (low == 0 || b < low) {
		low = b
	}
	return low == 0 || int32(len(set)) < low
}

// writeToken is who takes the token of the decision's ProjectLock write (grantToken): every
// request it grants or re-issues gets that one token. A counted grant must have a token of its
// own — unique, above every token granted on the key before it and below every one after — so
// it takes the write alone: a counted holder whose grant is re-issued now goes alone, a counted
// waiter is granted only if nothing else is granted or re-issued in this write, and nothing is
// granted after it. The rest wait for the next decision, which the plan makes at once
// (Decision.More): one ProjectLock write, and one grant write, per counted hand-off.
type writeToken struct {
	taken  bool // the write re-issues an unconfirmed grant: its token is handed out already
	closed bool // the write's token is a counted grant's: nobody else may take it
}

// newWriteToken is the write's token before anyone is granted: taken by the unconfirmed grants
// among the holders that stay (re-issued with it), and closed if one of them is counted.
func newWriteToken(holders []*entry) writeToken {
	var t writeToken
	for _, h := range holders {
		// guard:counting-reissue-goes-alone
		if !h.claims {
			t.taken = true
			t.closed = t.closed || bound(h) > 0
		}
	}
	return t
}

// admits reports whether e, which could hold now, is granted in this write, granted being how
// many this write grants before it; once it admits a counted request, or holds one back, the
// write is closed to everyone after.
func (t *writeToken) admits(e *entry, granted int) bool {
	// guard:counting-grants-share-a-write
	// guard:counting-reissue-goes-alone/2
	if t.closed || (bound(e) > 0 && (t.taken || granted > 0)) {
		t.closed = true
		return false
	}
	t.closed = bound(e) > 0
	return true
}

// deferred is e left for the next decision: it could hold now, but not in this write (a counted
// grant takes a write alone). It is neither told it waits nor failed for being busy.
func deferred(e *entry) *entry {
	c := *e
	c.deferred = true
	return &c
}

// MaxHoldersOn is lr's maxHolders for the key of ProjectLock name: the most requests it holds
// that key beside, itself included; 0 unless it asks for a counting lock there.
func MaxHoldersOn(lr *locksv1.LockRequest, name string) int32 {
	for _, t := range lr.Spec.Locks {
		if t.Mode.IsShared() && t.MaxHolders > 0 && lockkey.Name(t) == name {
			return t.MaxHolders
		}
	}
	return 0
}

// boundText says how full a counting lock is, for the holders' and waiters' messages: " (2 of at
// most 3 hold it)"; "" when no holder has a bound.
func boundText(set []*entry) string {
	low := lowestBound(set)
	if low == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d of at most %d hold it)", len(set), low)
}

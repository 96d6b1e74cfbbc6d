package queue

// What waiters and holders are told: blockers, positions, conditions' messages.

import (
	"fmt"
	"strconv"
	"strings"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

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
	if set := append(append([]*entry{}, holders...), granted...); len(set) > 0 && allShared(set) {
		return blockers{ahead: "locked by " + sharedText(set) + boundText(set)}
	}
	for _, set := range [][]*entry{holders, granted} {
		if len(set) > 0 {
			h := set[0].req.Spec.Holder
			ahead := "locked by " + h.Describe()
			if r := set[0].req.Spec.Reason; r != "" {
				ahead += ": " + r // the holder's spec.reason: "locked by pull #100 (alice): migrating state"
			}
			return blockers{ahead: ahead}
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
	if e.behind != nil {
		return b.ahead + "; " + writerText(e.behind)
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

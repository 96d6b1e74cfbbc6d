package lag

import (
	"testing"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// TestSharedJoinSeenAfterTheWriterLeft: a shared request that joined, re-entrant, its own
// identity's exclusive holding (at the holding's per-key token) and is first seen by a check
// after that exclusive request left is judged against the exclusive request's request-level
// token (its highest over every key), which it is below: the checker reports TM on a legal
// history, found by the review of #31: observeShared's re-entrant case needed the exclusive
// holder in the same state, which a checker that replays every event (Replay) always has and
// one that reads the store now and then (CheckState, the simulation's s.inv) may not. It now
// also judges a shared request of the identity whose exclusive tenure is the key's last as
// re-entrant.
func TestSharedJoinSeenAfterTheWriterLeft(t *testing.T) {
	r20 := held("r20", "alice", locksv1.PhaseGranted, []locksv1.LockTarget{dbKey, netKey}, 1290, 1284)
	inv := NewInvariants(nil)
	if v := inv.CheckState(&State{Requests: locksv1.LockRequestList{Items: []locksv1.LockRequest{*r20}}}); len(v) != 0 {
		t.Fatalf("first state: %v", v)
	}
	// r26 joined r20's holding of net at its token 1284 (re-entrant); then r20 was released.
	released := held("r20", "alice", locksv1.PhaseReleased, []locksv1.LockTarget{dbKey, netKey}, 1290, 1284)
	r26 := held("r26", "alice", locksv1.PhaseGranted, []locksv1.LockTarget{shared(netKey)}, 1284)
	if v := inv.CheckState(&State{Requests: locksv1.LockRequestList{Items: []locksv1.LockRequest{*released, *r26}}}); len(v) != 0 {
		t.Fatalf("a legal history reported: %v", v)
	}
}

package queue

import (
	"testing"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// TestCachedLockBehind: the ProjectLock a cache read is checked live when a request that is
// not final holds the key by its status and the ProjectLock does not list it, or shows a lower
// token for it (mutants no-live-projectlock-read, stale-projectlock-token).
func TestCachedLockBehind(t *testing.T) {
	holds := func(name string, token int64) *locksv1.LockRequest {
		return makeReq(name).Held(tgt1).FencingToken(token).Phase(locksv1.PhaseGranted).Obj()
	}
	a := holds("a", 7)
	lock := makeLock(tgt1).token(7).holder(t0, a).Obj()
	for name, tc := range map[string]struct {
		lock *locksv1.ProjectLock
		reqs []*locksv1.LockRequest
		want bool
	}{
		"listed at the lock's token":             {lock, []*locksv1.LockRequest{a}, false},
		"nobody claims, no ProjectLock":          {nil, []*locksv1.LockRequest{makeReq("w").Obj()}, false},
		"a claimant and no ProjectLock":          {nil, []*locksv1.LockRequest{a}, true},
		"a claimant the ProjectLock lacks":       {lock, []*locksv1.LockRequest{a, holds("b", 7)}, true},
		"a holder above the ProjectLock's token": {lock, []*locksv1.LockRequest{holds("a", 9)}, true},
		"a final request claims nothing":         {nil, []*locksv1.LockRequest{makeReq("f").Held(tgt1).FencingToken(7).Phase(locksv1.PhaseReleased).Obj()}, false},
	} {
		if got := CachedLockBehind(tc.lock, tc.reqs, name1); got != tc.want {
			t.Errorf("%s: CachedLockBehind = %v, want %v", name, got, tc.want)
		}
	}
}

package queue

import (
	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// CachedLockBehind reports whether lock, the ProjectLock of key name as a cache read it, may be
// older than what reqs show of the key, so that deciding on it could hand the lock on too early
// or write a holder an older token: a request that is not final claims the key (its status
// holds it) while lock does not list it — the ProjectLock really gone (a force-unlock), or the
// cache behind a grant —, or shows a token for the key above lock's — the cache behind a
// re-issued grant (tokens are revisions of the key's ProjectLock writes, which only grow). The
// caller then reads the ProjectLock live before deciding.
func CachedLockBehind(lock *locksv1.ProjectLock, reqs []*locksv1.LockRequest, name string) bool {
	var listed map[string]bool // lock's holders, read once a claimant needs them
	for _, lr := range reqs {
		if lr.Status.Phase.IsFinal() {
			continue
		}
		for _, l := range lr.Status.Locks {
			if l.Name != name || !l.Held {
				continue
			}
			if listed == nil {
				listed = holderUIDs(lock)
			}
			// guard:no-live-projectlock-read
			if !listed[string(lr.UID)] {
				return true
			}
			// guard:stale-projectlock-token
			if l.FencingToken > lock.Status.FencingToken {
				return true
			}
		}
	}
	return false
}

// holderUIDs is the set of requests lock lists as holders (none when lock is nil).
func holderUIDs(lock *locksv1.ProjectLock) map[string]bool {
	out := map[string]bool{}
	if lock == nil {
		return out
	}
	for _, h := range lock.Status.HolderRequests() {
		out[h.UID] = true
	}
	return out
}

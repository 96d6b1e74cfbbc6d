// Package sharding lets several managers run active-active: every replica watches everything,
// the owner of a key (rendezvous hashing of the key over the live members) decides it at once,
// and every other live replica decides the same key again a short delay later, as a backup.
// When the owner has acted, the backup's decision is a no-op from its cache; when the owner is
// dead or cut off, the backup acts after the delay, without waiting for membership to lapse.
//
// Membership only says who owns what. It comes from one coordination.k8s.io Lease per replica
// (label locks.turnstile.dev/role=member), renewed about every second; a replica whose Lease
// has not changed for the lapse time, or whose Lease is gone, is no longer a member. A replica
// that stops gracefully deletes its Lease first, so the survivors own its keys at once.
//
// Nothing here is needed for safety: two replicas deciding one key at once is safe by the
// optimistic ProjectLock writes (docs/protocol.md). Routing only decides who acts first.
package sharding

import (
	"hash/fnv"
	"slices"
	"time"
)

// Owner returns the member that owns key by rendezvous (highest random weight) hashing: each
// member scores the key and the highest score wins. Removing a member moves only its own keys;
// adding one takes about 1/n of every other member's keys. "" when there are no members.
func Owner(members []string, key string) string {
	best, bestScore := "", uint64(0)
	for _, m := range members {
		s := score(m, key)
		if best == "" || s > bestScore || (s == bestScore && m < best) {
			best, bestScore = m, s
		}
	}
	return best
}

// Rank is member's place for key among members in rendezvous order: 0 for the owner, 1 for the
// first backup, and so on; len(members) when member is not one of them.
func Rank(members []string, member, key string) int {
	if !slices.Contains(members, member) {
		return len(members)
	}
	mine, rank := score(member, key), 0
	for _, m := range members {
		if s := score(m, key); m != member && (s > mine || (s == mine && m < member)) {
			rank++
		}
	}
	return rank
}

// score hashes member and key together, with splitmix64's finalizer so that similar names do
// not give similar scores.
func score(member, key string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(key))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Router says how long this replica waits before it decides a key.
type Router interface {
	// Delay is 0 for a key this replica owns, and a multiple of the backup delay for any other
	// key: the backups of a key wait in their rendezvous order.
	Delay(key string) time.Duration
}

// Judgment is this replica's part in deciding a key: the owner decides it at once; a backup
// decides it Delay later (its rendezvous rank times the backup delay), and leaves it alone one
// more delay when the owner was seen deciding it (Defers).
type Judgment struct {
	Owner bool
	Delay time.Duration
}

// Judge is the one judgment of ownership: the routed queue asks it when to hand a key out and
// whether to defer it, the key reconciler whether it refreshes waiters' positions, membership
// which replica collects a lapsed Lease. A nil router (one replica) owns every key.
func Judge(r Router, key string) Judgment {
	if r == nil {
		return Judgment{Owner: true}
	}
	d := r.Delay(key)
	return Judgment{Owner: d <= 0, Delay: max(d, 0)}
}

// Defers says whether a backup's item, come due, waits one more backup delay: it was not
// deferred before (a hung owner's key is decided within two delays), and the key was decided
// since the item was due for its owner, so the owner is alive and at work on it.
func (j Judgment) Defers(deferredBefore bool, lastDecided, due time.Time) bool {
	return !j.Owner && !deferredBefore && lastDecided.After(due)
}

package queue

// Shared and exclusive holding of one key (issue #31): who may hold beside whom, writer
// preference, and each shared holder's own token.

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
)

// allShared reports whether every request of set holds in Shared mode (true for an empty set).
func allShared(set []*entry) bool {
	for _, e := range set {
		if !e.shared {
			return false
		}
	}
	return true
}

// reentrant reports whether e is of the one identity that holds the whole non-empty set: it
// shares what its identity holds at once, whatever its mode or the queue ahead of it.
func reentrant(set []*entry, e *entry) bool {
	if len(set) == 0 {
		return false
	}
	for _, h := range set {
		if h.id != e.id {
			return false
		}
	}
	return true
}

// compatible reports whether e may hold beside set: a free key takes anyone; a shared request
// joins a set of shared holders, whatever their identities; an exclusive request holds alone
// (or with its own identity: reentrant). The invariant it keeps: the holders of a key are of
// one identity, or all shared — no exclusive holder beside a holder of another identity.
func compatible(set []*entry, e *entry) bool {
	if len(set) == 0 || reentrant(set, e) {
		return true
	}
	// guard:shared-beside-exclusive
	return e.shared && allShared(set)
}

// admitModes is who comes to hold the key now (admit), from the holders that stay and the
// queue in grant order. A grantable waiter of the identity that holds the whole key joins at
// once (re-entrant, as always). Every other grantable waiter, in queue order, holds if it is
// compatible with the holders (compatible) — until the first grantable exclusive waiter that
// cannot: no request behind it passes it (writer preference, as etcd's RWMutex), so a stream of
// readers never starves a writer. A writer that tries once (waitTimeout 0s) and cannot hold
// fails now, and stops nobody. A waiter that is not grantable (its command frozen, or an
// earlier key of its own not held yet) stops nobody. At most MaxSharedHolders hold in Shared
// mode; the next shared waiter waits for one of them to leave.
//
// Counting locks (counting.go): a waiter holds only within every bound on the holders
// (roomFor: spec.locks[].maxHolders, its own and theirs); a shared waiter a bound keeps out
// stops everyone behind it, as a writer does (FIFO at the bound). A counted grant has the
// decision's ProjectLock write to itself (tokens): a waiter that could hold but would share
// the write is left for the next decision (deferred), and more says so.
func admitModes(holders, waiting []*entry) (granted, rest []*entry, more bool) {
	set := append([]*entry{}, holders...)
	var writer *entry // the first waiter that cannot hold yet and that nobody behind may pass
	tok := newWriteToken(holders)
	for _, e := range waiting {
		join := false
		switch {
		case !grantable(e):
		// The bound holds for a re-entrant shared request too: one identity's readers, or its
		// readers beside its writer (the holding turns Shared with them once the writer goes).
		// guard:shared-holders-uncapped-reentrant
		case reentrant(set, e) && roomFor(set, e):
			join = true
		// guard:shared-writer-preference
		case writer != nil:
		case compatible(set, e) && roomFor(set, e):
			join = true
		// A writer that tries once (waitTimeout 0s) fails in this decision (tryOnce): it
		// leaves now, so it holds back nobody behind it.
		// guard:shared-try-once-writer-holds-back
		case !e.shared && !triesOnce(e):
			writer = e
		// A shared waiter that a bound keeps out (a counting lock full for it): nobody behind
		// passes it either, or one with a higher bound could starve it.
		// guard:counting-fifo-at-the-bound
		case compatible(set, e) && !triesOnce(e):
			writer = e
		}
		switch {
		case !join:
			rest = append(rest, e)
		case !tok.admits(e, len(granted)):
			rest, more = append(rest, deferred(e)), true
		default:
			granted, set = append(granted, e), append(set, e)
		}
	}
	return granted, rest, more
}

// roomFor reports whether e may join set: within every bound on the holders (withinBounds:
// spec.locks[].maxHolders of e and of every holder, a counting lock), and, for a shared
// request, while fewer than MaxSharedHolders shared requests are in set, whatever their
// identities and whatever else holds beside them (status.sharedHolders, which the API server
// bounds, lists them all once the holding is Shared).
func roomFor(set []*entry, e *entry) bool {
	// guard:counting-unbounded
	if !withinBounds(set, e) {
		return false
	}
	if !e.shared {
		return true
	}
	n := 0
	for _, h := range set {
		if h.shared {
			n++
		}
	}
	// guard:shared-holders-uncapped
	return n < locksv1.MaxSharedHolders
}

// triesOnce reports whether e asks never to wait (waitTimeout 0s): if it cannot hold now, the
// decision fails it (tryOnce).
func triesOnce(e *entry) bool {
	return e.req.Spec.WaitTimeout != nil && e.req.Spec.WaitTimeout.Duration == 0
}

// holderTokens is the holders after the decision, each with its token for the key (new
// entries). Holders of one identity (an exclusive holding) share the key's token, as always.
// Shared holders each keep their own: a confirmed one the token its status shows; a new or
// re-issued grant the decision's token, above every token granted on the key before.
func holderTokens(set []*entry, token int64) []*entry {
	shared := len(set) > 0 && allShared(set)
	out := make([]*entry, len(set))
	for i, e := range set {
		c := *e
		c.tok = token
		if shared && e.claims {
			if t := e.req.Status.Locks[e.ref.Index].FencingToken; t > 0 {
				c.tok = t
			}
		}
		out[i] = &c
	}
	return out
}

// sharedJoin reports whether requests join shared holders that stay (not a new holding): every
// such grant gets a new token, above every token granted on the key before it (the shared
// holders' included), so the decision's ProjectLock write computes one, as for a new holder.
// Joining an exclusive holding (its own identity's, re-entrant) keeps the holding's token.
func sharedJoin(newHolder bool, staying, granted []*entry) bool {
	if newHolder || len(granted) == 0 {
		return false
	}
	// guard:shared-token-per-grant
	return allShared(staying)
}

// sharedHolders is ProjectLock.status.sharedHolders for a shared set: each request with its
// identity and token, in grant order (token, then name); a holder listed before keeps its
// grantedAt.
func sharedHolders(lock *locksv1.ProjectLock, set []*entry, now time.Time) []locksv1.SharedHolder {
	since := map[types.UID]metav1.Time{}
	if lock != nil {
		for _, h := range lock.Status.SharedHolders {
			since[types.UID(h.Request.UID)] = h.GrantedAt
		}
	}
	sorted := append([]*entry{}, set...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].tok != sorted[j].tok {
			return sorted[i].tok < sorted[j].tok
		}
		return sorted[i].req.Name < sorted[j].req.Name
	})
	out := make([]locksv1.SharedHolder, 0, len(sorted))
	for _, e := range sorted {
		h := e.req.Spec.Holder
		at, ok := since[e.req.UID]
		if !ok {
			at = newTime(now)
		}
		out = append(out, locksv1.SharedHolder{
			Request: locksv1.HolderRequest{Name: e.req.Name, UID: string(e.req.UID)},
			Owner:   h.Owner, Pull: h.Pull, Session: h.Session, Cluster: h.Cluster, URL: h.URL,
			FencingToken: e.tok, GrantedAt: at, ExpiresAt: expiresAt(e, now),
		})
	}
	return out
}

// sharedText describes a shared holding for people: "pull #100 (alice) and 2 other shared
// holders", or "pull #100 (alice) (shared)" alone. It names the holder first by name, so the
// text does not change with the order the requests were read in.
func sharedText(set []*entry) string {
	first := set[0]
	for _, e := range set[1:] {
		if e.req.Name < first.req.Name {
			first = e
		}
	}
	desc := first.req.Spec.Holder.Describe()
	switch n := len(set) - 1; n {
	case 0:
		return desc + " (shared)"
	case 1:
		return desc + " and 1 other shared holder"
	default:
		return desc + " and " + strconv.Itoa(n) + " other shared holders"
	}
}

// markBehindWriter is the queue with the shared waiters that shared holders would take, were it
// not for an exclusive waiter ahead of them, told who they wait behind (new entries). It runs on
// the queue left after the decision's failures (a waitTimeout 0s, the cap), so it never names a
// waiter that leaves now.
func markBehindWriter(set, waiting []*entry) []*entry {
	if len(set) == 0 || !allShared(set) {
		return waiting
	}
	out := make([]*entry, len(waiting))
	var writer *entry
	for i, e := range waiting {
		out[i] = e
		switch {
		case !grantable(e):
		case !e.shared && writer == nil:
			writer = e
		case e.shared && writer != nil:
			c := *e
			c.behind = writer
			out[i] = &c
		}
	}
	return out
}

// writerText is what a waiter kept behind an exclusive waiter is told.
func writerText(w *entry) string {
	return fmt.Sprintf("waiting behind exclusive request %s of %s (writer preference)", w.req.Name, w.req.Spec.Holder.Describe())
}

// SharedOn reports whether lr asks for the key of ProjectLock name in Shared mode.
func SharedOn(lr *locksv1.LockRequest, name string) bool {
	for _, t := range lr.Spec.Locks {
		if t.Mode.IsShared() && lockkey.Name(t) == name {
			return true
		}
	}
	return false
}

// Package deadlock finds deadlocks between lock holders and picks a request to fail so the
// others can go on.
//
// The input is a snapshot of every lock key: who holds it and who waits for it, in grant order.
// From it the package builds a wait-for graph over holder identities (owner plus pull): A waits
// for B on key K when A waits on K and B either holds K or is ahead of A in K's queue.
//
// Most waits need all of their holders gone (an exclusive waiter behind shared holders); some
// are let in by any one of them leaving (a shared waiter on a key whose shared places are all
// taken; a counting key at its limit). The graph is an AND-OR graph: an identity is blocked
// while, for one of its waits, every identity that wait could be let in by is blocked. The
// blocked identities are what graph reduction leaves (FindCycles): let go everyone who waits for
// nothing, then everyone each of whose waits has someone let go, until nobody more can be; a
// cycle among what is left is a deadlock, because nobody on it can be granted until someone on
// it gives way. With only all-of waits this is the plain cycle rule.
//
// The package is pure: no Kubernetes client and no clock. The controller gathers the snapshot,
// asks for cycles, fails the victim a Policy chooses, and asks again on its next pass.
package deadlock

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// Identity is who holds or wants a lock: an owner, the pull request it acts for and its session,
// compared field by field (locksv1.HolderID). Requests of one identity share what it holds, so
// the graph is over identities, not requests.
type Identity = locksv1.HolderID

func compareIdentity(a, b Identity) int {
	return cmp.Or(strings.Compare(a.Owner, b.Owner), cmp.Compare(a.Pull, b.Pull), strings.Compare(a.Session, b.Session))
}

// Waiter is one request waiting in a key's queue.
type Waiter struct {
	Identity Identity
	// Request is the name of the waiting request, e.g. "plan-1".
	Request string
	// Priority is higher for more important requests (0 Low .. 3 Critical).
	Priority int
	// Arrival is when the request started waiting.
	Arrival time.Time
	// Shared is true when the request asks for the key in Shared mode: it waits for an
	// exclusive holder, or for the exclusive waiter ahead of it (writer preference), never for
	// shared holders or shared waiters ahead of it.
	Shared bool
	// KeptOut is true when a counting bound keeps a Shared waiter out (issue #45): the key's
	// holders are as many as its own maxHolders, or the lowest among theirs, allows. It waits
	// for any one of them to leave, and, as the grant order keeps FIFO at the bound, the shared
	// waiters behind it wait for it as for a writer.
	KeptOut bool
}

// KeyState is one lock key as the controller sees it.
type KeyState struct {
	Key    string
	Holder *Identity // the exclusive holder; nil when the key is free or held Shared
	// Shared are the identities that hold the key in Shared mode (each once); an exclusive
	// waiter waits for every one of them.
	Shared []Identity
	// Full is true when as many requests hold the key Shared as may (MaxSharedHolders): a
	// shared waiter then waits for the shared holders too, for one of them to leave.
	Full  bool
	Queue []Waiter // in grant order: Queue[0] is granted next
}

// holders are the identities that hold the key, in either mode.
func (ks KeyState) holders() []Identity {
	if ks.Holder != nil {
		return []Identity{*ks.Holder}
	}
	return ks.Shared
}

// Edge says From waits for To on Key: To holds Key (Holds), or To is ahead of From in Key's
// queue. Waiter is From's request on Key, the one to fail to remove this edge.
//
// AnyOf is set when From's wait is let in by any one holder of Key leaving (an any-of wait):
// To is one of those holders, and AnyOf are the others, each blocked as well (by the wait each
// carries), so none of them will leave either.
type Edge struct {
	From, To Identity
	Key      string
	Holds    bool
	Waiter   Waiter
	AnyOf    []Blocked
}

// Blocked is an identity that an any-of hop also waits for, and the wait that blocks it: its
// request Waiter, waiting on Key.
type Blocked struct {
	Identity Identity
	Key      string
	Waiter   Waiter
}

// Cycle is a deadlock: Edges[i].To is Edges[i+1].From, and the last edge leads back to
// Edges[0].From. Consecutive edges are on different keys, and Edges[0].From is the smallest
// identity on the cycle, so one deadlock always reads the same way.
type Cycle struct {
	Edges []Edge
}

// String explains the cycle, e.g. "deadlock: alice#1 waits for bob#2 on k2; bob#2 waits for
// alice#1 on k1".
func (c Cycle) String() string {
	if len(c.Edges) == 0 {
		return ""
	}
	hops := make([]string, len(c.Edges))
	for i, e := range c.Edges {
		if len(e.AnyOf) == 0 {
			hops[i] = fmt.Sprintf("%s waits for %s on %s", e.From, e.To, e.Key)
			continue
		}
		// An any-of hop names everyone it waits for, and what keeps the others from leaving.
		others := make([]string, len(e.AnyOf))
		blocked := make([]string, len(e.AnyOf))
		for j, b := range e.AnyOf {
			others[j] = b.Identity.String()
			blocked[j] = fmt.Sprintf("%s waits on %s", b.Identity, b.Key)
		}
		hops[i] = fmt.Sprintf("%s waits for any of %s, %s on %s (%s)", e.From, e.To, strings.Join(others, ", "), e.Key, strings.Join(blocked, ", "))
	}
	return "deadlock: " + strings.Join(hops, "; ")
}

// Graph is the wait-for graph of one snapshot. Build it once per snapshot; it is read-only
// afterwards and safe for concurrent readers.
type Graph struct {
	ids   []Identity // node number -> identity, sorted, so every walk is deterministic
	index map[Identity]int
	keys  []KeyState // sorted by key
	// arcs are all edges, grouped by their From node and in key order within a group; node n's
	// are arcs[start[n]:start[n+1]]. One flat slice without pointers keeps Build to a few
	// allocations and gives the garbage collector nothing to scan.
	arcs  []arc
	start []int
	// anyOf is set when some arc is an any-of wait's: only then does FindCycles reduce the
	// graph first (with all-of waits only, the cycles are the plain graph's).
	anyOf bool
}

// arc is an edge in node numbers: the waiter is keys[key].Queue[pos]. Edges are made from arcs
// only for the cycles reported.
type arc struct {
	from, to int
	key, pos int
	holds    bool
	// anyOf: the arc is one of an any-of wait's: from's arcs on key with anyOf set are one wait,
	// let in by any one of them.
	anyOf bool
}

// out is the range of n's arcs in g.arcs: at most one per key n waits on.
func (g *Graph) out(n int) (lo, hi int) { return g.start[n], g.start[n+1] }

// edge is the hop from first's waiter to last's target: one arc (first == last), or a run of
// arcs up one key's queue. An any-of last arc names the others of its wait, each with the first
// wait that blocks it (g is the graph of the blocked, where each of them has one).
func (g *Graph) edge(first, last arc) Edge {
	ks := g.keys[first.key]
	e := Edge{From: g.ids[first.from], To: g.ids[last.to], Key: ks.Key, Holds: last.holds, Waiter: ks.Queue[first.pos]}
	if !last.anyOf {
		return e
	}
	lo, hi := g.out(last.from)
	for _, o := range g.arcs[lo:hi] {
		if !o.anyOf || o.key != last.key || o.to == last.to || o.to == first.from {
			continue
		}
		b := Blocked{Identity: g.ids[o.to]}
		if blo, bhi := g.out(o.to); blo < bhi {
			by := g.arcs[blo]
			b.Key, b.Waiter = g.keys[by.key].Key, g.keys[by.key].Queue[by.pos]
		}
		e.AnyOf = append(e.AnyOf, b)
	}
	return e
}

// Build makes the wait-for graph of a snapshot. Key order does not matter; a key listed twice is
// read once (its first entry). The graph refers to the queues rather than copying them: leave
// them unchanged while using it.
//
// Build keeps only the transitive reduction of each queue: a waiter points at the nearest other
// identity ahead of it, and the head of the queue at the holder. That is O(queue) edges instead
// of O(queue²), and loses nothing: a waiter still reaches everyone ahead of it. Cycles are
// reported with full-graph edges (see FindCycles), so every hop they name is true as written.
//
// Two rules decide where an identity stands in a queue:
//   - A waiter whose identity holds the key is re-entrant: it is granted at once, so it waits
//     for nobody on that key and nobody waits for it there (beyond waiting for the holder).
//   - An identity queued several times stands at its first position; its later entries add
//     nothing, since it cannot wait for someone behind its own earliest request.
func Build(keys []KeyState) *Graph {
	sorted := slices.Clone(keys)
	slices.SortStableFunc(sorted, func(a, b KeyState) int { return strings.Compare(a.Key, b.Key) })

	g := &Graph{index: make(map[Identity]int), keys: sorted}
	waiting := g.collectIdentities()
	arcs := make([]arc, 0, waiting) // in key order; a waiter makes one, or one per shared holder
	// placed[n] == i+1 once identity n has its position in sorted[i]'s queue; a per-key stamp
	// saves clearing a set for every key.
	placed := make([]int, len(g.ids))
	for i, ks := range sorted {
		if i > 0 && ks.Key == sorted[i-1].Key {
			continue
		}
		holders := make([]int, 0, 1)
		// guard:shared-deadlock-one-holder
		for _, h := range ks.holders() {
			holders = append(holders, g.index[h])
		}
		sole := -1 // the one identity that holds the key, whose requests re-enter at once
		if len(holders) == 1 {
			sole = holders[0]
		}
		ahead, writer := -1, -1 // the nearest other identity ahead; the nearest exclusive one
		for pos, w := range ks.Queue {
			n := g.index[w.Identity]
			if n == sole || placed[n] == i+1 {
				continue
			}
			placed[n] = i + 1
			switch {
			case !w.Shared && ahead >= 0:
				arcs = append(arcs, arc{from: n, to: ahead, key: i, pos: pos})
			case w.Shared && writer >= 0:
				// Writer preference: it waits for the exclusive waiter ahead of it.
				arcs = append(arcs, arc{from: n, to: writer, key: i, pos: pos})
			// guard:deadlock-shared-cap-no-edge
			case w.Shared && ks.Holder == nil && !ks.Full && !w.KeptOut:
				// Shared holders (or none) with room, and no writer ahead: it waits for
				// nobody here.
			default:
				// A waiter waits for the holders of the key: for every one of them, or, where
				// any one leaving lets it in, for any of them.
				anyOf := letInByAnyOne(ks, w)
				g.anyOf = g.anyOf || anyOf
				for _, h := range holders {
					if h != n {
						arcs = append(arcs, arc{from: n, to: h, key: i, pos: pos, holds: true, anyOf: anyOf})
					}
				}
			}
			ahead = n
			// guard:deadlock-kept-out-blocks-behind
			if !w.Shared || w.KeptOut {
				writer = n
			}
		}
	}

	g.group(arcs)
	return g
}

// letInByAnyOne reports whether w, at the head of what waits for ks's holders, is let in by any
// one of them leaving (an any-of wait) rather than only once all of them have: a shared waiter
// on a key whose shared places are all taken (Full) waits for one place, which any shared
// holder frees. A waiter a counting bound keeps out (KeptOut) waits the same way: when every
// bound agrees, any one holder leaving lets it in; when its own bound is lower than theirs it
// needs several to leave, and any-of is the weaker claim (it can miss such a deadlock, never
// name a false one).
func letInByAnyOne(ks KeyState, w Waiter) bool {
	// guard:deadlock-any-of
	// guard:deadlock-counting-any-of
	return w.Shared && ks.Holder == nil && (ks.Full || w.KeptOut)
}

// collectIdentities numbers every identity that holds or waits on g's keys, in identity order,
// and returns how many requests wait.
func (g *Graph) collectIdentities() int {
	add := func(id Identity) {
		if _, ok := g.index[id]; !ok {
			g.index[id] = len(g.ids)
			g.ids = append(g.ids, id)
		}
	}
	waiting := 0
	for _, ks := range g.keys {
		waiting += len(ks.Queue)
		for _, h := range ks.holders() {
			add(h)
		}
		for _, w := range ks.Queue {
			add(w.Identity)
		}
	}
	slices.SortFunc(g.ids, compareIdentity)
	for n, id := range g.ids {
		g.index[id] = n
	}
	return waiting
}

// group stores arcs grouped by From (a counting sort, so each group stays in key order).
func (g *Graph) group(arcs []arc) {
	g.start = make([]int, len(g.ids)+1)
	for _, a := range arcs {
		g.start[a.from+1]++
	}
	for n := range g.ids {
		g.start[n+1] += g.start[n]
	}
	g.arcs = make([]arc, len(arcs))
	next := slices.Clone(g.start[:len(g.ids)])
	for _, a := range arcs {
		g.arcs[next[a.from]] = a
		next[a.from]++
	}
}

package deadlock

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fullEdge is an edge of the full wait-for graph, built here straight from the definition, with
// no reduction, to check the package against.
type fullEdge struct {
	from, to Identity
	key      string
}

type fullGraph struct {
	edges map[fullEdge]Edge // with the Holds and Waiter the edge must carry
	out   map[Identity][]fullEdge
	ids   []Identity
}

func buildFull(keys []KeyState) fullGraph {
	g := fullGraph{edges: map[fullEdge]Edge{}, out: map[Identity][]fullEdge{}}
	seen := map[Identity]bool{}
	note := func(id Identity) {
		if !seen[id] {
			seen[id] = true
			g.ids = append(g.ids, id)
		}
	}
	add := func(from, to Identity, k string, holds bool, waiter Waiter) {
		e := fullEdge{from, to, k}
		g.edges[e] = Edge{From: from, To: to, Key: k, Holds: holds, Waiter: waiter}
		g.out[from] = append(g.out[from], e)
	}
	for _, ks := range keys {
		if ks.Holder != nil {
			note(*ks.Holder)
		}
		var ahead []Identity // distinct identities queued so far, not holding ks
		for _, wt := range ks.Queue {
			note(wt.Identity)
			if ks.Holder != nil && wt.Identity == *ks.Holder || slices.Contains(ahead, wt.Identity) {
				continue
			}
			if ks.Holder != nil {
				add(wt.Identity, *ks.Holder, ks.Key, true, wt)
			}
			for _, a := range ahead {
				add(wt.Identity, a, ks.Key, false, wt)
			}
			ahead = append(ahead, wt.Identity)
		}
	}
	slices.SortFunc(g.ids, compareIdentity)
	return g
}

// reach is everyone reachable from src in one or more steps, never passing through avoid.
func (g fullGraph) reach(src Identity, avoid *Identity) map[Identity]bool {
	got := map[Identity]bool{}
	queue := []Identity{src}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, e := range g.out[v] {
			if got[e.to] || avoid != nil && e.to == *avoid {
				continue
			}
			got[e.to] = true
			queue = append(queue, e.to)
		}
	}
	return got
}

// essential reports whether id is on a cycle through its own wait on some key K, entered on a
// key other than K: the cycles CyclesThrough promises to find.
func (g fullGraph) essential(id Identity) bool {
	for _, first := range g.out[id] {
		from := g.reach(first.to, &id)
		from[first.to] = true
		for x := range from {
			for _, back := range g.out[x] {
				if back.to == id && back.key != first.key {
					return true
				}
			}
		}
	}
	return false
}

// checkCycle fails t unless c is a closed, elementary cycle of true full-graph edges, with
// consecutive hops on different keys, starting at its smallest identity.
func (g fullGraph) checkCycle(t *testing.T, c Cycle) {
	t.Helper()
	n := len(c.Edges)
	if n < 2 {
		t.Fatalf("cycle %v: want at least two hops", c)
	}
	froms := map[Identity]bool{}
	for i, e := range c.Edges {
		next := c.Edges[(i+1)%n]
		if e.To != next.From {
			t.Errorf("cycle %v: hop %d ends at %s, hop %d starts at %s", c, i, e.To, (i+1)%n, next.From)
		}
		if e.Key == next.Key {
			t.Errorf("cycle %v: hops %d and %d are both on %s", c, i, (i+1)%n, e.Key)
		}
		if froms[e.From] {
			t.Errorf("cycle %v: %s is on it twice", c, e.From)
		}
		froms[e.From] = true
		if compareIdentity(e.From, c.Edges[0].From) < 0 {
			t.Errorf("cycle %v: starts at %s, not at its smallest identity %s", c, c.Edges[0].From, e.From)
		}
		want, ok := g.edges[fullEdge{e.From, e.To, e.Key}]
		if !ok {
			t.Errorf("cycle %v: hop %d is no edge of the wait-for graph", c, i)
			continue
		}
		if diff := cmp.Diff(want, e); diff != "" {
			t.Errorf("cycle %v: hop %d (-want +got):\n%s", c, i, diff)
		}
	}
}

// randomKeys is a small random snapshot: few identities and keys, so cycles, re-entrant
// waiters and identities queued twice are all common.
func randomKeys(r *rand.Rand) []KeyState {
	ids := []Identity{alice, bob, carol, dave, erin, {Owner: "ci"}}
	keys := make([]KeyState, 1+r.IntN(6))
	for i := range keys {
		keys[i].Key = key(i)
		if r.IntN(4) > 0 {
			keys[i].Holder = &ids[r.IntN(len(ids))]
		}
		for j := range r.IntN(5) {
			id := ids[r.IntN(len(ids))]
			keys[i].Queue = append(keys[i].Queue, Waiter{Identity: id, Request: fmt.Sprintf("%s-%d", id.Owner, j)})
		}
	}
	return keys
}

// TestAgainstFullGraph checks FindCycles and CyclesThrough on random snapshots against the
// full wait-for graph: every hop they report is a true edge, FindCycles reports exactly one
// cycle per deadlocked group, CyclesThrough finds a cycle exactly when one exists, and neither
// depends on the order of the keys.
func TestAgainstFullGraph(t *testing.T) {
	var withCycles, without int
	for seed := range uint64(3000) {
		r := rand.New(rand.NewPCG(seed, 1))
		keys := randomKeys(r)
		full := buildFull(keys)
		g := Build(keys)
		cycles := g.FindCycles()

		// Group identities on cycles by their component: mutual reachability.
		reach := map[Identity]map[Identity]bool{}
		for _, id := range full.ids {
			reach[id] = full.reach(id, nil)
		}
		component := map[Identity]Identity{} // id -> smallest identity it is deadlocked with
		for _, id := range full.ids {
			for _, other := range full.ids { // ascending, so the first match is the smallest
				if reach[id][other] && reach[other][id] {
					component[id] = other
					break
				}
			}
		}
		groups := map[Identity]bool{}
		for _, root := range component {
			groups[root] = true
		}
		if len(groups) > 0 {
			withCycles++
		} else {
			without++
		}

		if len(cycles) != len(groups) {
			t.Errorf("seed %d: FindCycles() = %v, want one cycle for each of %d groups in %+v", seed, cycles, len(groups), keys)
		}
		found := map[Identity]bool{}
		for _, c := range cycles {
			full.checkCycle(t, c)
			root := component[c.Edges[0].From]
			for _, e := range c.Edges {
				if component[e.From] != root {
					t.Errorf("seed %d: cycle %v spans groups", seed, c)
				}
			}
			if found[root] {
				t.Errorf("seed %d: two cycles for the group of %s", seed, root)
			}
			found[root] = true
		}

		shuffled := slices.Clone(keys)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		sg := Build(shuffled)
		if diff := cmp.Diff(cycles, sg.FindCycles()); diff != "" {
			t.Errorf("seed %d: FindCycles() depends on key order (-sorted +shuffled):\n%s", seed, diff)
		}

		for _, id := range full.ids {
			through := g.CyclesThrough(id)
			if want := full.essential(id); want != (len(through) > 0) {
				t.Errorf("seed %d: CyclesThrough(%s) = %v, want a cycle: %t, in %+v", seed, id, through, want, keys)
			}
			if len(through) > 1 {
				t.Errorf("seed %d: CyclesThrough(%s) = %v, want at most one", seed, id, through)
			}
			for _, c := range through {
				full.checkCycle(t, c)
				if !slices.ContainsFunc(c.Edges, func(e Edge) bool { return e.From == id }) {
					t.Errorf("seed %d: CyclesThrough(%s) = %v, which %s does not wait on", seed, id, c, id)
				}
			}
			if diff := cmp.Diff(through, sg.CyclesThrough(id)); diff != "" {
				t.Errorf("seed %d: CyclesThrough(%s) depends on key order (-sorted +shuffled):\n%s", seed, id, diff)
			}
		}
		if t.Failed() {
			return
		}
	}
	t.Logf("%d snapshots with cycles, %d without", withCycles, without)
	// The random snapshots must exercise both outcomes, or this test proves nothing.
	if withCycles < 300 || without < 300 {
		t.Errorf("%d snapshots with cycles, %d without; want at least 300 of each", withCycles, without)
	}
}

package deadlock

import "slices"

// FindCycles returns one cycle for every group of identities that are deadlocked together (every
// non-trivial strongly connected component), ordered by their first identity, or nil when there
// is no deadlock. It runs in O(identities + edges).
//
// One cycle per component, not every cycle in it, is deliberate: components can hold
// exponentially many cycles, and they usually share identities, so failing one victim often
// breaks several. The caller fails one victim per cycle, rebuilds the graph from the new
// snapshot, and calls again until nothing is returned; whatever is still deadlocked shows up
// then.
//
// Each cycle is found as a shortest one through the component's smallest identity; then every
// run of hops along one queue becomes a single hop (A behind B behind C on K becomes "A waits for
// C on K"), which drops whoever was only queued in between. So every member of a reported cycle
// waits on another key than the one it is waited for on, and failing any member's request on its
// hop's key removes that hop; failing a bystander in the middle of a queue would not.
func (g *Graph) FindCycles() []Cycle {
	g = g.blocked()
	comp, roots := g.components()
	s := g.newSearch()
	var cycles []Cycle
	for c, root := range roots {
		walk := s.cycle(root, false, func(n int) bool { return comp[n] == c })
		cycles = append(cycles, g.shorten(walk))
	}
	slices.SortFunc(cycles, func(a, b Cycle) int {
		return compareIdentity(a.Edges[0].From, b.Edges[0].From)
	})
	return cycles
}

// CyclesThrough returns a cycle in which id's own waiting is one of the hops, or nil if there is
// none: a wait that closes a new cycle is always such a hop, so failing id's request is one way
// out. It is one breadth-first search from id, over what id can reach, and stops at the first
// cycle it finds.
//
// The manager does not call it: its detector runs FindCycles over the whole namespace, after
// skipping the new waits that cannot close a cycle (controller.cannotCloseCycle). It is a test
// oracle: fullgraph_test.go checks it, with FindCycles, against the full wait-for graph, and the
// benchmark prices a per-waiter check with it.
//
// An identity that is only queued behind a deadlock, between two members waiting on the same
// key, gets nil even though it is stuck: failing it would not help anyone. The cycle it is stuck
// behind existed before it arrived, and FindCycles reports it.
func (g *Graph) CyclesThrough(id Identity) []Cycle {
	g = g.blocked()
	n, ok := g.index[id]
	if !ok {
		return nil
	}
	if walk := g.newSearch().cycle(n, true, nil); walk != nil {
		return []Cycle{g.shorten(walk)}
	}
	return nil
}

// search is a breadth-first search for a short cycle through one node, the target. Its
// per-node state is sized to the graph once and cleared after each search, so FindCycles can
// search every component without paying for the whole graph each time.
type search struct {
	g     *Graph
	steps []step     // every node reached, in order: both the queue and the way back
	at    [][2]int32 // at[n]: where n is in steps (1-based; 0: not reached), at most twice
}

// step says node was reached by arc via, on a walk that left the target by arc first.
type step struct{ node, first, via int }

func (g *Graph) newSearch() *search {
	return &search{g: g, at: make([][2]int32, len(g.ids))}
}

// cycle returns the arcs of a shortest cycle from target back to target that stays on nodes
// within accepts (nil: any), or nil if there is none. It never passes through target twice, so
// the cycle is elementary.
//
// With otherKey, the hop back into target must be on another key than the hop out of it: on
// the same key it would come from someone behind target in that queue, who waits for target's
// next hop directly, and target would be a bystander. The key of the hop out is a label the
// walk carries; a node is searched once per label but at most twice, which is enough: the
// target's hops out are on different keys, and whatever key a hop back is on, one of two
// labels differs from it.
func (s *search) cycle(target int, otherKey bool, within func(node int) bool) []arc {
	defer s.clear()
	labels := 1
	if otherKey {
		labels = 2
	}
	g := s.g
	lo, hi := g.out(target)
	for a := lo; a < hi; a++ {
		if to := g.arcs[a].to; within == nil || within(to) {
			s.reach(step{node: to, first: a, via: a}, labels)
		}
	}
	for i := 0; i < len(s.steps); i++ {
		st := s.steps[i]
		lo, hi := g.out(st.node)
		for a := lo; a < hi; a++ {
			to := g.arcs[a].to
			if to == target {
				if !otherKey || g.arcs[a].key != g.arcs[st.first].key {
					return s.walk(st, a)
				}
				continue
			}
			if within == nil || within(to) {
				s.reach(step{node: to, first: st.first, via: a}, labels)
			}
		}
	}
	return nil
}

// reach records st unless its node was already reached on the same label or on enough others.
func (s *search) reach(st step, labels int) {
	at := &s.at[st.node]
	for k := range labels {
		if at[k] == 0 {
			s.steps = append(s.steps, st)
			at[k] = int32(len(s.steps))
			return
		}
		if s.steps[at[k]-1].first == st.first {
			return
		}
	}
}

// walk follows the steps back from st, which closes the cycle with arc back, to the target.
func (s *search) walk(st step, back int) []arc {
	walk := []arc{s.g.arcs[back]}
	for {
		walk = append(walk, s.g.arcs[st.via])
		if st.via == st.first {
			break
		}
		from := s.g.arcs[st.via].from
		for _, k := range s.at[from] {
			if k != 0 && s.steps[k-1].first == st.first {
				st = s.steps[k-1]
				break
			}
		}
	}
	slices.Reverse(walk)
	return walk
}

func (s *search) clear() {
	for _, st := range s.steps {
		s.at[st.node] = [2]int32{}
	}
	s.steps = s.steps[:0]
}

// components is Tarjan's strongly connected components, iterative so a long chain of waiters
// cannot overflow the stack. comp[n] is n's component number, or -1 if n is alone (there are no
// self-edges, so a lone node is on no cycle); roots[c] is component c's smallest node.
func (g *Graph) components() (comp, roots []int) {
	n := len(g.ids)
	order := make([]int, n) // DFS discovery number, 1-based; 0 = not yet visited
	low := make([]int, n)
	onStack := make([]bool, n)
	comp = make([]int, n)
	var stack []int
	type frame struct{ node, next int } // next: the node's next arc to look at
	var calls []frame
	visited := 0

	visit := func(v int) {
		visited++
		order[v], low[v] = visited, visited
		stack = append(stack, v)
		onStack[v] = true
		lo, _ := g.out(v)
		calls = append(calls, frame{node: v, next: lo})
	}
	for start := range n {
		if order[start] != 0 {
			continue
		}
		visit(start)
		for len(calls) > 0 {
			f := &calls[len(calls)-1]
			v := f.node
			if _, hi := g.out(v); f.next < hi {
				w := g.arcs[f.next].to
				f.next++
				if order[w] == 0 {
					visit(w)
				} else if onStack[w] {
					low[v] = min(low[v], order[w])
				}
				continue
			}
			calls = calls[:len(calls)-1]
			if len(calls) > 0 {
				parent := calls[len(calls)-1].node
				low[parent] = min(low[parent], low[v])
			}
			if low[v] != order[v] {
				continue
			}
			// v is the root of a component: everything above it on the stack.
			i := len(stack) - 1
			for stack[i] != v {
				i--
			}
			members := stack[i:]
			stack = stack[:i]
			c := -1
			if len(members) > 1 {
				c = len(roots)
				roots = append(roots, slices.Min(members))
			}
			for _, m := range members {
				onStack[m] = false
				comp[m] = c
			}
		}
	}
	return comp, roots
}

// shorten turns an elementary cycle of graph arcs into a Cycle of full-graph edges. Arcs are the
// reduced queue edges, so a run of hops on one key walks up that key's queue; the first waiter of
// the run waits for the last one's target directly, and that single hop replaces the run. A
// cycle cannot lie on one key alone (a queue has no way back to its tail), so some hop changes
// key and the merging can start there. The result starts at its smallest identity.
func (g *Graph) shorten(cycle []arc) Cycle {
	n := len(cycle)
	start := 0
	for i := range n {
		if cycle[(i+n-1)%n].key != cycle[i].key {
			start = i
			break
		}
	}
	var firsts, lasts []arc
	for i := range n {
		a := cycle[(start+i)%n]
		if len(lasts) > 0 && lasts[len(lasts)-1].key == a.key {
			lasts[len(lasts)-1] = a
			continue
		}
		firsts, lasts = append(firsts, a), append(lasts, a)
	}
	edges := make([]Edge, len(firsts))
	for i := range firsts {
		edges[i] = g.edge(firsts[i], lasts[i])
	}
	first := 0
	for i, e := range edges {
		if compareIdentity(e.From, edges[first].From) < 0 {
			first = i
		}
	}
	return Cycle{Edges: slices.Concat(edges[first:], edges[:first])}
}

// blocked is the graph of the identities that can never go on, with only the arcs that keep
// them so: graph reduction over the AND-OR graph. An identity is let go when each of its waits is
// met: an all-of arc when its target is let go, an any-of wait when one of its arcs' targets is.
// Whoever waits for nothing is let go first; then, in turn, everyone whose last unmet wait that
// meets. What is left is blocked: each of them has a wait whose every way out is blocked too.
// The arcs kept are those of unmet waits of blocked identities, so every blocked identity keeps
// one at least, and every cycle among them is a deadlock. With only all-of arcs, the cycles are
// the plain graph's: what is let go is on no cycle.
func (g *Graph) blocked() *Graph {
	if !g.anyOf {
		return g
	}
	n := len(g.ids)
	// need[v] counts v's unmet waits; wait[a] is the first arc of a's wait (an any-of wait's
	// arcs are adjacent: one waiter's, on one key).
	need := make([]int, n)
	wait := make([]int, len(g.arcs))
	for v := range n {
		lo, hi := g.out(v)
		for a := lo; a < hi; a++ {
			wait[a] = a
			// guard:deadlock-any-of-one-wait
			if a > lo && g.arcs[a].anyOf && g.arcs[a-1].anyOf && g.arcs[a-1].key == g.arcs[a].key {
				wait[a] = wait[a-1]
				continue
			}
			need[v]++
		}
	}
	// The arcs into each node, to meet waits as their targets are let go.
	into := make([]int, n+1)
	for _, a := range g.arcs {
		into[a.to+1]++
	}
	for v := range n {
		into[v+1] += into[v]
	}
	by := make([]int, len(g.arcs))
	next := slices.Clone(into[:n])
	for i, a := range g.arcs {
		by[next[a.to]] = i
		next[a.to]++
	}
	met := make([]bool, len(g.arcs))
	var free []int
	for v := range n {
		if need[v] == 0 {
			free = append(free, v)
		}
	}
	for len(free) > 0 {
		v := free[len(free)-1]
		free = free[:len(free)-1]
		for _, a := range by[into[v]:into[v+1]] {
			if w := wait[a]; !met[w] {
				met[w] = true
				from := g.arcs[a].from
				if need[from]--; need[from] == 0 {
					free = append(free, from)
				}
			}
		}
	}
	kept := make([]arc, 0, len(g.arcs))
	for a, x := range g.arcs {
		if need[x.from] > 0 && !met[wait[a]] {
			kept = append(kept, x)
		}
	}
	if len(kept) == len(g.arcs) {
		return g
	}
	b := &Graph{ids: g.ids, index: g.index, keys: g.keys}
	b.group(kept)
	return b
}

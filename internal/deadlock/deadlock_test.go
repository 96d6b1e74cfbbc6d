package deadlock

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var (
	t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	alice = Identity{Owner: "alice", Pull: 1}
	bob   = Identity{Owner: "bob", Pull: 2}
	carol = Identity{Owner: "carol", Pull: 3}
	dave  = Identity{Owner: "dave", Pull: 4}
	erin  = Identity{Owner: "erin", Pull: 5}
	frank = Identity{Owner: "frank", Pull: 6}
	hank  = Identity{Owner: "hank", Pull: 8}
)

func key(n int) string { return fmt.Sprintf("acme/infra/k%d/default", n) }

var (
	k1, k2, k3, k4, k5, k6 = key(1), key(2), key(3), key(4), key(5), key(6)
)

// w is id's request on k. Tests build expected edges with the same helper, so a wrong Waiter on
// an edge shows up in the diff.
func w(id Identity, k string) Waiter {
	return Waiter{Identity: id, Request: id.Owner + "@" + k, Priority: 1, Arrival: t0}
}

func held(k string, holder Identity, queue ...Waiter) KeyState {
	return KeyState{Key: k, Holder: &holder, Queue: queue}
}

func free(k string, queue ...Waiter) KeyState {
	return KeyState{Key: k, Queue: queue}
}

// holds is the edge "from waits for to, who holds k".
func holds(from, to Identity, k string) Edge {
	return Edge{From: from, To: to, Key: k, Holds: true, Waiter: w(from, k)}
}

// behind is the edge "from waits for to, who is ahead of it in k's queue".
func behind(from, to Identity, k string) Edge {
	return Edge{From: from, To: to, Key: k, Waiter: w(from, k)}
}

func cycle(edges ...Edge) Cycle { return Cycle{Edges: edges} }

// pair makes x hold kx and y hold ky, each waiting for the other's key: a two-holder deadlock.
func pair(x, y Identity, kx, ky string) []KeyState {
	return []KeyState{held(kx, x, w(y, kx)), held(ky, y, w(x, ky))}
}

// pairCycle is the cycle "x waits for y on ky; y waits for x on kx", as FindCycles reports the
// deadlock of pair(x, y, kx, ky) when x sorts before y.
func pairCycle(x, y Identity, kx, ky string) Cycle {
	return cycle(holds(x, y, ky), holds(y, x, kx))
}

// nodes returns n identities that sort in index order.
func nodes(n int) []Identity {
	ids := make([]Identity, n)
	for i := range ids {
		ids[i] = Identity{Owner: fmt.Sprintf("u%04d", i), Pull: int64(i + 1)}
	}
	return ids
}

// ring makes ids[i] hold key i and wait on key i+1, the last waiting on key 0: a deadlock of
// len(ids) holders. It returns the keys and the cycle FindCycles must report.
func ring(ids []Identity) ([]KeyState, Cycle) {
	var keys []KeyState
	var want Cycle
	for i, id := range ids {
		next := ids[(i+1)%len(ids)]
		k := fmt.Sprintf("ring/%s/default", id.Owner)
		nk := fmt.Sprintf("ring/%s/default", next.Owner)
		keys = append(keys, held(k, id, w(ids[(i+len(ids)-1)%len(ids)], k)))
		want.Edges = append(want.Edges, holds(id, next, nk))
	}
	return keys, want
}

// chain makes ids[i] hold key i and wait on key i+1, the last key free: everybody waits, nobody
// is deadlocked.
func chain(ids []Identity) []KeyState {
	var keys []KeyState
	for i, id := range ids {
		k := fmt.Sprintf("chain/%s/default", id.Owner)
		if i == 0 {
			keys = append(keys, free(k))
		} else {
			keys = append(keys, held(k, ids[i-1]))
		}
		keys[i].Queue = []Waiter{w(id, k)}
	}
	return keys
}

func concat(parts ...[]KeyState) []KeyState {
	var all []KeyState
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

var (
	tenRing, tenCycle     = ring(nodes(10))
	threeRing, threeCycle = ring([]Identity{carol, dave, erin})
)

// The scenarios FindCycles and CyclesThrough share.
var (
	twoCycle = pair(alice, bob, k1, k2)
	// Nobody holds anything: alice is ahead of bob on k1, bob ahead of alice on k2.
	queueOnlyCycle = []KeyState{
		free(k1, w(alice, k1), w(bob, k1)),
		free(k2, w(bob, k2), w(alice, k2)),
	}
	// alice waits on k1 behind bob and carol, for hank, who waits on k2 for alice. bob and carol
	// are stuck too, but failing them frees nobody.
	runOnOneQueue = []KeyState{
		held(k1, hank, w(carol, k1), w(bob, k1), w(alice, k1)),
		held(k2, alice, w(hank, k2)),
	}
	// As runOnOneQueue, plus bob holds k3, which erin holds k4 waiting for; bob waits on k4. So
	// bob is a bystander on k1 but a member of the bob/erin cycle.
	bystanderAndMember = concat(runOnOneQueue, pair(bob, erin, k3, k4))
	// dave waits for alice, who is deadlocked with bob; dave is not on the cycle.
	chainIntoCycle = append(twoCycle[:2:2], held(k3, alice, w(dave, k3)))
)

func TestFindCycles(t *testing.T) {
	cases := map[string]struct {
		keys       []KeyState
		wantCycles []Cycle
	}{
		"no keys": {},
		"free key, nobody waiting": {
			keys: []KeyState{free(k1)},
		},
		"one holder, one waiter": {
			keys: []KeyState{held(k1, alice, w(bob, k1))},
		},
		"two holders wait for each other": {
			keys:       twoCycle,
			wantCycles: []Cycle{pairCycle(alice, bob, k1, k2)},
		},
		"three-cycle": {
			keys:       threeRing,
			wantCycles: []Cycle{threeCycle},
		},
		"ten-cycle": {
			keys:       tenRing,
			wantCycles: []Cycle{tenCycle},
		},
		"cycle through a queue-ahead edge": {
			keys: []KeyState{
				held(k1, hank, w(alice, k1), w(bob, k1)),
				held(k2, bob, w(alice, k2)),
			},
			wantCycles: []Cycle{cycle(holds(alice, bob, k2), behind(bob, alice, k1))},
		},
		"cycle through queue-ahead edges only": {
			keys:       queueOnlyCycle,
			wantCycles: []Cycle{cycle(behind(alice, bob, k2), behind(bob, alice, k1))},
		},
		"a run up one queue is one hop to the holder": {
			keys:       runOnOneQueue,
			wantCycles: []Cycle{pairCycle(alice, hank, k2, k1)},
		},
		"a run up one queue is one hop to a waiter ahead": {
			keys: []KeyState{
				free(k1, w(dave, k1), w(carol, k1), w(bob, k1), w(alice, k1)),
				held(k2, alice, w(dave, k2)),
			},
			wantCycles: []Cycle{cycle(behind(alice, dave, k1), holds(dave, alice, k2))},
		},
		"long chain": {
			keys: chain(nodes(1000)),
		},
		"diamond": {
			// alice waits for bob and carol, who both wait for dave.
			keys: []KeyState{
				held(k1, bob, w(alice, k1)),
				held(k2, carol, w(alice, k2)),
				held(k3, dave, w(bob, k3), w(carol, k3)),
			},
		},
		"diamond of queues": {
			// As above with queue-ahead edges: bob and carol are ahead of alice, dave of them.
			keys: []KeyState{
				free(k1, w(dave, k1), w(bob, k1), w(alice, k1)),
				free(k2, w(dave, k2), w(carol, k2), w(alice, k2)),
			},
		},
		"several independent cycles, each once": {
			keys: concat(
				chain([]Identity{frank, hank}),
				threeRing,
				twoCycle,
				tenRing,
				[]KeyState{held(k5, bob, w(frank, k5))}, // frank waits into the alice/bob cycle
			),
			wantCycles: []Cycle{
				pairCycle(alice, bob, k1, k2),
				threeCycle,
				tenCycle,
			},
		},
		"two cycles sharing an identity are one component, one cycle": {
			keys: []KeyState{
				held(k1, alice, w(bob, k1)),
				held(k2, bob, w(alice, k2), w(carol, k2)),
				held(k3, carol, w(bob, k3)),
			},
			wantCycles: []Cycle{pairCycle(alice, bob, k1, k2)},
		},
		"two cycles sharing an identity: the one through the smallest identity": {
			// carol's key comes first, but alice is the smallest identity of the group.
			keys:       concat(pair(carol, bob, k1, k2), pair(alice, bob, k3, k4)),
			wantCycles: []Cycle{pairCycle(alice, bob, k3, k4)},
		},
		"the cycle through the smallest identity, wherever the search enters": {
			// alice waits into the group at carol, but bob is its smallest identity.
			keys:       concat([]KeyState{held(k1, carol, w(alice, k1))}, pair(bob, dave, k2, k3), pair(carol, dave, k4, k5)),
			wantCycles: []Cycle{pairCycle(bob, dave, k2, k3)},
		},
		"a cycle waiting into another: both, in identity order": {
			keys:       concat(twoCycle, []KeyState{held(k5, carol, w(alice, k5))}, pair(carol, dave, k3, k4)),
			wantCycles: []Cycle{pairCycle(alice, bob, k1, k2), pairCycle(carol, dave, k3, k4)},
		},
		"a key listed twice is read once": {
			keys: []KeyState{
				held(k1, alice, w(bob, k1)),
				held(k1, bob, w(alice, k1)),
			},
		},
		"waiting into a cycle is not being on it": {
			keys:       chainIntoCycle,
			wantCycles: []Cycle{pairCycle(alice, bob, k1, k2)},
		},
		"re-entrant waiter waits for nobody": {
			// alice holds k1, so her second request on it is granted at once; it does not
			// wait behind carol, so carol's wait for alice is no cycle.
			keys: []KeyState{held(k1, alice, w(carol, k1), w(alice, k1), w(bob, k1))},
		},
		"re-entrant waiter does not stand in the queue": {
			// bob waits for alice as the holder of k1, not as someone queued ahead of him.
			keys: []KeyState{
				held(k1, alice, w(alice, k1), w(bob, k1)),
				held(k2, bob, w(alice, k2)),
			},
			wantCycles: []Cycle{pairCycle(alice, bob, k1, k2)},
		},
		"identity queued twice stands at its first position": {
			keys: []KeyState{free(k1,
				w(alice, k1),
				w(bob, k1),
				Waiter{Identity: alice, Request: "alice-apply", Arrival: t0.Add(time.Minute)},
			)},
		},
		"identity queued twice: its first request makes the edge": {
			keys: []KeyState{
				held(k1, hank,
					w(alice, k1),
					w(bob, k1),
					Waiter{Identity: alice, Request: "alice-apply", Arrival: t0.Add(time.Minute)},
				),
				held(k2, alice, w(hank, k2)),
			},
			wantCycles: []Cycle{pairCycle(alice, hank, k2, k1)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Build(tc.keys).FindCycles()
			if diff := cmp.Diff(tc.wantCycles, got); diff != "" {
				t.Errorf("FindCycles() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCyclesThrough(t *testing.T) {
	cases := map[string]struct {
		keys       []KeyState
		id         Identity
		wantCycles []Cycle
	}{
		"not in the graph": {
			keys: twoCycle,
			id:   carol,
		},
		"member of a two-cycle": {
			keys:       twoCycle,
			id:         bob,
			wantCycles: []Cycle{pairCycle(alice, bob, k1, k2)},
		},
		"member of a ten-cycle": {
			keys:       tenRing,
			id:         nodes(10)[7],
			wantCycles: []Cycle{tenCycle},
		},
		"member through queue-ahead edges only": {
			keys:       queueOnlyCycle,
			id:         bob,
			wantCycles: []Cycle{cycle(behind(alice, bob, k2), behind(bob, alice, k1))},
		},
		"waits into a cycle without being on it": {
			keys: chainIntoCycle,
			id:   dave,
		},
		"member of one of two cycles": {
			keys:       concat(twoCycle, threeRing),
			id:         dave,
			wantCycles: []Cycle{threeCycle},
		},
		"member whose hop runs up a queue": {
			keys:       runOnOneQueue,
			id:         alice,
			wantCycles: []Cycle{pairCycle(alice, hank, k2, k1)},
		},
		"bystander in a deadlocked queue": {
			keys: runOnOneQueue,
			id:   bob,
		},
		"bystander on one key, member through another": {
			keys:       bystanderAndMember,
			id:         bob,
			wantCycles: []Cycle{pairCycle(bob, erin, k3, k4)},
		},
		"long chain": {
			keys: chain(nodes(1000)),
			id:   nodes(1000)[999],
		},
		"re-entrant waiter": {
			keys: []KeyState{held(k1, alice, w(carol, k1), w(alice, k1))},
			id:   alice,
		},
		"identity queued twice": {
			keys: []KeyState{free(k1, w(alice, k1), w(bob, k1), w(alice, k1))},
			id:   alice,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Build(tc.keys).CyclesThrough(tc.id)
			if diff := cmp.Diff(tc.wantCycles, got); diff != "" {
				t.Errorf("CyclesThrough(%s) (-want +got):\n%s", tc.id, diff)
			}
		})
	}
}

func TestCycleString(t *testing.T) {
	cases := map[string]struct {
		cycle Cycle
		want  string
	}{
		"two-cycle": {
			cycle: Build(pair(alice, bob, "acme/infra/k1/default", "acme/infra/k2/default")).FindCycles()[0],
			want:  "deadlock: alice#1 waits for bob#2 on acme/infra/k2/default; bob#2 waits for alice#1 on acme/infra/k1/default",
		},
		"queue-ahead hop and an identity without a pull": {
			cycle: cycle(
				behind(Identity{Owner: "ci/deploy"}, carol, "acme/infra/k3/default"),
				holds(carol, Identity{Owner: "ci/deploy"}, "acme/infra/modules/vpc/prod"),
			),
			want: "deadlock: ci/deploy waits for carol#3 on acme/infra/k3/default; carol#3 waits for ci/deploy on acme/infra/modules/vpc/prod",
		},
		"empty": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.cycle.String()); diff != "" {
				t.Errorf("String() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIdentityString(t *testing.T) {
	cases := map[string]struct {
		id   Identity
		want string
	}{
		"with pull":    {id: Identity{Owner: "alice", Pull: 1}, want: "alice#1"},
		"without pull": {id: Identity{Owner: "ci/deploy"}, want: "ci/deploy"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.id.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}

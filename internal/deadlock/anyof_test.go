package deadlock

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// full is k held Shared by holders with every shared place taken, and queue waiting.
func full(k string, holders []Identity, queue ...Waiter) KeyState {
	ks := sharedHeld(k, holders, queue...)
	ks.Full = true
	return ks
}

// anyOf is the hop "from waits for any of to and others on k", others each blocked by their
// wait on the key given.
func anyOf(from, to Identity, k string, others ...Blocked) Edge {
	return Edge{From: from, To: to, Key: k, Holds: true, Waiter: sw(from, k), AnyOf: others}
}

func blockedOn(id Identity, k string) Blocked { return Blocked{Identity: id, Key: k, Waiter: w(id, k)} }

// TestAnyOf: a shared waiter on a full key is let in by any one holder leaving, so it is
// blocked only while every other holder identity is blocked too.
func TestAnyOf(t *testing.T) {
	cases := map[string]struct {
		keys []KeyState
		want []Cycle
	}{
		"another holder of the full key can leave: no deadlock": {
			// alice and carol fill k1; bob waits to read it and holds k2, which alice waits
			// for. carol waits for nothing: she leaves, bob reads k1, and alice gets k2.
			keys: []KeyState{
				full(k1, []Identity{alice, carol}, sw(bob, k1)),
				held(k2, bob, w(alice, k2)),
			},
		},
		"every other holder is blocked: a deadlock, named with all of them": {
			// carol waits for k3, which bob holds too: nobody of k1 can leave.
			keys: []KeyState{
				full(k1, []Identity{alice, carol}, sw(bob, k1)),
				held(k2, bob, w(alice, k2)),
				held(k3, bob, w(carol, k3)),
			},
			want: []Cycle{cycle(holds(alice, bob, k2), anyOf(bob, alice, k1, blockedOn(carol, k3)))},
		},
		"the other holder waits for someone who can go on: no deadlock": {
			// carol waits for k3, held by dave, who waits for nothing.
			keys: []KeyState{
				full(k1, []Identity{alice, carol}, sw(bob, k1)),
				held(k2, bob, w(alice, k2)),
				held(k3, dave, w(carol, k3)),
			},
		},
		"the other holder is in a deadlock of its own: both are found": {
			keys: []KeyState{
				full(k1, []Identity{alice, carol}, sw(bob, k1)),
				held(k2, bob, w(alice, k2)),
				held(k3, dave, w(carol, k3)),
				held(k4, carol, w(dave, k4)),
			},
			want: []Cycle{
				cycle(holds(alice, bob, k2), anyOf(bob, alice, k1, blockedOn(carol, k3))),
				pairCycle(carol, dave, k4, k3),
			},
		},
		"a chain of full keys: the last holder that can leave lets everyone in": {
			// bob waits on full k1 (alice, carol), carol waits on full k3 (bob, erin), erin is
			// free: erin leaves, carol reads k3, ... nobody is deadlocked.
			keys: []KeyState{
				full(k1, []Identity{alice, carol}, sw(bob, k1)),
				held(k2, bob, w(alice, k2)),
				full(k3, []Identity{bob, erin}, sw(carol, k3)),
			},
		},
		"the same chain with erin blocked by alice": {
			keys: []KeyState{
				full(k1, []Identity{alice, carol}, sw(bob, k1)),
				held(k2, bob, w(alice, k2)),
				full(k3, []Identity{bob, erin}, sw(carol, k3)),
				held(k4, alice, w(erin, k4)),
			},
			want: []Cycle{cycle(holds(alice, bob, k2), anyOf(bob, alice, k1, Blocked{Identity: carol, Key: k3, Waiter: sw(carol, k3)}))},
		},
		"a full key with room for a writer's turn: the exclusive waiter still waits for all": {
			// An exclusive waiter needs every holder gone: carol free does not help it while
			// alice waits for bob.
			keys: []KeyState{
				full(k1, []Identity{alice, carol}, w(bob, k1)),
				held(k2, bob, w(alice, k2)),
			},
			want: []Cycle{cycle(holds(alice, bob, k2), holds(bob, alice, k1))},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := Build(tc.keys)
			got := g.FindCycles()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("cycles (-want +got):\n%s", diff)
			}
			// The on-wait check agrees: bob's new wait closes a cycle exactly when one is found
			// through him.
			through := g.CyclesThrough(bob)
			wantThrough := slices.ContainsFunc(tc.want, func(c Cycle) bool {
				return slices.ContainsFunc(c.Edges, func(e Edge) bool { return e.From == bob })
			})
			if (through != nil) != wantThrough {
				t.Errorf("CyclesThrough(bob) = %v, want a cycle: %v", through, wantThrough)
			}
			// The victim is one of the cycle's hops, so failing it removes a hop.
			for _, c := range got {
				v := PolicyNewest.Victim(c)
				if !slices.ContainsFunc(c.Edges, func(e Edge) bool { return e.Waiter == v.Waiter }) {
					t.Errorf("victim %v is not a hop of %v", v, c)
				}
			}
		})
	}
}

func TestAnyOfString(t *testing.T) {
	c := cycle(holds(alice, bob, k2), anyOf(bob, alice, k1, blockedOn(carol, k3)))
	want := "deadlock: alice#1 waits for bob#2 on " + k2 + "; bob#2 waits for any of alice#1, carol#3 on " + k1 +
		" (carol#3 waits on " + k3 + ")"
	if got := c.String(); got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
}

// need is one wait of the oracle's: met by all of its targets going on, or (any) by one.
type need struct {
	key     string
	any     bool
	targets []Identity
}

// stuckFull is the oracle: from the definition, every waiter's waits on the full graph (an
// exclusive waiter waits for everyone ahead of it and every holder; a shared one for the
// exclusive waiters ahead of it, an exclusive holder, and, on a full key, any one shared holder),
// reduced naively until nothing more goes on. It returns who is stuck.
func stuckFull(keys []KeyState) map[Identity]bool {
	needs := map[Identity][]need{}
	all := map[Identity]bool{}
	for _, ks := range keys {
		holders := ks.holders()
		for _, h := range holders {
			all[h] = true
		}
		var ahead, writers []Identity
		for _, wt := range ks.Queue {
			id := wt.Identity
			all[id] = true
			if len(holders) == 1 && holders[0] == id || slices.Contains(ahead, id) {
				continue
			}
			others := slices.DeleteFunc(slices.Clone(holders), func(h Identity) bool { return h == id })
			if !wt.Shared {
				needs[id] = append(needs[id], need{key: ks.Key, targets: append(slices.Clone(ahead), others...)})
			} else {
				needs[id] = append(needs[id], need{key: ks.Key, targets: slices.Clone(writers)})
				if ks.Holder != nil && *ks.Holder != id {
					needs[id] = append(needs[id], need{key: ks.Key, targets: []Identity{*ks.Holder}})
				}
				if ks.Full && len(others) > 0 {
					needs[id] = append(needs[id], need{key: ks.Key, any: true, targets: others})
				}
			}
			ahead = append(ahead, id)
			if !wt.Shared {
				writers = append(writers, id)
			}
		}
	}
	goesOn := map[Identity]bool{}
	for changed := true; changed; {
		changed = false
		for id := range all {
			if goesOn[id] {
				continue
			}
			ok := true
			for _, n := range needs[id] {
				met := !n.any
				for _, t := range n.targets {
					if n.any && goesOn[t] {
						met = true
					}
					if !n.any && !goesOn[t] {
						met = false
					}
				}
				ok = ok && met
			}
			if ok {
				goesOn[id], changed = true, true
			}
		}
	}
	stuck := map[Identity]bool{}
	for id := range all {
		if !goesOn[id] {
			stuck[id] = true
		}
	}
	return stuck
}

// TestAnyOfAgainstOracle: on random snapshots with shared and full keys, every identity a
// reported cycle names (its hops' ends, an any-of hop's others) is stuck by the oracle's
// definition: the detector never reports a deadlock that is not one. And on snapshots where
// every wait is at the head of its queue (so the graph's waits are the oracle's), it reports
// a deadlock exactly when the oracle finds someone stuck.
func TestAnyOfAgainstOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 10))
	ids := []Identity{alice, bob, carol, dave, erin}
	reported, exact := 0, 0
	for i := range 20000 {
		keys := make([]KeyState, 1+r.IntN(5))
		heads := true
		for j := range keys {
			k := &keys[j]
			k.Key = key(j)
			switch r.IntN(3) {
			case 0:
				k.Holder = &ids[r.IntN(len(ids))]
			case 1:
				for _, id := range ids {
					if r.IntN(2) == 0 {
						k.Shared = append(k.Shared, id)
					}
				}
				k.Full = len(k.Shared) > 0 && r.IntN(2) == 0
			}
			for q := range r.IntN(3) {
				id := ids[r.IntN(len(ids))]
				k.Queue = append(k.Queue, Waiter{Identity: id, Request: fmt.Sprintf("%s-%d-%d", id.Owner, j, q), Shared: r.IntN(2) == 0})
			}
			heads = heads && len(k.Queue) <= 1
		}
		stuck := stuckFull(keys)
		cycles := Build(keys).FindCycles()
		for _, c := range cycles {
			reported++
			for _, e := range c.Edges {
				for _, id := range append([]Identity{e.From, e.To}, func() (o []Identity) {
					for _, b := range e.AnyOf {
						o = append(o, b.Identity)
					}
					return o
				}()...) {
					if !stuck[id] {
						t.Fatalf("snapshot %d: %v names %s, who can go on\nkeys: %+v", i, c, id, keys)
					}
				}
			}
		}
		if heads {
			exact++
			if (len(cycles) > 0) != (len(stuck) > 0) {
				t.Fatalf("snapshot %d: cycles %v, stuck %v\nkeys: %+v", i, cycles, stuck, keys)
			}
		}
	}
	if reported < 1000 || exact < 1000 {
		t.Errorf("only %d cycles reported, %d exact snapshots: the generator misses the cases", reported, exact)
	}
}

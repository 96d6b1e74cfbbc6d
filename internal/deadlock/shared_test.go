package deadlock

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sw is id's Shared request on k.
func sw(id Identity, k string) Waiter {
	x := w(id, k)
	x.Shared = true
	return x
}

func sharedHeld(k string, holders []Identity, queue ...Waiter) KeyState {
	return KeyState{Key: k, Shared: holders, Queue: queue}
}

// TestSharedHolders: a waiter waits for every holder of the key, so a cycle through a shared
// holder is found and named; shared waiters wait for no shared holder, only for an exclusive
// holder or the exclusive waiter ahead of them (writer preference).
func TestSharedHolders(t *testing.T) {
	cases := map[string]struct {
		keys []KeyState
		want []Cycle
	}{
		"a writer waits for every reader; one of them waits for the writer's key": {
			// alice and bob read k1; carol (exclusive) waits for k1 and holds k2, which bob
			// waits for: carol -> bob -> carol.
			keys: []KeyState{
				sharedHeld(k1, []Identity{alice, bob}, w(carol, k1)),
				held(k2, carol, w(bob, k2)),
			},
			want: []Cycle{cycle(holds(bob, carol, k2), holds(carol, bob, k1))},
		},
		"the reader that does not wait breaks nothing": {
			keys: []KeyState{
				sharedHeld(k1, []Identity{alice, bob}, w(carol, k1)),
				held(k2, carol),
			},
		},
		"a reader waits for no other reader": {
			// alice reads k1 and waits for k2 (shared, behind nobody exclusive): no edge from
			// bob's shared wait on k1 to alice, and none from alice's to bob.
			keys: []KeyState{
				sharedHeld(k1, []Identity{alice}, sw(bob, k1)),
				sharedHeld(k2, []Identity{bob}, sw(alice, k2)),
			},
		},
		"a reader waits for the readers of a full key (MaxSharedHolders)": {
			// alice's requests fill k1's shared places and she waits for k2, which bob holds;
			// bob waits to read k1, for one of alice's to leave: bob -> alice -> bob.
			keys: []KeyState{
				func() KeyState { ks := sharedHeld(k1, []Identity{alice}, sw(bob, k1)); ks.Full = true; return ks }(),
				held(k2, bob, w(alice, k2)),
			},
			want: []Cycle{cycle(holds(alice, bob, k2), Edge{From: bob, To: alice, Key: k1, Holds: true, Waiter: sw(bob, k1)})},
		},
		"a reader behind a writer waits for the writer (writer preference)": {
			// alice reads k1 and waits for k2, which bob holds; bob waits to read k1 behind
			// carol's exclusive wait, and carol waits for alice: bob waits for alice through
			// carol (the cycle names the hop on k1 as bob's).
			keys: []KeyState{
				sharedHeld(k1, []Identity{alice}, w(carol, k1), sw(bob, k1)),
				held(k2, bob, w(alice, k2)),
			},
			want: []Cycle{cycle(holds(alice, bob, k2), Edge{From: bob, To: alice, Key: k1, Holds: true, Waiter: sw(bob, k1)})},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Build(tc.keys).FindCycles()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("cycles (-want +got):\n%s", diff)
			}
		})
	}
}

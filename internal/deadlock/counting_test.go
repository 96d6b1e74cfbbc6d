package deadlock

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// kw is id's Shared request on k that a counting bound (maxHolders) keeps out: the key's holders
// are already as many as the bound allows.
func kw(id Identity, k string) Waiter {
	x := sw(id, k)
	x.KeptOut = true
	return x
}

// TestCountingWaits: a waiter a counting bound keeps out waits for any one holder of the key to
// leave (as on a full shared key), and the shared waiters behind it wait for it, since the grant
// order keeps FIFO at the bound.
func TestCountingWaits(t *testing.T) {
	cases := map[string]struct {
		keys []KeyState
		want []Cycle
	}{
		"another holder of the counting key can leave: no deadlock": {
			// alice and carol hold k1 at its bound of 2; bob waits for a place and holds k2,
			// which alice waits for. carol waits for nothing: she leaves, bob gets her place.
			keys: []KeyState{
				sharedHeld(k1, []Identity{alice, carol}, kw(bob, k1)),
				held(k2, bob, w(alice, k2)),
			},
		},
		"every other holder is blocked: a deadlock, named with all of them": {
			keys: []KeyState{
				sharedHeld(k1, []Identity{alice, carol}, kw(bob, k1)),
				held(k2, bob, w(alice, k2)),
				held(k3, bob, w(carol, k3)),
			},
			want: []Cycle{cycle(holds(alice, bob, k2),
				Edge{From: bob, To: alice, Key: k1, Holds: true, Waiter: kw(bob, k1), AnyOf: []Blocked{blockedOn(carol, k3)}})},
		},
		"a bound with room keeps nobody out: a shared waiter waits for no shared holder": {
			keys: []KeyState{
				sharedHeld(k1, []Identity{alice, carol}, sw(bob, k1)),
				held(k2, bob, w(alice, k2)),
				held(k3, bob, w(carol, k3)),
			},
		},
		"FIFO at the bound: a shared waiter behind one kept out waits for it": {
			// alice holds k1 at bob's bound of 1, so bob waits; dave (no bound) would fit,
			// but waits behind bob. dave holds k2, which alice waits for: alice -> dave ->
			// bob -> alice, reported with its hops on k1 as one (consecutive edges are on
			// different keys): dave waits on k1 for alice.
			keys: []KeyState{
				sharedHeld(k1, []Identity{alice}, kw(bob, k1), sw(dave, k1)),
				held(k2, dave, w(alice, k2)),
			},
			want: []Cycle{cycle(holds(alice, dave, k2),
				Edge{From: dave, To: alice, Key: k1, Holds: true, Waiter: sw(dave, k1)})},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := Build(tc.keys)
			if diff := cmp.Diff(tc.want, g.FindCycles()); diff != "" {
				t.Errorf("cycles (-want +got):\n%s", diff)
			}
			if got := g.CyclesThrough(alice); (got != nil) != (tc.want != nil) {
				t.Errorf("CyclesThrough(alice) = %v, want a cycle: %v", got, tc.want != nil)
			}
		})
	}
}

package deadlock

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestVictim(t *testing.T) {
	// waiting builds the hop whose victim would be the request req.
	waiting := func(from Identity, k, req string, priority, minute int) Edge {
		return Edge{From: from, To: hank, Key: k, Holds: true, Waiter: Waiter{
			Identity: from, Request: req, Priority: priority, Arrival: t0.Add(time.Duration(minute) * time.Minute),
		}}
	}
	var (
		oldLow     = waiting(alice, k1, "old-low", 0, 1)
		midHigh    = waiting(bob, k2, "mid-high", 2, 5)
		newNormal  = waiting(carol, k3, "new-normal", 1, 9)
		newLow     = waiting(dave, k4, "x-new-low", 0, 9) // sorts after old-low: only arrival picks it
		sameTimeA  = waiting(erin, k5, "a-req", 1, 3)
		sameTimeB  = waiting(frank, k6, "b-req", 1, 3)
		sameNameK1 = waiting(bob, k1, "same", 1, 3) // bob after alice: only the key picks it
		sameNameK2 = waiting(alice, k2, "same", 1, 3)
	)
	cases := map[string]struct {
		policy     Policy
		cycle      Cycle
		wantVictim Edge
	}{
		"newest: latest arrival": {
			policy:     PolicyNewest,
			cycle:      cycle(oldLow, newNormal, midHigh),
			wantVictim: newNormal,
		},
		"oldest: earliest arrival": {
			policy:     PolicyOldest,
			cycle:      cycle(midHigh, newNormal, oldLow),
			wantVictim: oldLow,
		},
		"lowest-priority: lowest priority, though older": {
			policy:     PolicyLowestPriority,
			cycle:      cycle(midHigh, newNormal, oldLow),
			wantVictim: oldLow,
		},
		"lowest-priority: among equals, the newest": {
			policy:     PolicyLowestPriority,
			cycle:      cycle(oldLow, newNormal, newLow, midHigh),
			wantVictim: newLow,
		},
		"newest: same arrival goes to the smaller request name": {
			policy:     PolicyNewest,
			cycle:      cycle(oldLow, sameTimeB, sameTimeA),
			wantVictim: sameTimeA,
		},
		"oldest: same arrival goes to the smaller request name": {
			policy:     PolicyOldest,
			cycle:      cycle(sameTimeB, midHigh, sameTimeA),
			wantVictim: sameTimeA,
		},
		"lowest-priority: same priority and arrival goes to the smaller request name": {
			policy:     PolicyLowestPriority,
			cycle:      cycle(sameTimeB, sameTimeA, midHigh),
			wantVictim: sameTimeA,
		},
		"same request name on two keys goes to the smaller key": {
			policy:     PolicyNewest,
			cycle:      cycle(sameNameK2, sameNameK1),
			wantVictim: sameNameK1,
		},
		"no policy acts as newest": {
			cycle:      cycle(newNormal, oldLow),
			wantVictim: newNormal,
		},
		"empty cycle": {
			policy: PolicyNewest,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.wantVictim, tc.policy.Victim(tc.cycle)); diff != "" {
				t.Errorf("Victim() (-want +got):\n%s", diff)
			}
		})
	}
}

// The victim of a cycle found in a snapshot is the request that made its hop, on its key.
func TestVictimOfFoundCycle(t *testing.T) {
	late := Waiter{Identity: bob, Request: "bob-apply", Priority: 1, Arrival: t0.Add(time.Hour)}
	g := Build([]KeyState{
		held(k1, alice, late),
		held(k2, bob, w(alice, k2)),
	})
	cycles := g.FindCycles()
	if len(cycles) != 1 {
		t.Fatalf("FindCycles() = %v, want one cycle", cycles)
	}
	got := PolicyNewest.Victim(cycles[0])
	want := Edge{From: bob, To: alice, Key: k1, Holds: true, Waiter: late}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Victim() (-want +got):\n%s", diff)
	}
}

func TestParsePolicy(t *testing.T) {
	cases := map[string]struct {
		in         string
		wantPolicy Policy
		wantErr    string
	}{
		"empty is newest":   {in: "", wantPolicy: PolicyNewest},
		"newest":            {in: "newest", wantPolicy: PolicyNewest},
		"oldest":            {in: "oldest", wantPolicy: PolicyOldest},
		"lowest-priority":   {in: "lowest-priority", wantPolicy: PolicyLowestPriority},
		"unknown":           {in: "youngest", wantErr: `unknown deadlock victim policy "youngest": want one of newest, oldest, lowest-priority`},
		"wrong case":        {in: "Newest", wantErr: `unknown deadlock victim policy "Newest": want one of newest, oldest, lowest-priority`},
		"underscore":        {in: "lowest_priority", wantErr: `unknown deadlock victim policy "lowest_priority": want one of newest, oldest, lowest-priority`},
		"surrounding space": {in: " oldest", wantErr: `unknown deadlock victim policy " oldest": want one of newest, oldest, lowest-priority`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParsePolicy(tc.in)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if diff := cmp.Diff(tc.wantErr, gotErr); diff != "" {
				t.Errorf("ParsePolicy(%q) error (-want +got):\n%s", tc.in, diff)
			}
			if diff := cmp.Diff(tc.wantPolicy, got); diff != "" {
				t.Errorf("ParsePolicy(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

package deadlock

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

const (
	benchKeyCount   = 1000
	benchQueueLen   = 10 // 10,000 waiting requests in all
	benchIdentities = 3000
)

// benchKeys is a seeded random snapshot of 1,000 keys with 10,000 waiting requests. Without a
// cycle it is acyclic by construction: identities are ranked, everyone waiting on a key ranks
// above its holder and queues lowest rank first, so every edge points to a lower rank. With a
// cycle, two fresh identities take over two keys and each queues on the other's key, closing one
// cycle through both queues. probe is the identity CyclesThrough starts from: the highest-ranked
// waiter (who reaches the most) without a cycle, one of the fresh pair with one.
func benchKeys(withCycle bool) (keys []KeyState, probe Identity) {
	r := rand.New(rand.NewPCG(7, 11))
	ids := make([]Identity, benchIdentities)
	for i := range ids {
		ids[i] = Identity{Owner: fmt.Sprintf("owner-%04d", i), Pull: int64(i + 1)}
	}
	top := 0
	keys = make([]KeyState, benchKeyCount)
	for k := range keys {
		holder := r.IntN(benchIdentities * 2 / 3)
		ranks := make([]int, benchQueueLen)
		for i := range ranks {
			ranks[i] = holder + 1 + r.IntN(benchIdentities-holder-1)
		}
		slices.Sort(ranks)
		top = max(top, ranks[len(ranks)-1])
		keys[k] = KeyState{Key: fmt.Sprintf("acme/infra/k%d/default", k), Holder: &ids[holder]}
		for i, rank := range ranks {
			keys[k].Queue = append(keys[k].Queue, Waiter{
				Identity: ids[rank],
				Request:  fmt.Sprintf("req-%d-%d", k, i),
				Priority: r.IntN(4),
				Arrival:  t0.Add(time.Duration(r.IntN(3600)) * time.Second),
			})
		}
	}
	if !withCycle {
		return keys, ids[top]
	}
	p, q := Identity{Owner: "cycle-p", Pull: 1}, Identity{Owner: "cycle-q", Pull: 2}
	keys[0].Holder, keys[1].Holder = &p, &q
	keys[0].Queue = append(keys[0].Queue, Waiter{Identity: q, Request: "q-waits", Arrival: t0})
	keys[1].Queue = append(keys[1].Queue, Waiter{Identity: p, Request: "p-waits", Arrival: t0})
	return keys, q
}

var benchCases = []struct {
	name       string
	withCycle  bool
	wantCycles int
}{
	{name: "no-cycle", wantCycles: 0},
	{name: "one-cycle", withCycle: true, wantCycles: 1},
}

func BenchmarkBuild(b *testing.B) {
	for _, bc := range benchCases {
		b.Run(bc.name, func(b *testing.B) {
			keys, _ := benchKeys(bc.withCycle)
			for b.Loop() {
				Build(keys)
			}
		})
	}
}

func BenchmarkFindCycles(b *testing.B) {
	for _, bc := range benchCases {
		b.Run(bc.name, func(b *testing.B) {
			keys, _ := benchKeys(bc.withCycle)
			g := Build(keys)
			if got := len(g.FindCycles()); got != bc.wantCycles {
				b.Fatalf("FindCycles() found %d cycles, want %d", got, bc.wantCycles)
			}
			for b.Loop() {
				g.FindCycles()
			}
		})
	}
}

func BenchmarkCyclesThrough(b *testing.B) {
	for _, bc := range benchCases {
		b.Run(bc.name, func(b *testing.B) {
			keys, probe := benchKeys(bc.withCycle)
			g := Build(keys)
			if got := len(g.CyclesThrough(probe)); got != bc.wantCycles {
				b.Fatalf("CyclesThrough(%s) found %d cycles, want %d", probe, got, bc.wantCycles)
			}
			for b.Loop() {
				g.CyclesThrough(probe)
			}
		})
	}
}

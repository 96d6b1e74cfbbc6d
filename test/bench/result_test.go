package bench

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestSignTest(t *testing.T) {
	for _, tc := range []struct {
		k, n int
		want float64
	}{
		{k: 0, n: 0, want: 1},
		{k: 5, n: 10, want: 1},                   // an even split is no evidence either way
		{k: 0, n: 5, want: 2.0 / 32},             // 2 × (1/2)^5
		{k: 5, n: 5, want: 2.0 / 32},             // symmetric
		{k: 2, n: 10, want: 2 * 56.0 / 1024},     // 2 × (1 + 10 + 45) / 2^10
		{k: 9, n: 10, want: 2 * 11.0 / 1024},     // as far from 5 as 1 is
		{k: 10, n: 15, want: 2 * 4944.0 / 32768}, // 2 × Σ_{i≤5} C(15,i) / 2^15
	} {
		if got := signTest(tc.k, tc.n); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("signTest(%d, %d) = %v, want %v", tc.k, tc.n, got, tc.want)
		}
	}
}

// TestPoolReplicas: pooling two runs gives the goals of their rounds together, paired within
// each run, and refuses runs that do not compare the same modes.
func TestPoolReplicas(t *testing.T) {
	run := func(one, aa []float64) Result {
		mode := func(name string, managers int, g1s []float64) ReplicaMode {
			m := ReplicaMode{Mode: name, Managers: managers}
			for _, g := range g1s {
				m.Rounds = append(m.Rounds, ReplicaRound{G1: g, HandoffsPerSec: 10, HandoffP50Ms: 20, HandoffP99Ms: 40, G2b: 2, WritesPerHandoff: 5, CPUPerHandoffMs: 10, G3a: 1, G3b: 1, G4: 1})
			}
			m.summarize()
			return m
		}
		return Result{Replicas: &ReplicasResult{Replicas: 2, Rounds: len(one), Modes: []ReplicaMode{
			mode(modeOne, 1, one), mode(modeAlone, 1, one), mode(modeLeaderElection, 2, one), mode(modeActiveActive, 2, aa),
		}}}
	}
	// Run 1: active-active is worse in both rounds; run 2: better in one of two.
	got, err := PoolReplicas([]Result{run([]float64{1, 1}, []float64{0.8, 0.9}), run([]float64{2, 2}, []float64{2.2, 1.8})})
	if err != nil {
		t.Fatal(err)
	}
	if got.Replicas.Rounds != 4 || len(got.Replicas.Modes[3].Rounds) != 4 {
		t.Fatalf("pooled %d rounds, %d of active-active; want 4", got.Replicas.Rounds, len(got.Replicas.Modes[3].Rounds))
	}
	var s1 Goal
	for _, g := range got.Goals {
		if g.ID == "S1" {
			s1 = g
		}
	}
	// Per-round ratios 0.8, 0.9, 1.1, 0.9: median 0.9, one round no worse.
	want := Goal{ID: "S1", Value: 0.9, Op: ">=", Target: 0.95, Low: 0.8, High: 1.1, AtLeastAsGood: 1, Rounds: 4, SignP: 2 * 5.0 / 16}
	if diff := cmp.Diff(want, s1, cmpopts.IgnoreFields(Goal{}, "What"), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("S1 of the pooled runs (-want +got):\n%s", diff)
	}

	short := run([]float64{1}, []float64{1})
	short.Replicas.Modes = short.Replicas.Modes[:3]
	if _, err := PoolReplicas([]Result{run([]float64{1}, []float64{1}), short}); err == nil {
		t.Error("pooled a run without the active-active mode")
	}
	if _, err := PoolReplicas([]Result{{}}); err == nil {
		t.Error("pooled a run without a replicas phase")
	}
}

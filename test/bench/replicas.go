package bench

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The ways to run the manager that the replicas phase compares. modeAlone is one manager in
// active-active mode with no peer: the mode's own cost, apart from a second process's.
const (
	modeOne            = "one manager"
	modeAlone          = "active-active, alone"
	modeLeaderElection = "leader election"
	modeActiveActive   = "active-active"
)

// ReplicasConfig sizes the replicas phase: steady-state cost of running several managers.
type ReplicasConfig struct {
	// Replicas is how many managers the leader-election and active-active modes run.
	Replicas int `json:"replicas"`
	// Rounds: each round measures every mode in turn, so a change in the machine's load
	// reaches all of them alike; each figure is the median over the rounds.
	Rounds int `json:"rounds"`
}

// ReplicasResult compares, in one run and round by round, one manager alone, one manager in
// active-active mode alone, Replicas managers with leader election (one active, the others
// standing by with warm caches: the Deployment before active-active) and Replicas managers
// active-active.
type ReplicasResult struct {
	Replicas int           `json:"replicas"`
	Rounds   int           `json:"rounds"`
	Modes    []ReplicaMode `json:"modes"`
}

// ReplicaMode is one mode's figures: medians over the rounds.
type ReplicaMode struct {
	Mode     string `json:"mode"`
	Managers int    `json:"managers"`
	// G1 is grant throughput ÷ the raw parallel GET+UpdateStatus rate measured just before it
	// (the same clients and duration), as G1 of the steady phases.
	G1 float64 `json:"g1"`
	// HandoffP50Ms and HandoffP99Ms are hand-offs at depth 10, each arrival queued before the
	// next release; G2b is the p99 ÷ the round's write→watch probe p99.
	HandoffP50Ms float64 `json:"handoffP50Ms"`
	HandoffP99Ms float64 `json:"handoffP99Ms"`
	G2b          float64 `json:"g2b"`
	// HandoffsPerSec, WritesPerHandoff and ConflictsPerHandoff are from the back-to-back
	// hand-offs; ReconcilesPerHandoff and CPUPerHandoffMs count every manager of the mode.
	HandoffsPerSec       float64 `json:"handoffsPerSec"`
	WritesPerHandoff     float64 `json:"writesPerHandoff"`
	ConflictsPerHandoff  float64 `json:"conflictsPerHandoff"`
	ReconcilesPerHandoff float64 `json:"reconcilesPerHandoff"`
	CPUPerHandoffMs      float64 `json:"cpuPerHandoffMs"`

	rounds []replicaRound
}

// replicaRound is one round's figures of a mode.
type replicaRound struct {
	g1, p50, p99, g2b, rate, writes, conflicts, reconciles, cpu float64
}

func (m *ReplicaMode) summarize() {
	med := func(f func(replicaRound) float64) float64 {
		xs := make([]float64, len(m.rounds))
		for i, r := range m.rounds {
			xs[i] = f(r)
		}
		return median(xs)
	}
	m.G1 = med(func(r replicaRound) float64 { return r.g1 })
	m.HandoffP50Ms = med(func(r replicaRound) float64 { return r.p50 })
	m.HandoffP99Ms = med(func(r replicaRound) float64 { return r.p99 })
	m.G2b = med(func(r replicaRound) float64 { return r.g2b })
	m.HandoffsPerSec = med(func(r replicaRound) float64 { return r.rate })
	m.WritesPerHandoff = med(func(r replicaRound) float64 { return r.writes })
	m.ConflictsPerHandoff = med(func(r replicaRound) float64 { return r.conflicts })
	m.ReconcilesPerHandoff = med(func(r replicaRound) float64 { return r.reconciles })
	m.CPUPerHandoffMs = med(func(r replicaRound) float64 { return r.cpu })
}

// topology is how many managers run and how: what launch and startManager read.
type topology struct {
	replicas     int
	leaderElect  bool
	activeActive bool // each replica with --active-active (replicas > 1 and no leader election, or alone)
}

func (b *bench) replicasPhase(ctx context.Context) (ReplicasResult, error) {
	rc := b.cfg.ReplicasPhase
	res := ReplicasResult{Replicas: rc.Replicas, Rounds: rc.Rounds}
	if err := b.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: membersNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return res, fmt.Errorf("create namespace: %w", err)
	}
	modes := []struct {
		name string
		topo topology
	}{
		{modeOne, topology{replicas: 1}},
		{modeAlone, topology{replicas: 1, activeActive: true}},
		{modeLeaderElection, topology{replicas: rc.Replicas, leaderElect: true}},
		{modeActiveActive, topology{replicas: rc.Replicas, activeActive: true}},
	}
	saved := b.topo
	defer func() { b.topo, b.profileTag = saved, "" }()

	b.step("replicas: the raw baseline's objects and the write→watch probe")
	raw, rawObjs, err := b.raw(ctx)
	if err != nil {
		return res, fmt.Errorf("raw baseline: %w", err)
	}
	out := make([]ReplicaMode, len(modes))
	for round := range rc.Rounds {
		for i, m := range modes {
			b.step(fmt.Sprintf("replicas, round %d of %d: %s (%d managers)", round+1, rc.Rounds, m.name, m.topo.replicas))
			b.topo, b.profileTag = m.topo, "-"+strings.ReplaceAll(strings.ReplaceAll(m.name, ",", ""), " ", "-")
			r, err := b.replicaRound(ctx, rawObjs, raw.Probe)
			if err != nil {
				return res, fmt.Errorf("%s: %w", m.name, err)
			}
			out[i].Mode, out[i].Managers = m.name, m.topo.replicas
			out[i].rounds = append(out[i].rounds, r)
		}
	}
	for i := range out {
		out[i].summarize()
	}
	res.Modes = out
	return res, nil
}

// replicaRound starts the mode's managers, measures G1's two sides and hand-offs at depth 10,
// and stops them.
func (b *bench) replicaRound(ctx context.Context, rawObjs *rawObjects, probe Latency) (replicaRound, error) {
	var r replicaRound
	if err := b.startManager(ctx, true); err != nil {
		return r, err
	}
	dur := b.cfg.ThroughputDuration.D()
	rawRate, err := rawObjs.run(ctx, b.cfg.Workers, dur)
	if err != nil {
		return r, fmt.Errorf("raw baseline: %w", err)
	}
	tp, err := b.grantThroughput(ctx, "rtput", dur)
	if err != nil {
		return r, err
	}
	h, _, err := b.handoffDepth(ctx, 10)
	if err != nil {
		return r, err
	}
	if err := b.stopManager(); err != nil {
		return r, err
	}
	n := float64(b.cfg.HandoffSamples)
	all := h.BackToBack
	r = replicaRound{
		g1:         ratio(tp.GrantsPerSec, rawRate),
		p50:        h.Latency.P50,
		p99:        h.Latency.P99,
		g2b:        ratio(h.Latency.P99, probe.P99),
		rate:       h.HandoffsPerSec,
		writes:     h.WritesPerHandoff,
		conflicts:  h.ConflictsPerHandoff,
		reconciles: (all.Reconciles + all.PeerReconciles) / n,
		cpu:        (all.ManagerCPU + all.PeerCPU) * 1000 / n,
	}
	return r, nil
}

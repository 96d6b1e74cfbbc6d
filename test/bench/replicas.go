package bench

import (
	"context"
	"fmt"
	"reflect"
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

// ReplicaMode is one mode's figures: each is the median of its rounds' (JSON keeps them at the
// top level, beside the rounds).
type ReplicaMode struct {
	Mode     string `json:"mode"`
	Managers int    `json:"managers"`
	ReplicaRound
	// Rounds are the figures of each round, in order: a later run's can be pooled with these.
	Rounds []ReplicaRound `json:"rounds"`
}

// ReplicaRound is one round's figures of a mode. Every field is a float64: summarize takes the
// median of each.
type ReplicaRound struct {
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
	// RequestsPerHandoff and GetsPerHandoff are the API requests every manager of the mode
	// sent per hand-off, all and GETs, as its client counts them (membership renewals too).
	RequestsPerHandoff float64 `json:"requestsPerHandoff"`
	GetsPerHandoff     float64 `json:"getsPerHandoff"`
	// G3a, G3b and G4 are the steady phases' goals, each from hand-offs back to back on the
	// deep queue (the last of HandoffDepths, kept over the rounds): G3a its writes per hand-off
	// ÷ depth 10's, G3b its hand-offs/s ÷ depth 10's, G4 its hand-offs/s with deadlock
	// detection on ÷ off. DeepHandoffsPerSec and DeepCPUPerHandoffMs are from the run with
	// detection on.
	G3a                 float64 `json:"g3a"`
	G3b                 float64 `json:"g3b"`
	G4                  float64 `json:"g4"`
	DeepHandoffsPerSec  float64 `json:"deepHandoffsPerSec"`
	DeepCPUPerHandoffMs float64 `json:"deepCPUPerHandoffMs"`
}

// summarize sets each of the mode's figures to the median of its rounds'.
func (m *ReplicaMode) summarize() {
	med := reflect.ValueOf(&m.ReplicaRound).Elem()
	xs := make([]float64, len(m.Rounds))
	for f := range med.NumField() {
		for i := range m.Rounds {
			xs[i] = reflect.ValueOf(m.Rounds[i]).Field(f).Float()
		}
		med.Field(f).SetFloat(median(xs))
	}
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
	deep, err := b.deepQueue(ctx)
	if err != nil {
		return res, err
	}
	out := make([]ReplicaMode, len(modes))
	for round := range rc.Rounds {
		for i, m := range modes {
			b.step(fmt.Sprintf("replicas, round %d of %d: %s (%d managers)", round+1, rc.Rounds, m.name, m.topo.replicas))
			b.topo, b.profileTag = m.topo, profileTag(m.name)
			r, err := b.replicaRound(ctx, rawObjs, raw.Probe)
			if err != nil {
				return res, fmt.Errorf("%s: %w", m.name, err)
			}
			out[i].Mode, out[i].Managers = m.name, m.topo.replicas
			out[i].Rounds = append(out[i].Rounds, r)
		}
	}
	// The deep queue's rounds come after all the others: hand-offs on it leave every waiter's
	// position stale, and the refreshes that follow (rate-limited, a minute for 1,000 waiters)
	// would land in the windows of the rounds above.
	for round := range rc.Rounds {
		for i, m := range modes {
			b.step(fmt.Sprintf("replicas, deep queue, round %d of %d: %s (%d managers)", round+1, rc.Rounds, m.name, m.topo.replicas))
			b.topo, b.profileTag = m.topo, profileTag(m.name)
			on, off, err := b.deepRuns(ctx, deep, round%2 == 1)
			if err != nil {
				return res, fmt.Errorf("%s, deep queue: %w", m.name, err)
			}
			out[i].Rounds[round].deep(on, off)
		}
	}
	for i := range out {
		out[i].summarize()
	}
	res.Modes = out
	return res, nil
}

// profileTag names a mode's profiles: "-" and its name, without commas, spaces as dashes.
func profileTag(mode string) string {
	return "-" + strings.ReplaceAll(strings.ReplaceAll(mode, ",", ""), " ", "-")
}

// deepQueue queues the deepest of HandoffDepths on one key, with one manager that it then
// stops: every mode's G3 and G4 hand off on it, and its requests sit in every mode's caches
// for the whole phase.
func (b *bench) deepQueue(ctx context.Context) (*queueState, error) {
	depth := b.cfg.HandoffDepths[len(b.cfg.HandoffDepths)-1]
	b.step(fmt.Sprintf("replicas: a queue of depth %d for G3 and G4", depth))
	b.topo = topology{replicas: 1}
	if err := b.startManager(ctx, true); err != nil {
		return nil, err
	}
	q, err := b.setupQueue(ctx, depth)
	if err != nil {
		return nil, fmt.Errorf("queue of depth %d: %w", depth, err)
	}
	return q, b.stopManager()
}

// replicaRound starts the mode's managers, measures G1's two sides and hand-offs at depth 10,
// and stops them.
func (b *bench) replicaRound(ctx context.Context, rawObjs *rawObjects, probe Latency) (ReplicaRound, error) {
	var r ReplicaRound
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
	r = ReplicaRound{
		G1:                   ratio(tp.GrantsPerSec, rawRate),
		HandoffP50Ms:         h.Latency.P50,
		HandoffP99Ms:         h.Latency.P99,
		G2b:                  ratio(h.Latency.P99, probe.P99),
		HandoffsPerSec:       h.HandoffsPerSec,
		WritesPerHandoff:     h.WritesPerHandoff,
		ConflictsPerHandoff:  h.ConflictsPerHandoff,
		ReconcilesPerHandoff: (all.Reconciles + all.PeerReconciles) / n,
		CPUPerHandoffMs:      (all.ManagerCPU + all.PeerCPU) * 1000 / n,
		RequestsPerHandoff:   all.Requests / n,
		GetsPerHandoff:       all.Gets / n,
	}
	return r, nil
}

// deep completes the round with its mode's runs on the deep queue: G3 against the round's
// depth 10, and G4.
func (r *ReplicaRound) deep(on, off deepRun) {
	r.G3a, r.G3b, r.G4 = ratio(on.writes, r.WritesPerHandoff), ratio(on.rate, r.HandoffsPerSec), ratio(on.rate, off.rate)
	r.DeepHandoffsPerSec, r.DeepCPUPerHandoffMs = on.rate, on.cpu
}

// deepRun is hand-offs back to back on the deep queue: per second, API writes and CPU of all
// managers per hand-off.
type deepRun struct{ rate, writes, cpu float64 }

// deepRuns hands off DetectionSamples times back to back on the deep queue with deadlock
// detection on and with it off, in the order given. Each run starts the mode's managers with
// that setting and makes a tenth as many unmeasured hand-offs first, so neither run finds
// managers warmer than the other, and stops them.
func (b *bench) deepRuns(ctx context.Context, q *queueState, offFirst bool) (on, off deepRun, err error) {
	n := b.cfg.DetectionSamples
	for _, detection := range []bool{!offFirst, offFirst} {
		if err := b.startManager(ctx, detection); err != nil {
			return on, off, err
		}
		if _, _, err := b.handoffs(ctx, q, max(1, n/10), false); err != nil {
			return on, off, err
		}
		w, err := b.open(ctx, q.ns)
		if err != nil {
			return on, off, err
		}
		profiled := b.profile(ctx, fmt.Sprintf("cpu-deep-detection-%t%s", detection, b.profileTag))
		_, elapsed, err := b.handoffs(ctx, q, n, false)
		if err != nil {
			return on, off, err
		}
		win, err := w.close(ctx)
		if err != nil {
			return on, off, err
		}
		if err := profiled(); err != nil {
			return on, off, err
		}
		if err := b.stopManager(); err != nil {
			return on, off, err
		}
		run := deepRun{rate: perSecond(n, elapsed), writes: win.Controller / float64(n), cpu: (win.ManagerCPU + win.PeerCPU) * 1000 / float64(n)}
		if detection {
			on = run
		} else {
			off = run
		}
	}
	return on, off, nil
}

// PoolReplicas joins the replicas phases of several runs of the same code, round by round, into
// one result with the goals recomputed over every round: each run's rounds are paired within
// that run, so pooling keeps the pairing and only adds rounds.
func PoolReplicas(runs []Result) (Result, error) {
	var out Result
	for i, r := range runs {
		rp := r.Replicas
		if rp == nil {
			return out, fmt.Errorf("run %d has no replicas phase", i+1)
		}
		if out.Replicas == nil {
			out = Result{Started: r.Started, CPUs: r.CPUs, GoVersion: r.GoVersion, Config: r.Config,
				Replicas: &ReplicasResult{Replicas: rp.Replicas}}
			for _, m := range rp.Modes {
				out.Replicas.Modes = append(out.Replicas.Modes, ReplicaMode{Mode: m.Mode, Managers: m.Managers})
			}
		}
		pooled := out.Replicas
		if rp.Replicas != pooled.Replicas || len(rp.Modes) != len(pooled.Modes) {
			return out, fmt.Errorf("run %d compares %d modes of %d replicas, run 1 %d of %d", i+1, len(rp.Modes), rp.Replicas, len(pooled.Modes), pooled.Replicas)
		}
		for j, m := range rp.Modes {
			if m.Mode != pooled.Modes[j].Mode || len(m.Rounds) != rp.Rounds {
				return out, fmt.Errorf("run %d: mode %d is %q with %d of %d rounds; pooling needs every round of the modes of run 1 in its order", i+1, j+1, m.Mode, len(m.Rounds), rp.Rounds)
			}
			pooled.Modes[j].Rounds = append(pooled.Modes[j].Rounds, m.Rounds...)
		}
		pooled.Rounds += rp.Rounds
		out.Seconds += r.Seconds
	}
	if out.Replicas == nil {
		return out, fmt.Errorf("no runs to pool")
	}
	for i := range out.Replicas.Modes {
		out.Replicas.Modes[i].summarize()
	}
	out.Goals = replicasGoals(out.Replicas)
	return out, nil
}

// Package bench is Turnstile's benchmark harness (`make bench`). In one run, on one local
// control plane (kube-apiserver + etcd from envtest) and the real manager binary, it measures
// Turnstile side by side with what it is judged against:
//
//   - the API server itself: raw GET+UpdateStatus of a LockRequest-sized object, and how long a
//     write takes to come back on a watch;
//   - uncontended acquires and hand-offs under contention at two queue depths;
//   - client-go leaderelection on a Lease used as a mutex, the lock a Kubernetes user would
//     otherwise pick, with its default timings;
//   - API writes per grant and per hand-off, from the API server's own request counters;
//   - 10,000 pending requests: the manager's memory, its catch-up time after a restart and the
//     cost of a deadlock check;
//   - throughput with deadlock detection on and off.
//
// The machine is shared and noisy, so every goal is a ratio of two numbers measured in the same
// run. Goals are reported as measured, never asserted: bench_test.go runs every phase at a tiny
// size inside `make test` and checks only that the result is well-formed.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// Config sizes a run.
type Config struct {
	// Assets holds kube-apiserver and etcd (default $KUBEBUILDER_ASSETS); Manager is the
	// manager binary; OutDir receives results.json and manager.log.
	Assets  string `json:"-"`
	Manager string `json:"-"`
	OutDir  string `json:"-"`

	// Workers is the client concurrency of the parallel raw baseline and of the grant
	// throughput run (the same number, so G1 compares like with like).
	Workers int `json:"workers"`
	// RawDuration is how long each raw baseline (sequential, parallel) runs.
	RawDuration Duration `json:"rawDuration"`
	// ProbeSamples is how many write→watch round trips the probe times.
	ProbeSamples int `json:"probeSamples"`
	// AcquireSamples is how many sequential uncontended acquires are timed, each on a fresh key.
	AcquireSamples int `json:"acquireSamples"`
	// ThroughputKeys, ThroughputDuration and ThroughputRounds shape the uncontended grant
	// throughput: each round runs the raw parallel baseline, then the grants, each for
	// ThroughputDuration.
	ThroughputKeys     int      `json:"throughputKeys"`
	ThroughputDuration Duration `json:"throughputDuration"`
	ThroughputRounds   int      `json:"throughputRounds"`
	// HandoffDepths are the queue depths hand-offs are measured at (first: the small one G2
	// uses; last: the deep one G3 compares with the first); HandoffSamples per depth and mode.
	HandoffDepths  []int `json:"handoffDepths"`
	HandoffSamples int   `json:"handoffSamples"`
	// LeaderElection runs the peer once per entry: Contenders electors (one holds, the rest
	// wait), Samples hand-offs. The first entry is the one G2 compares with.
	LeaderElection []LEConfig `json:"leaderElection"`
	// ScaleRequests pending requests over ScaleKeys keys in ScaleNamespaces namespaces, created
	// while the manager is down; ScalePoints are the smaller points of the memory curve (each
	// a prefix of the next, with the same requests per key and keys per namespace).
	ScaleRequests   int   `json:"scaleRequests"`
	ScaleKeys       int   `json:"scaleKeys"`
	ScaleNamespaces int   `json:"scaleNamespaces"`
	ScalePoints     []int `json:"scalePoints,omitempty"`
	// ScaleBaseline is another manager binary (e.g. built from main) the scale phase restarts
	// on the same requests at every point, side by side; "" runs none.
	ScaleBaseline string `json:"-"`
	// MemLimit is the container memory limit every manager runs under, a quantity ("256Mi";
	// "" none): the manager under test gets it as the chart gives it (MEMORY_LIMIT, of which
	// it sets the runtime's soft limit), a baseline as the chart before did (GOMEMLIMIT).
	MemLimit string `json:"memLimit,omitempty"`
	// Cgroup enforces MemLimit as a container does: each manager runs in a memory cgroup with
	// that limit, which counts the binary's pages too (needs root and a cgroup hierarchy with
	// the memory controller).
	Cgroup bool `json:"cgroup,omitempty"`
	// DetectionRounds alternate a manager with deadlock detection off and on; each round runs
	// DetectionSamples hand-offs on the deepest queue and a grant throughput run of
	// DetectionDuration.
	DetectionRounds   int      `json:"detectionRounds"`
	DetectionSamples  int      `json:"detectionSamples"`
	DetectionDuration Duration `json:"detectionDuration"`
	// Failover sizes the failover phase (active-active replicas killed, the leader-election
	// baseline, a rolling restart).
	Failover FailoverConfig `json:"failover"`
	// Roll sizes the roll phase: hand-offs through a rolling replacement of every replica.
	Roll RollConfig `json:"roll"`

	// Phases, when not empty, runs only these: "steady" (everything up to deadlock detection
	// on/off), "scale", "replicas" (one manager, leader election and active-active compared),
	// "failover" (BENCH_PHASES=failover make bench).
	Phases []string `json:"phases,omitempty"`
	// Replicas, above 1, runs the steady-state phases with that many managers active-active
	// (--active-active) instead of one: the harness measures the first, the API server all.
	Replicas int `json:"replicas,omitempty"`
	// LeaderElect runs the Replicas managers with leader election instead (--leader-elect, the
	// Deployment's mode before active-active): the measured manager leads, the others stand by
	// with warm caches. It is the "one active manager" baseline of a replicated Deployment.
	LeaderElect bool `json:"leaderElect,omitempty"`
	// ReplicasPhase sizes the "replicas" phase (BENCH_PHASES=replicas): one manager, one in
	// active-active mode alone, leader election and active-active compared round by round in
	// one run.
	ReplicasPhase ReplicasConfig `json:"replicasPhase"`
	// RunPhase sizes the "run" phase (BENCH_PHASES=run): `kubectl turnstile run -- true`
	// against `true`, and the hand-off between two runs on one key, per plugin binary.
	RunPhase RunConfig `json:"runPhase"`
	// Gated sizes the "gated" phase (BENCH_PHASES=gated): a gated Pod's grant → bound with the
	// real kube-scheduler, beside an ungated Pod's create → bound.
	Gated GatedConfig `json:"gated"`
	// Freeze sizes the "freeze" phase (BENCH_PHASES=freeze): the latency the write-freeze
	// policies add per write with 0, 10 and 100 CommandLocks, beside no policy.
	Freeze FreezeConfig `json:"freeze"`
	// Fleet sizes the "fleet" phase (BENCH_PHASES=fleet): a hand-off between two spokes beside
	// one inside the hub and a hub round trip, and the hub manager serving simulated spokes
	// beside the same requests made inside it.
	Fleet FleetConfig `json:"fleet"`

	// ProfileSeconds, when positive, serves pprof from the manager and records a CPU profile
	// of that many seconds from the start of each back-to-back hand-off run, as
	// OutDir/cpu-handoff-depth<N>.pprof (`go tool pprof bin/manager FILE`); the replicas phase
	// adds its mode to the name, and a peer's profile adds its name. It adds up to that
	// long of idle time per depth; no number in the result depends on it.
	ProfileSeconds int `json:"profileSeconds,omitempty"`

	// Progress receives one line per step (nil: discarded).
	Progress io.Writer `json:"-"`
}

// LEConfig sizes one leaderelection run.
type LEConfig struct {
	Contenders int `json:"contenders"`
	Samples    int `json:"samples"`
}

// Full is the size `make bench` runs: well under 15 minutes on a 2-core machine.
func Full() Config {
	return Config{
		Workers:            8,
		RawDuration:        Duration(5 * time.Second),
		ProbeSamples:       500,
		AcquireSamples:     300,
		ThroughputKeys:     100,
		ThroughputDuration: Duration(8 * time.Second),
		ThroughputRounds:   3,
		HandoffDepths:      []int{10, 1000},
		HandoffSamples:     200,
		// 11 electors: one holder and 10 waiting, like a queue of depth 10; a lone waiter is
		// the common two-pipelines case.
		LeaderElection:    []LEConfig{{Contenders: 11, Samples: 40}, {Contenders: 2, Samples: 15}},
		ScaleRequests:     100000,
		ScaleKeys:         10000,
		ScaleNamespaces:   1000,
		ScalePoints:       []int{10000, 30000},
		MemLimit:          "256Mi",
		DetectionRounds:   2,
		DetectionSamples:  150,
		DetectionDuration: Duration(8 * time.Second),
		Failover: FailoverConfig{Replicas: 3, Kills: 12, BackupDelay: Duration(300 * time.Millisecond), Lapse: Duration(3 * time.Second),
			LeaderElectionKills: 4, LeaderElectionLease: Duration(15 * time.Second)},
		ReplicasPhase: ReplicasConfig{Replicas: 2, Rounds: 5},
		RunPhase:      RunConfig{Samples: 40},
		Gated:         GatedConfig{Samples: 40},
		Freeze:        FreezeConfig{Samples: 300, Rounds: 2, Locks: []int{0, 10, 100}},
		Roll:          RollConfig{Replicas: 2, Keys: 4, Steady: Duration(30 * time.Second), Rounds: 5},
		// 50 spokes × 100 requests (docs/fleet.md "Bench goals"), over 3 namespaces: 150 hub
		// Leases renewed every 13 s; the rest window holds three renewals of each.
		// The link mode's hub 10 ms away each way: a round trip of 20 ms more, a region away.
		Fleet: FleetConfig{Samples: 100, Spokes: 50, Requests: 100, Namespaces: 3, Lease: Duration(40 * time.Second), Rest: Duration(40 * time.Second),
			Link: Duration(10 * time.Millisecond)},
	}
}

// Smoke is the size `make test` runs: every phase, in seconds.
func Smoke() Config {
	c := Full()
	c.Workers, c.ThroughputKeys, c.ThroughputRounds = 2, 4, 1
	c.RawDuration, c.ThroughputDuration = Duration(300*time.Millisecond), Duration(time.Second)
	c.ProbeSamples, c.AcquireSamples, c.HandoffSamples = 10, 5, 4
	c.HandoffDepths = []int{2, 5}
	c.LeaderElection = []LEConfig{{Contenders: 2, Samples: 1}}
	c.ScaleRequests, c.ScaleKeys, c.ScaleNamespaces, c.ScalePoints = 40, 4, 2, []int{20}
	c.DetectionRounds, c.DetectionSamples, c.DetectionDuration = 1, 3, Duration(500*time.Millisecond)
	// A short lease keeps the baseline to seconds; the full run uses the Deployment's 15 s.
	c.Failover = FailoverConfig{Replicas: 2, Kills: 2, BackupDelay: Duration(300 * time.Millisecond), Lapse: Duration(2 * time.Second),
		LeaderElectionKills: 1, LeaderElectionLease: Duration(3 * time.Second)}
	c.ReplicasPhase.Rounds = 1
	c.RunPhase.Samples = 2
	c.Gated.Samples = 2
	c.Freeze = FreezeConfig{Samples: 6, Rounds: 1, Locks: []int{0, 2}}
	c.Roll = RollConfig{Replicas: 2, Keys: 2, Steady: Duration(2 * time.Second), Rounds: 1}
	c.Fleet = FleetConfig{Samples: 2, Spokes: 3, Requests: 4, Namespaces: 2, Lease: Duration(10 * time.Second), Rest: Duration(2 * time.Second),
		Link: Duration(5 * time.Millisecond)}
	return c
}

// phases are the phases Config.Phases may name.
var phases = []string{"steady", "scale", "run", "shared", "gated", "freeze", "fleet", "replicas", "failover", "roll"}

// runs says whether phase is to run.
func (c Config) runs(phase string) bool {
	return len(c.Phases) == 0 || slices.Contains(c.Phases, phase)
}

func (c Config) validate() error {
	switch {
	case c.Manager == "":
		return errors.New("no manager binary given")
	case c.OutDir == "":
		return errors.New("no output directory given")
	case c.Workers < 1 || c.ProbeSamples < 1 || c.AcquireSamples < 1 || c.ThroughputRounds < 1 || c.HandoffSamples < 1:
		return errors.New("workers, rounds and sample counts must be at least 1")
	case c.ThroughputKeys < c.Workers:
		return errors.New("the throughput run needs at least one key per worker, so workers never contend")
	case len(c.HandoffDepths) < 2:
		return errors.New("at least two hand-off depths are needed (G3 compares the last with the first)")
	case len(c.LeaderElection) < 1:
		return errors.New("at least one leaderelection run is needed")
	case c.ScaleKeys < 1 || c.ScaleNamespaces < 1 || c.ScaleRequests%c.ScaleKeys != 0 || c.ScaleKeys%c.ScaleNamespaces != 0:
		return errors.New("scale needs whole numbers of requests per key and keys per namespace")
	case c.DetectionRounds < 1 || c.DetectionSamples < 1:
		return errors.New("detection needs at least one round and one sample")
	case c.runs("run") && (c.RunPhase.Plugin == "" || c.RunPhase.Samples < 1):
		return errors.New("the run phase needs a plugin binary and at least 1 sample")
	case c.runs("gated") && c.Gated.Samples < 1:
		return errors.New("the gated phase needs at least 1 sample")
	case c.runs("freeze") && (c.Freeze.Samples < 3 || c.Freeze.Rounds < 1 || len(c.Freeze.Locks) == 0 || !slices.IsSorted(c.Freeze.Locks) || c.Freeze.Locks[0] < 0):
		return errors.New("the freeze phase needs at least 3 samples (a create, an update, a delete), a round and ascending CommandLock counts")
	case c.runs("fleet") && c.Fleet.valid() != nil:
		return c.Fleet.valid()
	case c.Roll.Replicas < 1 || c.Roll.Keys < 1 || c.Roll.Steady <= 0 || c.Roll.Rounds < 1:
		return errors.New("the roll phase needs a replica, a key and a steady window")
	case c.ReplicasPhase.Replicas < 2 || c.ReplicasPhase.Rounds < 1:
		return errors.New("the replicas phase needs at least 2 replicas and 1 round")
	case c.Failover.Replicas < 2 || c.Failover.Kills < 1 || c.Failover.LeaderElectionKills < 1 || c.Failover.Lapse <= Duration(time.Second) || c.Failover.LeaderElectionLease <= 0:
		return errors.New("failover needs at least 2 replicas, a kill of each kind, a lapse above the 1 s renewal and a lease")
	}
	for _, p := range c.Phases {
		if !slices.Contains(phases, p) {
			return fmt.Errorf("unknown phase %q: one of %s", p, strings.Join(phases, ", "))
		}
	}
	for _, d := range c.HandoffDepths {
		if d < 1 {
			return errors.New("hand-off depths must be at least 1")
		}
	}
	for _, le := range c.LeaderElection {
		if le.Contenders < 2 || le.Samples < 1 {
			return errors.New("leaderelection needs at least 2 contenders and 1 sample")
		}
	}
	return nil
}

// bench is one run's shared state.
type bench struct {
	cfg        Config
	env        *framework.Env
	c          client.Client
	kubeconfig string
	tracker    *tracker
	api        *scraper
	mgr        *managerProc
	peers      []*replica // topo.replicas-1 peers of mgr: active-active, or standbys
	topo       topology   // how many managers run, and how
	profileTag string     // ends the names of the hand-off profiles: the replicas phase's mode
	mgrLog     *os.File
	progress   io.Writer
	// harnessWrites counts the harness's own writes to lockrequests and projectlocks, so a
	// window can subtract them from the API server's counters.
	harnessWrites atomic.Int64
	names         atomic.Int64
	namespaces    []string
	// binary, when set, is the manager binary launch starts instead of Config.Manager (the
	// scale phase's baseline).
	binary string
	// rawObjs are the raw baseline's objects, once set up.
	rawObjs *rawObjects
}

// Run starts a control plane and the manager, runs every phase and returns the result. It also
// writes OutDir/results.json.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Assets == "" {
		cfg.Assets = os.Getenv("KUBEBUILDER_ASSETS")
	}
	if _, err := os.Stat(cfg.Manager); err != nil {
		return nil, fmt.Errorf("manager binary: %w (run `make build`)", err)
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, progress: cfg.Progress, topo: topology{replicas: max(1, cfg.Replicas), leaderElect: cfg.LeaderElect,
		activeActive: cfg.Replicas > 1 && !cfg.LeaderElect}}
	if b.progress == nil {
		b.progress = io.Discard
	}
	b.mgrLog, err = os.Create(filepath.Join(cfg.OutDir, "manager.log"))
	if err != nil {
		return nil, err
	}
	defer b.mgrLog.Close()

	started := time.Now()
	b.step("starting kube-apiserver and etcd")
	b.env, err = framework.Start(cfg.Assets)
	if err != nil {
		return nil, err
	}
	defer func() {
		if b.mgr != nil {
			if stopErr := b.stopManager(); stopErr != nil && err == nil {
				err = stopErr
			}
		}
		if stopErr := b.env.Stop(); stopErr != nil && err == nil {
			err = fmt.Errorf("stop control plane: %w", stopErr)
		}
	}()
	b.c = b.env.Client
	b.kubeconfig = filepath.Join(cfg.OutDir, "kubeconfig")
	if err := b.env.WriteKubeconfig(b.kubeconfig); err != nil {
		return nil, err
	}
	if b.api, err = newScraper(b.env.Config); err != nil {
		return nil, err
	}
	if b.tracker, err = startTracker(ctx, b.env.Config); err != nil {
		return nil, err
	}
	defer b.tracker.Stop()

	if cfg.Replicas > 1 {
		if err := b.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: membersNamespace}}); err != nil {
			return nil, fmt.Errorf("create namespace: %w", err)
		}
	}
	res = &Result{Config: cfg, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Started: started}
	if err := b.runPhases(ctx, res); err != nil {
		// What was measured before the failure (or the interrupt) is kept, marked as partial.
		res.Error, res.Seconds = err.Error(), time.Since(started).Seconds()
		res.Goals = computeGoals(res)
		_ = res.WriteJSON(filepath.Join(cfg.OutDir, "results.json"))
		return nil, err
	}
	if err := b.tracker.Err(); err != nil {
		return nil, err
	}
	res.Seconds = time.Since(started).Seconds()
	res.Goals = computeGoals(res)
	if err := res.WriteJSON(filepath.Join(cfg.OutDir, "results.json")); err != nil {
		return nil, err
	}
	return res, nil
}

// ensureManager starts the steady-state manager unless it runs.
func (b *bench) ensureManager(ctx context.Context) error {
	if b.mgr != nil {
		return nil
	}
	b.step("starting the manager")
	return b.startManager(ctx, true)
}

func (b *bench) runPhases(ctx context.Context, res *Result) error {
	if b.cfg.runs("steady") || b.cfg.runs("scale") {
		if err := b.steadyPhases(ctx, res); err != nil {
			return err
		}
	}
	if b.cfg.runs("run") {
		if err := b.ensureManager(ctx); err != nil {
			return err
		}
		r, err := b.runPhase(ctx)
		if err != nil {
			return fmt.Errorf("run: %w", err)
		}
		res.Run = &r
	}
	if b.cfg.runs("shared") {
		if err := b.ensureManager(ctx); err != nil {
			return err
		}
		b.step(fmt.Sprintf("shared: %d readers and a writer on one key, beside %d exclusive waiters", sharedReaders, sharedReaders))
		r, err := b.sharedPhase(ctx)
		if err != nil {
			return fmt.Errorf("shared: %w", err)
		}
		res.Shared = &r
	}
	if b.cfg.runs("gated") {
		if err := b.gated(ctx, res); err != nil {
			return err
		}
	}
	if b.cfg.runs("freeze") {
		if err := b.ensureManager(ctx); err != nil {
			return err
		}
		r, err := b.freezePhase(ctx)
		if err != nil {
			return fmt.Errorf("freeze: %w", err)
		}
		res.Freeze = &r
	}
	if b.cfg.runs("fleet") {
		if err := b.fleet(ctx, res); err != nil {
			return err
		}
	}
	if b.cfg.runs("replicas") || b.cfg.runs("failover") || b.cfg.runs("roll") {
		// These phases run their own managers; the steady-state one would act on every key.
		if b.mgr != nil {
			if err := b.stopManager(); err != nil {
				return err
			}
		}
	}
	if b.cfg.runs("replicas") {
		r, err := b.replicasPhase(ctx)
		if err != nil {
			return fmt.Errorf("replicas: %w", err)
		}
		res.Replicas = &r
	}
	if b.cfg.runs("failover") {
		f, err := b.failover(ctx)
		if err != nil {
			return fmt.Errorf("failover: %w", err)
		}
		res.Failover = &f
	}
	if b.cfg.runs("roll") {
		rc := b.cfg.Roll
		b.step(fmt.Sprintf("roll: %d active-active replicas replaced one by one while %d keys hand off back to back (after %s steady)", rc.Replicas, rc.Keys, rc.Steady.D()))
		r, err := b.roll(ctx)
		if err != nil {
			return fmt.Errorf("roll: %w", err)
		}
		res.Roll = &r
	}
	return nil
}

func (b *bench) steadyPhases(ctx context.Context, res *Result) error {
	b.step("starting the manager")
	if err := b.startManager(ctx, true); err != nil {
		return err
	}
	res.IdleRSSBytes = b.mgr.rss().RSS
	if !b.cfg.runs("steady") {
		return b.scalePhase(ctx, res)
	}

	b.step("baseline: raw GET+UpdateStatus and the write→watch probe")
	raw, rawObjs, err := b.raw(ctx)
	if err != nil {
		return fmt.Errorf("raw baseline: %w", err)
	}
	b.rawObjs = rawObjs

	b.step("uncontended acquires")
	if res.Acquire, err = b.acquire(ctx); err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	b.step(fmt.Sprintf("grant throughput: %d workers over %d keys, alternating with the raw baseline", b.cfg.Workers, b.cfg.ThroughputKeys))
	if res.Throughput, err = b.throughputRounds(ctx, rawObjs, &raw); err != nil {
		return fmt.Errorf("grant throughput: %w", err)
	}
	res.Raw = raw

	var deepest *queueState
	for _, depth := range b.cfg.HandoffDepths {
		b.step(fmt.Sprintf("hand-offs at queue depth %d", depth))
		h, q, err := b.handoffDepth(ctx, depth)
		if err != nil {
			return fmt.Errorf("hand-off at depth %d: %w", depth, err)
		}
		res.Handoff = append(res.Handoff, h)
		deepest = q
	}

	for _, le := range b.cfg.LeaderElection {
		b.step(fmt.Sprintf("leaderelection peer: %d contenders, %d hand-offs", le.Contenders, le.Samples))
		r, err := b.leaderElection(ctx, le)
		if err != nil {
			return fmt.Errorf("leaderelection: %w", err)
		}
		res.LeaderElection = append(res.LeaderElection, r)
	}

	if res.Detection, err = b.detection(ctx, deepest); err != nil {
		return fmt.Errorf("detection on/off: %w", err)
	}
	if !b.cfg.runs("scale") {
		return nil
	}
	return b.scalePhase(ctx, res)
}

func (b *bench) scalePhase(ctx context.Context, res *Result) (err error) {
	b.step(fmt.Sprintf("scale: up to %d pending requests over %d keys in %d namespaces", b.cfg.ScaleRequests, b.cfg.ScaleKeys, b.cfg.ScaleNamespaces))
	curve, err := b.scale(ctx)
	for i := range curve {
		curve[i].IdleRSSBytes = res.IdleRSSBytes
	}
	res.ScaleCurve = curve
	for _, s := range curve {
		if s.Manager == "turnstile" && !s.Restart {
			res.Scale = s // the largest point's fresh run
		}
	}
	if err != nil {
		return fmt.Errorf("scale: %w", err)
	}
	return nil
}

func (b *bench) step(msg string) {
	fmt.Fprintf(b.progress, "%s  %s\n", time.Now().Format("15:04:05"), msg)
}

// namespace creates a fresh namespace for one phase.
func (b *bench) namespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-" + prefix + "-"}}
	if err := b.c.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("create namespace: %w", err)
	}
	b.namespaces = append(b.namespaces, ns.Name)
	return ns.Name, nil
}

// name returns a unique object name.
func (b *bench) name(prefix string) string {
	return fmt.Sprintf("%s-%06d", prefix, b.names.Add(1))
}

// request builds a LockRequest the size of a real one: one target, a holder with a pull and a
// URL, a command and a ttl.
func request(ns, name, repo, path, owner string, pull int64) *locksv1.LockRequest {
	lr := &locksv1.LockRequest{}
	lr.Namespace, lr.Name = ns, name
	lr.Spec.Locks = []locksv1.LockTarget{{Repo: repo, Path: path, Workspace: "default"}}
	lr.Spec.Holder = locksv1.Holder{Owner: owner, Pull: pull, URL: fmt.Sprintf("https://github.com/%s/pull/%d", repo, pull)}
	lr.Spec.Command = "apply"
	// The manager's default longest TTL: no grant the harness holds on to (the deep queue's
	// holder waits through every other round of the replicas phase) expires under it.
	lr.Spec.TTL = &metav1.Duration{Duration: 2 * time.Hour}
	return lr
}

// create and remove are the harness's writes, counted so windows can subtract them.
func (b *bench) create(ctx context.Context, lr *locksv1.LockRequest) error {
	b.harnessWrites.Add(1)
	if err := b.c.Create(ctx, lr); err != nil {
		return fmt.Errorf("create lockrequest %s/%s: %w", lr.Namespace, lr.Name, err)
	}
	return nil
}

func (b *bench) remove(ctx context.Context, ns, name string) error {
	b.harnessWrites.Add(1)
	lr := &locksv1.LockRequest{}
	lr.Namespace, lr.Name = ns, name
	if err := b.c.Delete(ctx, lr); err != nil {
		return fmt.Errorf("delete lockrequest %s/%s: %w", ns, name, err)
	}
	return nil
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := atomic.Int64{}
	errs := make(chan error, workers)
	for range workers {
		go func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					errs <- nil
					return
				}
				if err := f(ctx, i); err != nil {
					cancel()
					errs <- err
					return
				}
			}
		}()
	}
	var first error
	for range workers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// Duration is a time.Duration that reads as "1.5s" in JSON.
type Duration time.Duration

// D is the duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalText renders the duration like time.Duration.String.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText parses a duration like time.ParseDuration.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// memLimitBytes is MemLimit in bytes (0 for none). GOMEMLIMIT's spelling ("256MiB") is taken
// as the quantity it names.
func (c Config) memLimitBytes() (int64, error) {
	if c.MemLimit == "" {
		return 0, nil
	}
	s := c.MemLimit
	if strings.HasSuffix(s, "iB") {
		s = strings.TrimSuffix(s, "B")
	}
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() <= 0 {
		return 0, fmt.Errorf("memory limit %q: not a quantity such as 256Mi", c.MemLimit)
	}
	return q.Value(), nil
}

package bench

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/deadlock"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// ScaleResult is ScaleRequests requests over ScaleKeys keys, created while the manager is
// down, then a manager start.
type ScaleResult struct {
	Requests int `json:"requests"`
	Keys     int `json:"keys"`
	// CreateSeconds is how long creating them took (the harness, not Turnstile).
	CreateSeconds float64 `json:"createSeconds"`
	// FirstPhaseSeconds is manager start → the first request has a phase (start-up and
	// cache sync); ReconcileSeconds manager start → every request has one.
	FirstPhaseSeconds float64 `json:"firstPhaseSeconds"`
	ReconcileSeconds  float64 `json:"reconcileSeconds"`
	WritesPerRequest  float64 `json:"writesPerRequest"`
	Writes            Writes  `json:"window"`
	// RSSBytes is the manager's resident memory once every request is reconciled;
	// PeakRSSBytes its high-water mark; IdleRSSBytes a manager that had just started on an
	// empty cluster, for comparison.
	RSSBytes      int64         `json:"rssBytes"`
	PeakRSSBytes  int64         `json:"peakRSSBytes"`
	IdleRSSBytes  int64         `json:"idleRSSBytes"`
	DeadlockCheck DeadlockCheck `json:"deadlockCheck"`
}

// DeadlockCheck times the manager's deadlock check on the scale namespace: the detector's own
// Check (list from an informer cache, build the wait-for graph, find cycles) as the manager
// runs it, and the parts of it.
type DeadlockCheck struct {
	Runs     int `json:"runs"`
	Waiters  int `json:"waiters"`
	KeysSeen int `json:"keys"`
	Cycles   int `json:"cycles"`
	// FullMs is the median of controller.DeadlockDetector.Check; ListMs of listing the
	// namespace's requests and locks from the cache; GraphMs of deadlock.Build + FindCycles.
	FullMs  float64 `json:"fullMs"`
	ListMs  float64 `json:"listMs"`
	GraphMs float64 `json:"graphMs"`
}

func (b *bench) scale(ctx context.Context) (ScaleResult, error) {
	res := ScaleResult{Requests: b.cfg.ScaleRequests, Keys: b.cfg.ScaleKeys}
	if err := b.stopManager(); err != nil {
		return res, err
	}
	// Earlier phases' objects would only add to the manager's memory.
	for _, ns := range b.namespaces {
		if err := b.deleteAll(ctx, ns); err != nil {
			return res, err
		}
	}
	ns, err := b.namespace(ctx, "scale")
	if err != nil {
		return res, err
	}
	t := time.Now()
	err = parallel(ctx, res.Requests, 2*b.cfg.Workers, func(ctx context.Context, i int) error {
		k := i % res.Keys
		return b.create(ctx, request(ns, fmt.Sprintf("s-%05d", i), "bench/scale", fmt.Sprintf("k%04d", k), fmt.Sprintf("owner%05d", i), int64(i+1)))
	})
	if err != nil {
		return res, err
	}
	res.CreateSeconds = time.Since(t).Seconds()

	w, err := b.open(ctx, ns)
	if err != nil {
		return res, err
	}
	start := time.Now()
	if err := b.launch(true); err != nil {
		return res, err
	}
	st, err := b.tracker.WaitAllPhased(ctx, ns, res.Requests, 10*time.Minute)
	if err != nil {
		return res, err
	}
	res.FirstPhaseSeconds = st.FirstPhase.Sub(start).Seconds()
	res.ReconcileSeconds = st.LastPhased.Sub(start).Seconds()
	if res.Writes, err = w.close(ctx); err != nil {
		return res, err
	}
	res.WritesPerRequest = res.Writes.Controller / float64(res.Requests)
	// Let the garbage collector and the caches settle before reading memory.
	time.Sleep(2 * time.Second)
	ps := b.mgr.rss()
	res.RSSBytes, res.PeakRSSBytes = ps.RSS, ps.PeakRSS

	b.step("deadlock check on the scale namespace")
	res.DeadlockCheck, err = b.deadlockCheck(ctx, ns, 5)
	return res, err
}

// deadlockCheck runs the manager's deadlock detector on ns from an informer cache like the
// manager's, and times it and its parts.
func (b *bench) deadlockCheck(ctx context.Context, ns string, runs int) (DeadlockCheck, error) {
	res := DeadlockCheck{Runs: runs}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := cache.New(b.env.Config, cache.Options{Scheme: framework.Scheme})
	if err != nil {
		return res, err
	}
	for _, obj := range []client.Object{&locksv1.LockRequest{}, &locksv1.ProjectLock{}, &locksv1.CommandLock{}} {
		if _, err := c.GetInformer(ctx, obj); err != nil {
			return res, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return res, fmt.Errorf("cache did not sync")
	}
	cached, err := client.New(b.env.Config, client.Options{Scheme: framework.Scheme, Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		return res, err
	}
	cfg := queue.DefaultConfig()
	det := controller.NewDeadlockDetector(cached, nil, controller.WithConfig(cfg), controller.WithDeadlockPolicy(deadlock.PolicyNewest))

	var full, list, graph []float64
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for range runs {
		t := time.Now()
		var reqs locksv1.LockRequestList
		var locks locksv1.ProjectLockList
		if err := cached.List(ctx, &reqs, client.InNamespace(ns)); err != nil {
			return res, err
		}
		if err := cached.List(ctx, &locks, client.InNamespace(ns)); err != nil {
			return res, err
		}
		list = append(list, ms(time.Since(t)))
		states := controller.WaitsFor(locks.Items, reqs.Items, queue.Freezes{}, time.Now(), cfg)
		waiters := 0
		for _, st := range states {
			waiters += len(st.Queue)
		}
		t = time.Now()
		cycles := deadlock.Build(states).FindCycles()
		graph = append(graph, ms(time.Since(t)))
		res.Waiters, res.KeysSeen, res.Cycles = waiters, len(states), len(cycles)
		if len(cycles) > 0 {
			// Check would fail a victim; this workload has no cycles, so something is wrong.
			return res, fmt.Errorf("%d deadlock cycles in a workload of single-key requests", len(cycles))
		}
		t = time.Now()
		if err := det.Check(ctx, ns); err != nil {
			return res, err
		}
		full = append(full, ms(time.Since(t)))
	}
	res.FullMs, res.ListMs, res.GraphMs = median(full), median(list), median(graph)
	return res, nil
}

// DetectionRound is one manager run with deadlock detection on or off.
type DetectionRound struct {
	Detection        bool    `json:"detection"`
	HandoffsPerSec   float64 `json:"handoffsPerSec"`
	WritesPerHandoff float64 `json:"writesPerHandoff"`
	CPUPerHandoffMs  float64 `json:"managerCPUPerHandoffMs"`
	GrantsPerSec     float64 `json:"grantsPerSec"`
	CPUPerGrantMs    float64 `json:"managerCPUPerGrantMs"`
	// ChecksPerHandoff and SkipsPerHandoff are the detector's namespace checks run and skipped
	// per hand-off (each with one arrival); zero with detection off.
	ChecksPerHandoff float64 `json:"deadlockChecksPerHandoff"`
	SkipsPerHandoff  float64 `json:"deadlockSkipsPerHandoff"`
}

// DetectionResult compares throughput with deadlock detection on and off: hand-offs on the
// deepest queue, where every arrival asks the detector for a check, and uncontended
// grants, where nobody waits and detection never runs.
type DetectionResult struct {
	Depth  int              `json:"depth"`
	Rounds []DetectionRound `json:"rounds"`
	// Medians over the rounds.
	HandoffsPerSecOn  float64 `json:"handoffsPerSecOn"`
	HandoffsPerSecOff float64 `json:"handoffsPerSecOff"`
	GrantsPerSecOn    float64 `json:"grantsPerSecOn"`
	GrantsPerSecOff   float64 `json:"grantsPerSecOff"`
	// The manager's CPU per hand-off and per grant: less noisy than rates on a shared machine.
	CPUPerHandoffMsOn  float64 `json:"managerCPUPerHandoffMsOn"`
	CPUPerHandoffMsOff float64 `json:"managerCPUPerHandoffMsOff"`
	CPUPerGrantMsOn    float64 `json:"managerCPUPerGrantMsOn"`
	CPUPerGrantMsOff   float64 `json:"managerCPUPerGrantMsOff"`
	// The detector's checks run and skipped per hand-off with detection on (median).
	ChecksPerHandoffOn float64 `json:"deadlockChecksPerHandoffOn"`
	SkipsPerHandoffOn  float64 `json:"deadlockSkipsPerHandoffOn"`
}

// detection alternates managers with detection off and on, so drift in the machine's load
// falls on both alike.
func (b *bench) detection(ctx context.Context, q *queueState) (DetectionResult, error) {
	res := DetectionResult{Depth: q.depth}
	var hOn, hOff, gOn, gOff, chOn, chOff, cgOn, cgOff, checks, skips []float64
	for r := range b.cfg.DetectionRounds {
		for _, on := range []bool{false, true} {
			b.step(fmt.Sprintf("deadlock detection %s, round %d of %d: hand-offs at depth %d, then grant throughput",
				map[bool]string{true: "on", false: "off"}[on], r+1, b.cfg.DetectionRounds, q.depth))
			if err := b.restartManager(ctx, on); err != nil {
				return res, err
			}
			w, err := b.open(ctx, q.ns)
			if err != nil {
				return res, err
			}
			n := b.cfg.DetectionSamples
			_, elapsed, err := b.handoffs(ctx, q, n, false)
			if err != nil {
				return res, err
			}
			win, err := w.close(ctx)
			if err != nil {
				return res, err
			}
			tp, err := b.grantThroughput(ctx, "det", b.cfg.DetectionDuration.D())
			if err != nil {
				return res, err
			}
			round := DetectionRound{Detection: on, HandoffsPerSec: perSecond(n, elapsed), GrantsPerSec: tp.GrantsPerSec,
				CPUPerHandoffMs: win.ManagerCPU * 1000 / float64(n), CPUPerGrantMs: tp.Windows[0].ManagerCPU * 1000 / float64(max(1, tp.Grants))}
			round.WritesPerHandoff = win.Controller / float64(n)
			round.ChecksPerHandoff, round.SkipsPerHandoff = win.DeadlockChecks/float64(n), win.DeadlockSkips/float64(n)
			res.Rounds = append(res.Rounds, round)
			if on {
				hOn, gOn = append(hOn, round.HandoffsPerSec), append(gOn, round.GrantsPerSec)
				chOn, cgOn = append(chOn, round.CPUPerHandoffMs), append(cgOn, round.CPUPerGrantMs)
				checks, skips = append(checks, round.ChecksPerHandoff), append(skips, round.SkipsPerHandoff)
			} else {
				hOff, gOff = append(hOff, round.HandoffsPerSec), append(gOff, round.GrantsPerSec)
				chOff, cgOff = append(chOff, round.CPUPerHandoffMs), append(cgOff, round.CPUPerGrantMs)
			}
		}
	}
	res.HandoffsPerSecOn, res.HandoffsPerSecOff = median(hOn), median(hOff)
	res.GrantsPerSecOn, res.GrantsPerSecOff = median(gOn), median(gOff)
	res.CPUPerHandoffMsOn, res.CPUPerHandoffMsOff = median(chOn), median(chOff)
	res.CPUPerGrantMsOn, res.CPUPerGrantMsOff = median(cgOn), median(cgOff)
	res.ChecksPerHandoffOn, res.SkipsPerHandoffOn = median(checks), median(skips)
	return res, nil
}

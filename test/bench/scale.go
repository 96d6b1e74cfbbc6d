package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/deadlock"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	turnstile "github.com/turnstile-dev/turnstile/pkg/client"
)

// ScaleResult is one manager run on Requests requests over Keys keys in Namespaces namespaces,
// created while no manager ran (the scale phase's curve has one per point and manager).
type ScaleResult struct {
	Requests   int `json:"requests"`
	Keys       int `json:"keys"`
	Namespaces int `json:"namespaces"`
	// Manager is "turnstile" (the binary under test) or "baseline" (Config.ScaleBaseline).
	Manager string `json:"manager,omitempty"`
	// Restart: the manager started on requests an earlier manager had already decided (a cold
	// start of a replica); otherwise the requests up to Requests had no phase yet.
	Restart bool `json:"restart"`
	// CreateSeconds is how long creating the point's new requests took (the harness).
	CreateSeconds float64 `json:"createSeconds"`
	// FirstPhaseSeconds is manager start → the first new request has a phase; ReconcileSeconds
	// manager start → every request has one and the lock controller's queue is empty after
	// reconciling every key at least once (the settle time; on a restart, the queue alone).
	FirstPhaseSeconds float64 `json:"firstPhaseSeconds"`
	ReconcileSeconds  float64 `json:"reconcileSeconds"`
	// ColdStartSeconds is manager start → its first key reconciled; ListSeconds a fresh
	// client's paged list of every request (500 a page, as an informer lists): the issue's
	// cold-start goal is ColdStartSeconds ≤ 1.2 × ListSeconds.
	ColdStartSeconds float64 `json:"coldStartSeconds"`
	ListSeconds      float64 `json:"listSeconds"`
	WritesPerRequest float64 `json:"writesPerRequest"`
	Writes           Writes  `json:"window"`
	// RawWritesPerSec is the API server's UpdateStatus writes per second by Workers clients,
	// each on its own object, measured just before; WriteFloorSeconds the time the manager's writes (controller writes
	// and events) would take at that rate: the settle goal is ReconcileSeconds ≤ 2 × it.
	RawWritesPerSec   float64 `json:"rawWritesPerSec,omitempty"`
	WriteFloorSeconds float64 `json:"writeFloorSeconds,omitempty"`
	// RSSBytes is the manager's resident memory once settled; PeakRSSBytes its high-water
	// mark; HeapBytes the Go heap in use then (go_memstats_heap_inuse_bytes); IdleRSSBytes a
	// manager that had just started on an empty cluster, for comparison.
	RSSBytes     int64 `json:"rssBytes"`
	PeakRSSBytes int64 `json:"peakRSSBytes"`
	HeapBytes    int64 `json:"heapBytes"`
	// HeapLiveBytes is the Go heap that survives a collection forced then
	// (go_memstats_heap_alloc_bytes after the heap profile's GC): what the requests cost, where
	// HeapBytes also counts what the collector has yet to free (up to as much again, by GOGC).
	// Only with Config.ProfileSeconds (the profile endpoint forces the collection).
	HeapLiveBytes int64 `json:"heapLiveBytes,omitempty"`
	// AnonRSSBytes is the part of RSSBytes that is the process's own memory (RssAnon): the
	// rest is pages of its binary, which the kernel can drop and read again.
	AnonRSSBytes int64 `json:"anonRSSBytes,omitempty"`
	// Container is the account of the memory cgroup the manager ran in, limited to
	// Config.MemLimit (Config.Cgroup); nil without one.
	Container     *ContainerStats `json:"container,omitempty"`
	IdleRSSBytes  int64           `json:"idleRSSBytes"`
	DeadlockCheck DeadlockCheck   `json:"deadlockCheck"`
}

// DeadlockCheck times the manager's deadlock check on one scale namespace: the detector's own
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

// scaleShape places request i: ScaleRequests/ScaleKeys requests per key, consecutive, and
// ScaleKeys/ScaleNamespaces keys per namespace, so every point of the curve is a prefix of
// the next with the same queue depth and keys per namespace.
type scaleShape struct{ perKey, keysPerNS int }

func (c Config) scaleShape() scaleShape {
	return scaleShape{perKey: c.ScaleRequests / c.ScaleKeys, keysPerNS: c.ScaleKeys / c.ScaleNamespaces}
}

func (s scaleShape) key(i int) int         { return i / s.perKey }
func (s scaleShape) namespace(i int) int   { return s.key(i) / s.keysPerNS }
func (s scaleShape) keys(requests int) int { return (requests + s.perKey - 1) / s.perKey }
func (s scaleShape) namespaces(requests int) int {
	return (s.keys(requests) + s.keysPerNS - 1) / s.keysPerNS
}

// scaleRun is the scale phase's state across its points.
type scaleRun struct {
	shape   scaleShape
	nss     []string // the scale namespaces created so far
	created int      // requests created so far
}

// scale runs the curve: for each point, the requests up to it are created with no manager
// running, then this build's manager settles them (fresh), then it and the baseline each
// start again on the decided requests (restart). It returns the runs in that order.
func (b *bench) scale(ctx context.Context) ([]ScaleResult, error) {
	if err := b.stopManager(); err != nil {
		return nil, err
	}
	// Earlier phases' objects would only add to the manager's memory.
	for _, ns := range b.namespaces {
		if err := b.deleteAll(ctx, ns); err != nil {
			return nil, err
		}
	}
	if b.rawObjs == nil {
		var err error
		if b.rawObjs, err = b.rawSetup(ctx); err != nil {
			return nil, err
		}
	}
	run := &scaleRun{shape: b.cfg.scaleShape()}
	var out []ScaleResult
	for _, point := range b.cfg.scalePoints() {
		b.step(fmt.Sprintf("scale: creating requests up to %d (%d keys, %d namespaces)", point, run.shape.keys(point), run.shape.namespaces(point)))
		t := time.Now()
		if err := b.createScale(ctx, run, point); err != nil {
			return out, err
		}
		created := time.Since(t).Seconds()
		managers := []struct{ name, binary string }{{"turnstile", b.cfg.Manager}}
		if b.cfg.ScaleBaseline != "" {
			managers = append(managers, struct{ name, binary string }{"baseline", b.cfg.ScaleBaseline})
		}
		for i, restart := range []bool{false, true} {
			for _, m := range managers {
				if !restart && m.name != "turnstile" {
					continue // the requests have phases now: the baseline only restarts
				}
				b.step(fmt.Sprintf("scale: %s at %d requests (restart %t)", m.name, point, restart))
				res, err := b.scalePoint(ctx, run, point, m.binary, restart)
				if err != nil {
					return out, fmt.Errorf("%s at %d: %w", m.name, point, err)
				}
				res.Manager = m.name
				if i == 0 {
					res.CreateSeconds = created
				}
				out = append(out, res)
			}
		}
	}
	return out, nil
}

// scalePoints are the curve's points, ending at ScaleRequests.
func (c Config) scalePoints() []int {
	var pts []int
	for _, p := range c.ScalePoints {
		if p > 0 && p < c.ScaleRequests {
			pts = append(pts, p)
		}
	}
	return append(pts, c.ScaleRequests)
}

// createScale creates the requests up to n, and their namespaces.
func (b *bench) createScale(ctx context.Context, run *scaleRun, n int) error {
	for len(run.nss) < run.shape.namespaces(n) {
		ns, err := b.namespace(ctx, fmt.Sprintf("scale-%04d", len(run.nss)))
		if err != nil {
			return err
		}
		run.nss = append(run.nss, ns)
	}
	from := run.created
	err := parallel(ctx, n-from, 2*b.cfg.Workers, func(ctx context.Context, j int) error {
		i := from + j
		lr := request(run.nss[run.shape.namespace(i)], fmt.Sprintf("s-%06d", i), "bench/scale",
			fmt.Sprintf("k%05d", run.shape.key(i)), fmt.Sprintf("owner%06d", i), int64(i+1))
		// The labels the Go client and kubectl turnstile give every request they create.
		lr.Labels = turnstile.LabelsFor(&lr.Spec)
		if err := lastApplied(lr); err != nil {
			return err
		}
		return b.create(ctx, lr)
	})
	if err != nil {
		return err
	}
	run.created = n
	return nil
}

// lastApplied sets the annotation `kubectl apply` leaves on what it creates (the whole object
// as JSON, labels included): requests are applied by pipelines, and the annotation is part of
// what a cache of them would hold.
func lastApplied(lr *locksv1.LockRequest) error {
	applied := lr.DeepCopy()
	applied.APIVersion, applied.Kind = locksv1.GroupVersion.String(), "LockRequest"
	data, err := json.Marshal(applied)
	if err != nil {
		return err
	}
	lr.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: string(data)}
	return nil
}

// readMemory records the settled manager's memory in res: RSS, the cgroup's account, the heap,
// and with profiling a heap profile and the live heap.
func (b *bench) readMemory(ctx context.Context, res *ScaleResult, n int, binary string, restart bool) error {
	// Let the garbage collector and the caches settle before reading memory.
	time.Sleep(2 * time.Second)
	ps := b.mgr.rss()
	res.RSSBytes, res.PeakRSSBytes, res.AnonRSSBytes = ps.RSS, ps.PeakRSS, ps.AnonRSS
	if b.mgr.container != nil {
		s, err := b.mgr.container.stats()
		if err != nil {
			return err
		}
		res.Container = &s
	}
	var err error
	if res.HeapBytes, err = b.mgr.heapInUse(ctx); err != nil {
		return err
	}
	if b.mgr.pprofURL == "" {
		return nil
	}
	name := fmt.Sprintf("heap-scale-%d-%s.pprof", n, map[bool]string{false: "fresh", true: "restart"}[restart])
	if binary != b.cfg.Manager {
		name = "baseline-" + name
	}
	// gc=1: the profile, and the heap read after it, are of what survives a collection.
	if err := fetchProfile(ctx, strings.TrimSuffix(b.mgr.pprofURL, "profile")+"heap?gc=1", filepath.Join(b.cfg.OutDir, name)); err != nil {
		return err
	}
	c, err := b.mgr.counts(ctx)
	if err != nil {
		return err
	}
	res.HeapLiveBytes = int64(c.heapAlloc)
	return nil
}

// coldStartProfile starts, on a restart with profiling, a CPU profile of the manager from its
// launch, over about as long as the list took and as much again: where a cold start's time
// goes. The returned func waits for it.
func (b *bench) coldStartProfile(ctx context.Context, n int, binary string, restart bool, listSeconds float64) (wait func() error) {
	if !restart || b.mgr.pprofURL == "" {
		return func() error { return nil }
	}
	name := fmt.Sprintf("cpu-coldstart-%d", n)
	if binary != b.cfg.Manager {
		name = "baseline-" + name
	}
	return b.mgr.profileFromStart(ctx, time.Duration(2*listSeconds*float64(time.Second))+time.Second, filepath.Join(b.cfg.OutDir, name+".pprof"))
}

// scalePoint starts binary on the first n requests and measures it until it settles.
func (b *bench) scalePoint(ctx context.Context, run *scaleRun, n int, binary string, restart bool) (ScaleResult, error) {
	keys := run.shape.keys(n)
	res := ScaleResult{Requests: n, Keys: keys, Namespaces: run.shape.namespaces(n), Restart: restart}
	var err error
	if res.ListSeconds, err = b.timeList(ctx); err != nil {
		return res, err
	}
	if !restart {
		if res.RawWritesPerSec, err = b.rawObjs.writes(ctx, b.cfg.Workers, 5*time.Second); err != nil {
			return res, err
		}
	}
	w, err := b.open(ctx, run.nss[0])
	if err != nil {
		return res, err
	}
	phasedBefore := b.tracker.PhasedIn(run.nss)
	start := time.Now()
	b.binary = binary
	defer func() { b.binary = "" }()
	if err := b.launch(true); err != nil {
		return res, err
	}
	profiled := b.coldStartProfile(ctx, n, binary, restart, res.ListSeconds)
	poll := scrapeInterval(n)
	first, err := b.waitReconciles(ctx, 1, false, poll)
	if err != nil {
		return res, err
	}
	res.ColdStartSeconds = first.Sub(start).Seconds()
	if !restart {
		at, err := b.tracker.WaitPhasedIn(ctx, run.nss, phasedBefore+1, 60*time.Minute)
		if err != nil {
			return res, err
		}
		res.FirstPhaseSeconds = at.Sub(start).Seconds()
		if _, err := b.tracker.WaitPhasedIn(ctx, run.nss, n, 60*time.Minute); err != nil {
			return res, err
		}
	}
	settled, err := b.waitReconciles(ctx, keys, true, poll)
	if err != nil {
		return res, err
	}
	res.ReconcileSeconds = settled.Sub(start).Seconds()
	if err := profiled(); err != nil {
		return res, err
	}
	if res.Writes, err = w.close(ctx); err != nil {
		return res, err
	}
	// Per request written: a fresh run's new requests (the earlier points' were decided).
	res.WritesPerRequest = res.Writes.Controller / float64(max(1, n-phasedBefore))
	if res.RawWritesPerSec > 0 {
		res.WriteFloorSeconds = (res.Writes.Controller + res.Writes.Events) / res.RawWritesPerSec
	}
	if err := b.readMemory(ctx, &res, n, binary, restart); err != nil {
		return res, err
	}
	if !restart && binary == b.cfg.Manager {
		b.step("deadlock check on a scale namespace")
		if res.DeadlockCheck, err = b.deadlockCheck(ctx, run.nss[0], 5); err != nil {
			return res, err
		}
	}
	return res, b.stopManager()
}

// timeList times a fresh client's paged list of every LockRequest, decoded, as an informer
// lists them at start.
func (b *bench) timeList(ctx context.Context) (float64, error) {
	c, err := client.New(b.env.Config, client.Options{Scheme: framework.Scheme})
	if err != nil {
		return 0, err
	}
	t := time.Now()
	cont := ""
	for {
		var list locksv1.LockRequestList
		if err := c.List(ctx, &list, client.Limit(500), client.Continue(cont)); err != nil {
			return 0, fmt.Errorf("list lockrequests: %w", err)
		}
		if cont = list.Continue; cont == "" {
			return time.Since(t).Seconds(), nil
		}
	}
}

// scrapeInterval is how often the scale phase scrapes a manager on n requests: every 50 ms at
// 10,000, less often above (250 ms from 50,000). A scrape is not free: at 100,000 requests the
// metrics text has a series per held key and per namespace and phase, and twenty scrapes a
// second took the CPU the manager was being timed on; 250 ms is 2.5% of the cold start's
// list there.
func scrapeInterval(n int) time.Duration {
	return min(250*time.Millisecond, max(50*time.Millisecond, time.Duration(n)*5*time.Microsecond))
}

// waitReconciles waits until the manager's lock controller has reconciled at least n keys
// and, with drained, its queue is empty, scraping it every poll; it returns when it saw that.
func (b *bench) waitReconciles(ctx context.Context, n int, drained bool, poll time.Duration) (time.Time, error) {
	deadline := time.Now().Add(60 * time.Minute)
	for {
		c, err := b.mgr.counts(ctx)
		if err == nil && c.reconciles >= float64(n) && (!drained || c.lockDepth == 0) {
			return time.Now(), nil
		}
		select {
		case <-b.mgr.p.Done():
			return time.Time{}, b.mgr.exited(b.mgrLog.Name())
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(poll):
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%d reconciles with an empty queue not reached in 60 minutes", n)
		}
	}
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

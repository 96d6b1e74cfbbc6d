package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/memlimit"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// membersNamespace holds the membership Leases of the steady-state managers when
// Config.Replicas runs them active-active.
const membersNamespace = "bench-members"

// managerQPS raises the manager's client-side rate limit far above what this machine's API
// server can serve, so the limiter is never what a number measures.
const (
	managerQPS   = 10000
	managerBurst = 20000
	// waitLimit bounds any single wait for the manager; hitting it is a failure, not a slow
	// number.
	waitLimit = 2 * time.Minute
)

// managerProc is the real manager binary.
type managerProc struct {
	p *framework.Process
	// container is the memory cgroup it runs in (Config.Cgroup), nil without one.
	container  *container
	metricsURL string
	pprofURL   string // "" unless Config.ProfileSeconds is set
	http       *http.Client
	detection  bool
}

// launch starts the manager binary without waiting for it to work.
func (b *bench) launch(detection bool) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{
		"--metrics-bind-address=" + addr,
		"--health-probe-bind-address=0",
		"--kube-api-qps=" + strconv.Itoa(managerQPS),
		"--kube-api-burst=" + strconv.Itoa(managerBurst),
		"--deadlock-detection=" + strconv.FormatBool(detection),
	}
	pprofURL, pprofArgs, err := b.pprofArgs()
	if err != nil {
		return err
	}
	args = append(args, pprofArgs...)
	if b.topo.replicas > 1 && b.topo.leaderElect {
		// The measured manager starts alone and leads; startManager adds the standbys.
		args = append(args, b.leaderElectArgs()...)
	} else if b.topo.activeActive {
		// Active-active: the measured manager and replicas-1 peers (maybe none), all deciding;
		// each key's owner at once, the others after the backup delay.
		gen := int(b.names.Add(1))
		args = append(args, "--active-active", "--membership-namespace="+membersNamespace, fmt.Sprintf("--membership-id=steady-%d", gen))
		if err := b.startPeers(fmt.Sprintf("steady-%d", gen), detection, func(id string) []string {
			return []string{"--active-active", "--membership-namespace=" + membersNamespace, "--membership-id=" + id}
		}); err != nil {
			return err
		}
	}
	fmt.Fprintf(b.mgrLog, "\n===== %s starting manager (deadlock detection %t)\n", time.Now().Format(time.RFC3339), detection)
	binary, env := b.cfg.Manager, []string(nil)
	if b.binary != "" {
		binary = b.binary
	}
	limit, err := b.cfg.memLimitBytes()
	if err != nil {
		return err
	}
	var ctr *container
	if limit > 0 {
		// What each build's chart gives it from the container's memory limit: this one
		// MEMORY_LIMIT (the manager takes --memory-limit-ratio of it), a baseline from before
		// it GOMEMLIMIT, the whole limit.
		name := memlimit.Env
		if binary != b.cfg.Manager {
			name = "GOMEMLIMIT"
		}
		env = append(env, name+"="+strconv.FormatInt(limit, 10))
		if b.cfg.Cgroup {
			if ctr, err = newContainer(fmt.Sprintf("turnstile-bench-%d-%d", os.Getpid(), b.names.Add(1)), limit); err != nil {
				return err
			}
			if binary, args, err = ctr.command(binary, args); err != nil {
				_ = ctr.remove()
				return err
			}
			env = append(env, ctr.env())
		}
	}
	p, err := framework.StartProcessEnv(binary, b.kubeconfig, env, b.mgrLog, args...)
	if err != nil {
		if ctr != nil {
			_ = ctr.remove()
		}
		return err
	}
	b.mgr = &managerProc{p: p, container: ctr, metricsURL: "http://" + addr + "/metrics", pprofURL: pprofURL,
		http: &http.Client{Timeout: 10 * time.Second}, detection: detection}
	return nil
}

// pprofArgs are the flags that serve pprof from a manager when Config.ProfileSeconds is set,
// and the URL of its CPU profile; none otherwise.
func (b *bench) pprofArgs() (url string, args []string, err error) {
	if b.cfg.ProfileSeconds <= 0 {
		return "", nil, nil
	}
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	return "http://" + addr + "/debug/pprof/profile", []string{"--pprof-bind-address=" + addr}, nil
}

// profile starts a CPU profile of Config.ProfileSeconds of the manager, written to
// OutDir/name.pprof, and of each peer, to OutDir/name-<peer>.pprof; the returned func waits
// for them. Without profiling it does nothing. A profile longer than the work it covers only
// adds idle time, which has no samples.
func (b *bench) profile(ctx context.Context, name string) (wait func() error) {
	type target struct{ url, path string }
	var targets []target
	if b.mgr != nil && b.mgr.pprofURL != "" {
		targets = append(targets, target{b.mgr.pprofURL, name})
	}
	for _, p := range b.peers {
		if p.pprofURL != "" {
			targets = append(targets, target{p.pprofURL, name + "-" + p.id})
		}
	}
	done := make(chan error, len(targets))
	for _, t := range targets {
		go func() {
			done <- fetchProfile(ctx, fmt.Sprintf("%s?seconds=%d", t.url, b.cfg.ProfileSeconds),
				filepath.Join(b.cfg.OutDir, t.path+".pprof"))
		}()
	}
	return func() error {
		var errs []error
		for range targets {
			errs = append(errs, <-done)
		}
		return errors.Join(errs...)
	}
}

// profileFromStart records a CPU profile of d into path as soon as the manager's pprof
// endpoint answers (it starts serving within its first moments); the returned func waits for it.
func (m *managerProc) profileFromStart(ctx context.Context, d time.Duration, path string) (wait func() error) {
	done := make(chan error, 1)
	go func() {
		url := fmt.Sprintf("%s?seconds=%d", m.pprofURL, int(d.Round(time.Second)/time.Second))
		for {
			err := fetchProfile(ctx, url, path)
			if err == nil || ctx.Err() != nil {
				done <- err
				return
			}
			select {
			case <-m.p.Done():
				done <- err
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() error { return <-done }
}

func fetchProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile the manager: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile the manager: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// startManager starts the manager and returns once it has granted a lock: its caches are
// synced and its workers run.
func (b *bench) startManager(ctx context.Context, detection bool) error {
	if err := b.launch(detection); err != nil {
		return err
	}
	if err := b.warmup(ctx); err != nil {
		return err
	}
	if b.topo.replicas > 1 && b.topo.leaderElect {
		// It granted, so it leads: the others join as standbys.
		gen := int(b.names.Add(1))
		return b.startPeers(fmt.Sprintf("standby-%d", gen), detection, func(string) []string { return b.leaderElectArgs() })
	}
	return nil
}

// startPeers starts the topology's replicas-1 peers of the measured manager, named
// prefix-peer-<i>, and waits until each is ready (its caches synced), so no measurement window
// holds a peer's initial listing.
func (b *bench) startPeers(prefix string, detection bool, args func(id string) []string) error {
	for i := 1; i < b.topo.replicas; i++ {
		id := fmt.Sprintf("%s-peer-%d", prefix, i)
		peer, err := b.startReplica(id, append(args(id), "--deadlock-detection="+strconv.FormatBool(detection))...)
		if err != nil {
			return err
		}
		b.peers = append(b.peers, peer)
	}
	for _, p := range b.peers {
		if err := p.waitReady(); err != nil {
			return err
		}
	}
	return nil
}

// waitReady polls the replica's /readyz until it answers 200.
func (r *replica) waitReady() error {
	deadline := time.Now().Add(waitLimit)
	for {
		resp, err := r.http.Get(r.readyURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s answered %s", r.readyURL, resp.Status)
		}
		select {
		case <-r.p.Done():
			return fmt.Errorf("replica %s exited before it was ready: %w", r.id, r.p.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s not ready after %s (last error: %w)", r.id, waitLimit, err)
		}
	}
}

// leaderElectArgs run a manager with leader election, its Lease beside the membership Leases.
func (b *bench) leaderElectArgs() []string {
	return []string{"--leader-elect", "--leader-election-namespace=" + membersNamespace}
}

// warmup grants and releases one lock in its own namespace, and waits until the release is
// processed, so nothing of it spills into the next window.
func (b *bench) warmup(ctx context.Context) error {
	ns, err := b.namespace(ctx, "warmup")
	if err != nil {
		return err
	}
	lr := request(ns, b.name("warmup"), "bench/warmup", ".", "warmup", 1)
	if err := b.create(ctx, lr); err != nil {
		return err
	}
	// A manager that exits (a bad flag, a crash) fails the run now, not after waitLimit.
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	exited := b.mgr.p.Done() // read here: the goroutine may run after the manager is stopped
	go func() {
		select {
		case <-exited:
			cancel()
		case <-waitCtx.Done():
		}
	}()
	if _, err := b.tracker.WaitGranted(waitCtx, ns, lr.Name, waitLimit); err != nil {
		select {
		case <-b.mgr.p.Done():
			return fmt.Errorf("the manager exited before granting a free lock (see %s): %w", b.mgrLog.Name(), b.mgr.p.Err())
		default:
		}
		return fmt.Errorf("the manager never granted a free lock (see %s): %w", b.mgrLog.Name(), err)
	}
	if err := b.remove(ctx, ns, lr.Name); err != nil {
		return err
	}
	return b.waitReleased(ctx, ns)
}

// waitReleased waits until no ProjectLock of the namespace has a holder.
func (b *bench) waitReleased(ctx context.Context, ns string) error {
	deadline := time.Now().Add(waitLimit)
	for {
		var list locksv1.ProjectLockList
		if err := b.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		held := 0
		for i := range list.Items {
			if list.Items[i].Status.Held() {
				held++
			}
		}
		if held == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d ProjectLocks in %s still have a holder %s after their requests were deleted", held, ns, waitLimit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stopManager stops the manager with SIGTERM.
func (b *bench) stopManager() error {
	for _, p := range b.peers {
		if err := p.p.Stop(30 * time.Second); err != nil {
			return fmt.Errorf("stop peer %s: %w", p.id, err)
		}
	}
	b.peers = nil
	m := b.mgr
	b.mgr = nil
	err := m.p.Stop(30 * time.Second)
	if err != nil {
		err = fmt.Errorf("stop manager: %w", err)
	}
	if m.container != nil {
		// Also when it had exited already: the cgroup goes with it.
		err = errors.Join(err, m.container.remove())
	}
	return err
}

// exited is why the manager exited, with its cgroup's OOM kills when it ran in one.
func (m *managerProc) exited(log string) error {
	err := fmt.Errorf("the manager exited (see %s): %w", log, m.p.Err())
	if m.container != nil {
		if s, serr := m.container.stats(); serr == nil && s.OOMKills > 0 {
			err = fmt.Errorf("%w: the kernel killed it at its memory limit (%d OOM kills in its cgroup, peak %d MiB)", err, s.OOMKills, s.PeakBytes>>20)
		}
	}
	return err
}

// restartManager stops the manager and starts a new one.
func (b *bench) restartManager(ctx context.Context, detection bool) error {
	if err := b.stopManager(); err != nil {
		return err
	}
	return b.startManager(ctx, detection)
}

// heapInUse is the manager's Go heap in use, from its metrics.
func (m *managerProc) heapInUse(ctx context.Context) (int64, error) {
	c, err := m.counts(ctx)
	return int64(c.heapInUse), err
}

func (m *managerProc) rss() procStats {
	ps, _ := readProcStatus(m.p.Pid())
	return ps
}

// counts scrapes the manager's metrics endpoint and reads its CPU time.
func (m *managerProc) counts(ctx context.Context) (managerCounts, error) {
	c := managerCounts{pid: m.p.Pid()}
	err := scrapeText(ctx, m.http, m.metricsURL, func(name string, labels map[string]string, v float64) {
		switch {
		case name == "turnstile_write_conflicts_total":
			c.conflicts += v
		case name == "controller_runtime_reconcile_total" && labels["controller"] == "lock":
			c.reconciles += v
		case name == "turnstile_deadlock_checks_total" && labels["outcome"] == "checked":
			c.checks += v
		case name == "turnstile_deadlock_checks_total" && labels["outcome"] == "skipped":
			c.skips += v
		case name == "rest_client_requests_total" && labels["method"] == "GET":
			c.gets += v
		case name == "rest_client_requests_total":
			c.others += v
		case name == "workqueue_depth" && labels["name"] == "lock":
			c.lockDepth += v // one series per priority
		case name == "go_memstats_heap_inuse_bytes":
			c.heapInUse = v
		case name == "go_memstats_heap_alloc_bytes":
			c.heapAlloc = v
		case name == "go_gc_heap_allocs_objects_total":
			c.allocs = v
		case name == "go_gc_heap_allocs_bytes_total":
			c.allocBytes = v
		case name == "go_gc_cycles_total_gc_cycles_total":
			c.gcs = v
		}
	})
	if err != nil {
		return c, err
	}
	c.cpu, err = readCPU(m.p.Pid())
	return c, err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr := l.Addr().String()
	return strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
}

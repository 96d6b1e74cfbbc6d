package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/sharding"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// FailoverConfig sizes the failover phase: how long a hand-off stalls when a manager dies.
type FailoverConfig struct {
	// Replicas run active-active (--active-active); Kills times the owner of a busy key is
	// SIGKILLed just before its holder releases.
	Replicas int `json:"replicas"`
	Kills    int `json:"kills"`
	// BackupDelay and Lapse are the replicas' --backup-delay and --membership-lapse.
	BackupDelay Duration `json:"backupDelay"`
	Lapse       Duration `json:"lapse"`
	// LeaderElectionKills times the baseline: two replicas with leader election and a Lease of
	// LeaderElectionLease (15 s: what the Deployment had), the leader SIGKILLed.
	LeaderElectionKills int      `json:"leaderElectionKills"`
	LeaderElectionLease Duration `json:"leaderElectionLease"`
}

// FailoverResult is release → next Granted when the key's manager has just gone.
type FailoverResult struct {
	Replicas    int    `json:"replicas"`
	BackupDelay string `json:"backupDelay"`
	Lapse       string `json:"lapse"`
	// Kill: the owner of the key SIGKILLed, then the holder released.
	Kill Latency `json:"kill"`
	// KillConflicts and KillWrites are 409s and controller writes (lockrequests and
	// projectlocks) per hand-off, from the API server's counters.
	KillConflicts float64 `json:"killConflictsPerHandoff"`
	KillWrites    float64 `json:"killWritesPerHandoff"`
	// Rolling: each replica in turn stopped with SIGTERM as the holder of a key it owns
	// releases, as a rolling upgrade does.
	Rolling          Latency `json:"rolling"`
	RollingConflicts float64 `json:"rollingConflictsPerHandoff"`
	// LeaderElection: the leader of two replicas SIGKILLed, then the holder released.
	LeaderElection      Latency `json:"leaderElection"`
	LeaderElectionLease string  `json:"leaderElectionLease"`
}

// replica is one manager process of the failover phase.
type replica struct {
	id       string
	readyURL string // its /readyz: ready once its caches have synced
	*managerProc
}

// startReplica starts a manager with args; id names it in the log (and, active-active, in
// the membership).
func (b *bench) startReplica(id string, args ...string) (*replica, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	probePort, err := freePort()
	if err != nil {
		return nil, err
	}
	probeAddr := "127.0.0.1:" + strconv.Itoa(probePort)
	args = append([]string{
		"--metrics-bind-address=" + addr,
		"--health-probe-bind-address=" + probeAddr,
		"--kube-api-qps=" + strconv.Itoa(managerQPS),
		"--kube-api-burst=" + strconv.Itoa(managerBurst),
	}, args...)
	pprofURL, pprofArgs, err := b.pprofArgs()
	if err != nil {
		return nil, err
	}
	args = append(args, pprofArgs...)
	fmt.Fprintf(b.mgrLog, "\n===== %s starting replica %s %v\n", time.Now().Format(time.RFC3339), id, args)
	p, err := framework.StartProcess(b.cfg.Manager, b.kubeconfig, b.mgrLog, args...)
	if err != nil {
		return nil, err
	}
	return &replica{id: id, readyURL: "http://" + probeAddr + "/readyz", managerProc: &managerProc{p: p, metricsURL: "http://" + addr + "/metrics", pprofURL: pprofURL,
		http: &http.Client{Timeout: 10 * time.Second}}}, nil
}

// gauge reads one unlabelled sample from the replica's metrics; ok is false when absent.
func (r *replica) gauge(ctx context.Context, name string, labels map[string]string) (float64, bool) {
	v, ok := 0.0, false
	_ = scrapeText(ctx, r.http, r.metricsURL, func(n string, l map[string]string, x float64) {
		if n != name {
			return
		}
		for k, want := range labels {
			if l[k] != want {
				return
			}
		}
		v, ok = x, true
	})
	return v, ok
}

// poll calls cond every 20 ms until it is true, for at most waitLimit.
func poll(ctx context.Context, what string, cond func() bool) error {
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: gave up after %s", what, waitLimit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// failover runs the phase: the active-active kills and rolling restart, then the
// leader-election baseline.
func (b *bench) failover(ctx context.Context) (FailoverResult, error) {
	fc := b.cfg.Failover
	res := FailoverResult{Replicas: fc.Replicas, BackupDelay: fc.BackupDelay.D().String(), Lapse: fc.Lapse.D().String(),
		LeaderElectionLease: fc.LeaderElectionLease.D().String()}
	var err error
	b.step(fmt.Sprintf("failover: %d active-active replicas, %d SIGKILLs of a busy key's owner, then a rolling restart", fc.Replicas, fc.Kills))
	if err = b.activeActive(ctx, &res); err != nil {
		return res, fmt.Errorf("active-active: %w", err)
	}
	b.step(fmt.Sprintf("failover baseline: 2 replicas with leader election (%s lease), %d SIGKILLs of the leader", fc.LeaderElectionLease.D(), fc.LeaderElectionKills))
	if res.LeaderElection, err = b.leaderFailover(ctx); err != nil {
		return res, fmt.Errorf("leader election: %w", err)
	}
	return res, nil
}

// busyKey puts a holder and a queued waiter on a key owned (among members) by owner, and
// returns their names once the holder is Granted and the waiter has a phase.
func (b *bench) busyKey(ctx context.Context, ns, owner string, members []string) (holder, waiter string, err error) {
	target := locksv1.LockTarget{Repo: "bench/failover", Workspace: "default"}
	for i := 0; ; i++ {
		target.Path = fmt.Sprintf("stack-%d-%d", b.names.Add(1), i)
		if owner == "" || sharding.Owner(members, ns+"/"+lockkey.Name(target)) == owner {
			break
		}
	}
	holder, waiter = b.name("holder"), b.name("waiter")
	defer func() {
		// The waiter's arrival also queued the key on every backup, a backup delay later: let
		// that pass, or a backup decides the release early and the stall reads short.
		if err == nil {
			time.Sleep(b.cfg.Failover.BackupDelay.D() + 200*time.Millisecond)
		}
	}()
	if err := b.create(ctx, request(ns, holder, target.Repo, target.Path, "alice", 1)); err != nil {
		return "", "", err
	}
	if _, err := b.tracker.WaitGranted(ctx, ns, holder, waitLimit); err != nil {
		return "", "", err
	}
	if err := b.create(ctx, request(ns, waiter, target.Repo, target.Path, "bob", 2)); err != nil {
		return "", "", err
	}
	return holder, waiter, b.tracker.WaitPhased(ctx, ns, waiter, waitLimit)
}

// handOff releases holder and returns how long until waiter was seen Granted.
func (b *bench) handOff(ctx context.Context, ns, holder, waiter string, limit time.Duration) (time.Duration, error) {
	t0 := time.Now()
	if err := b.remove(ctx, ns, holder); err != nil {
		return 0, err
	}
	at, err := b.tracker.WaitGranted(ctx, ns, waiter, limit)
	if err != nil {
		return 0, err
	}
	return at.Sub(t0), b.remove(ctx, ns, waiter)
}

func (b *bench) activeActive(ctx context.Context, res *FailoverResult) error {
	fc := b.cfg.Failover
	ns, err := b.namespace(ctx, "failover")
	if err != nil {
		return err
	}
	f := &fleet{b: b, prefix: "replica", args: func(id string) []string {
		return []string{"--active-active", "--membership-namespace=" + ns, "--membership-id=" + id,
			"--backup-delay=" + fc.BackupDelay.D().String(), "--membership-lapse=" + fc.Lapse.D().String()}
	}}
	defer f.stopAll()
	a := &activeActiveRun{b: b, ns: ns, f: f, lapse: fc.Lapse.D()}
	for range fc.Replicas {
		if err := f.start(); err != nil {
			return err
		}
	}
	if err := a.settled(ctx, time.Now()); err != nil {
		return err
	}
	// A hand-off with no one dying first: it must be granted, and shows the steady state.
	if h, w, err := b.busyKey(ctx, ns, "", nil); err != nil {
		return err
	} else if _, err := b.handOff(ctx, ns, h, w, waitLimit); err != nil {
		return err
	}

	var kills, rolls []time.Duration
	var killConflicts, killWrites, rollConflicts float64
	for i := range fc.Kills {
		lat, writes, err := a.kill(ctx, i)
		if err != nil {
			return err
		}
		kills = append(kills, lat)
		killConflicts += writes.Conflicts
		// The harness's release and delete of the waiter are subtracted already.
		killWrites += writes.Controller
	}
	for range fc.Replicas {
		lat, writes, err := a.roll(ctx)
		if err != nil {
			return err
		}
		rolls = append(rolls, lat)
		rollConflicts += writes.Conflicts
	}
	res.Kill, res.Rolling = summarize(kills), summarize(rolls)
	res.KillConflicts = ratio(killConflicts, float64(len(kills)))
	res.KillWrites = ratio(killWrites, float64(len(kills)))
	res.RollingConflicts = ratio(rollConflicts, float64(len(rolls)))
	return nil
}

// activeActiveRun is the active-active phase's fleet and what its steps share.
type activeActiveRun struct {
	b     *bench
	ns    string
	f     *fleet
	lapse time.Duration
}

func (a *activeActiveRun) ids() []string {
	out := make([]string, len(a.f.live))
	for i, r := range a.f.live {
		out[i] = r.id
	}
	return out
}

// settled: every replica counts exactly the running ones (a killed one has lapsed).
func (a *activeActiveRun) settled(ctx context.Context, since time.Time) error {
	return poll(ctx, "the replicas to agree on the membership", func() bool {
		if time.Since(since) < a.lapse+time.Second {
			return false
		}
		for _, r := range a.f.live {
			if n, ok := r.gauge(ctx, "turnstile_membership_live_members", nil); !ok || int(n) != len(a.f.live) {
				return false
			}
		}
		return true
	})
}

// busyOn makes a key victim owns busy (a holder and a waiter) and opens a window on it.
func (a *activeActiveRun) busyOn(ctx context.Context, victim *replica) (holder, waiter string, w *window, err error) {
	if holder, waiter, err = a.b.busyKey(ctx, a.ns, victim.id, a.ids()); err != nil {
		return "", "", nil, err
	}
	w, err = a.b.open(ctx, a.ns)
	return holder, waiter, w, err
}

// kill SIGKILLs the i-th victim while a key it owns is busy, measures the hand-off on that
// key, and starts a replacement once the victim has lapsed.
func (a *activeActiveRun) kill(ctx context.Context, i int) (time.Duration, Writes, error) {
	victim := a.f.live[i%len(a.f.live)]
	holder, waiter, w, err := a.busyOn(ctx, victim)
	if err != nil {
		return 0, Writes{}, err
	}
	_ = victim.p.Kill()
	killed := time.Now()
	a.f.remove(victim)
	lat, err := a.b.handOff(ctx, a.ns, holder, waiter, waitLimit)
	if err != nil {
		return 0, Writes{}, fmt.Errorf("kill %d of %s: %w", i+1, victim.id, err)
	}
	writes, err := w.close(ctx)
	if err != nil {
		return 0, Writes{}, err
	}
	if err := a.f.start(); err != nil {
		return 0, Writes{}, err
	}
	return lat, writes, a.settled(ctx, killed)
}

// roll stops the oldest replica gracefully while a key it owns is busy, measures the hand-off
// on that key, and starts a replacement.
func (a *activeActiveRun) roll(ctx context.Context) (time.Duration, Writes, error) {
	victim := a.f.live[0]
	holder, waiter, w, err := a.busyOn(ctx, victim)
	if err != nil {
		return 0, Writes{}, err
	}
	stopped := make(chan error, 1)
	go func() { stopped <- victim.p.Stop(30 * time.Second) }()
	lat, err := a.b.handOff(ctx, a.ns, holder, waiter, waitLimit)
	if err != nil {
		return 0, Writes{}, fmt.Errorf("rolling restart of %s: %w", victim.id, err)
	}
	a.f.remove(victim)
	if err := <-stopped; err != nil {
		return 0, Writes{}, fmt.Errorf("rolling restart: %s did not stop cleanly: %w", victim.id, err)
	}
	writes, err := w.close(ctx)
	if err != nil {
		return 0, Writes{}, err
	}
	if err := a.f.start(); err != nil {
		return 0, Writes{}, err
	}
	return lat, writes, a.settled(ctx, time.Time{})
}

// leaderFailover is the baseline: two replicas with leader election, the leader SIGKILLed
// just before the holder of a busy key releases.
func (b *bench) leaderFailover(ctx context.Context) (Latency, error) {
	fc := b.cfg.Failover
	ns, err := b.namespace(ctx, "leaderfailover")
	if err != nil {
		return Latency{}, err
	}
	lease := fc.LeaderElectionLease.D()
	// The Deployment's ratios: 15 s / 10 s / 2 s.
	args := []string{"--leader-elect", "--leader-election-namespace=" + ns,
		"--leader-elect-lease-duration=" + lease.String(),
		"--leader-elect-renew-deadline=" + (lease * 2 / 3).String(),
		"--leader-elect-retry-period=" + (lease * 2 / 15).String()}
	f := &fleet{b: b, prefix: "elector", args: func(string) []string { return args }}
	defer f.stopAll()
	start := f.start
	leaderStatus := func(r *replica) (float64, bool) {
		return r.gauge(ctx, "leader_election_master_status", map[string]string{"name": "turnstile.locks.turnstile.dev"})
	}
	var leader *replica
	// roles: one leads, every other stands by (its status metric says 0).
	roles := func() error {
		return poll(ctx, "one leader and a standby", func() bool {
			leader = nil
			for _, r := range f.live {
				v, ok := leaderStatus(r)
				if !ok {
					return false
				}
				if v == 1 {
					leader = r
				}
			}
			return leader != nil
		})
	}
	for range 2 {
		if err := start(); err != nil {
			return Latency{}, err
		}
	}
	var lat []time.Duration
	for i := range fc.LeaderElectionKills {
		if err := roles(); err != nil {
			return Latency{}, err
		}
		holder, waiter, err := b.busyKey(ctx, ns, "", nil)
		if err != nil {
			return Latency{}, err
		}
		_ = leader.p.Kill()
		f.remove(leader)
		d, err := b.handOff(ctx, ns, holder, waiter, 2*lease+waitLimit)
		if err != nil {
			return Latency{}, fmt.Errorf("kill %d of the leader: %w", i+1, err)
		}
		lat = append(lat, d)
		if err := start(); err != nil {
			return Latency{}, err
		}
	}
	if len(lat) == 0 {
		return Latency{}, errors.New("no leader was killed")
	}
	return summarize(lat), nil
}

// fleet is the replicas one failover run starts, numbered as they start; stopAll ends those
// still running.
type fleet struct {
	b      *bench
	prefix string
	args   func(id string) []string
	n      int
	live   []*replica
}

func (f *fleet) start() error {
	f.n++
	id := fmt.Sprintf("%s-%d", f.prefix, f.n)
	r, err := f.b.startReplica(id, f.args(id)...)
	if err != nil {
		return err
	}
	f.live = append(f.live, r)
	return nil
}

// remove forgets a replica that was killed or stopped.
func (f *fleet) remove(r *replica) {
	f.live = slices.DeleteFunc(f.live, func(x *replica) bool { return x == r })
}

func (f *fleet) stopAll() {
	for _, r := range f.live {
		_ = r.p.Stop(30 * time.Second)
	}
}

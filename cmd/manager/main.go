// Command manager runs the Turnstile operator: the lock-key, CommandLock and retention
// controllers, deadlock detection, health probes and the metrics endpoint.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"
	_ "time/tzdata" // the IANA zone database, for freeze windows' timeZone: the image has none

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/cache"
	"github.com/turnstile-dev/turnstile/internal/compat"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/deadlock"
	"github.com/turnstile-dev/turnstile/internal/fleet/hub"
	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/lockmetrics"
	"github.com/turnstile-dev/turnstile/internal/memlimit"
	"github.com/turnstile-dev/turnstile/internal/metricsauth"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/sharding"
	"github.com/turnstile-dev/turnstile/internal/version"
	"github.com/turnstile-dev/turnstile/internal/workload"
	turnstile "github.com/turnstile-dev/turnstile/pkg/client"
)

type options struct {
	metricsAddr, probeAddr          string
	pprofAddr                       string
	metricsSecure                   bool
	leaderElect                     bool
	leaderElectionID, leaderElectNS string
	leaseDuration, renewDeadline    time.Duration
	retryPeriod                     time.Duration
	qps                             float64
	burst                           int
	workers                         int
	cfg                             queue.Config
	flags                           queue.FreezeFlags
	retention                       time.Duration
	refreshRate                     float64
	deadlockPolicy                  deadlock.Policy
	deadlockScan                    time.Duration
	deadlockDetection               bool
	undecidedBound                  time.Duration
	activeActive                    bool
	membership                      sharding.Config
	handover                        time.Duration
	gateWorkloads                   bool
	memoryReserve                   resource.Quantity
	memory                          memlimit.Limit
	hubKubeconfig, clusterName      string
	hubLease                        time.Duration
	fleetGrace, maxClockSkew        time.Duration
}

func parseFlags(args []string) (options, zap.Options, error) {
	o := options{cfg: queue.DefaultConfig(), deadlockPolicy: deadlock.PolicyNewest}
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage of manager:")
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "\n$MEMORY_LIMIT is the container's memory limit (the chart sets it from limits.memory): the Go runtime's soft memory limit is that less --memory-limit-reserve, so the heap is collected before the container runs out. $GOMEMLIMIT, when set, is used instead.")
	}
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address the metrics endpoint binds to; \"0\" disables it.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", false, "Serve metrics over HTTPS with Kubernetes authentication and authorization (on in the deployed configuration).")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "Address net/http/pprof binds to, e.g. 127.0.0.1:8082; \"0\" (the default) disables it. Profiles show internals: keep it off a public address.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Elect one active manager among replicas. For efficiency only: safety never depends on it.")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "turnstile.locks.turnstile.dev", "Name of the leader election Lease.")
	fs.StringVar(&o.leaderElectNS, "leader-election-namespace", os.Getenv("POD_NAMESPACE"), "Namespace of the leader election Lease (default: $POD_NAMESPACE, else the namespace of the pod's ServiceAccount mount).")
	fs.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long followers wait after the leader's last renewal before taking over.")
	fs.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader retries renewing before it stops leading.")
	fs.DurationVar(&o.retryPeriod, "leader-elect-retry-period", 2*time.Second, "How often candidates try to acquire or renew the leader Lease.")
	fs.Float64Var(&o.qps, "kube-api-qps", 200, "Client-side QPS limit towards the API server.")
	fs.IntVar(&o.burst, "kube-api-burst", 400, "Client-side burst limit towards the API server.")
	fs.IntVar(&o.workers, "workers", 8, "Lock keys reconciled in parallel.")
	fs.DurationVar(&o.cfg.DefaultTTL, "default-ttl", o.cfg.DefaultTTL, "Grant duration of requests without spec.ttl.")
	fs.DurationVar(&o.cfg.MaxTTL, "max-ttl", o.cfg.MaxTTL, "Longest spec.ttl accepted, counted from the grant or a renewal; longer requests fail with reason Invalid, longer renewals are refused.")
	fs.DurationVar(&o.cfg.AgingStep, "aging-step", o.cfg.AgingStep, "Waiting this long lifts a request one priority (never above High); 0 disables aging.")
	fs.IntVar(&o.cfg.QueueCap, "queue-cap", o.cfg.QueueCap, "Most requests that may wait for one key; the next fails with reason QueueFull. 0: no cap.")
	fs.DurationVar(&o.retention, "finished-retention", time.Hour, "Finished requests are deleted this long after they finish; 0 keeps them.")
	fs.Float64Var(&o.refreshRate, "position-refresh-rate", 20, "Most queue-position refresh writes per second per key.")
	fs.BoolVar(&o.flags.DisableApply, "disable-apply", false, "Freeze apply always (highest precedence, like Atlantis --disable-apply).")
	fs.BoolVar(&o.flags.DisableGlobalApplyLock, "disable-global-apply-lock", false, "Ignore CommandLocks for apply (like Atlantis --disable-global-apply-lock).")
	fs.Var(policyFlag{&o.deadlockPolicy}, "deadlock-victim", "Which request of a deadlock cycle fails: newest, oldest or lowest-priority.")
	fs.DurationVar(&o.deadlockScan, "deadlock-scan-interval", 30*time.Second, "Period of the full deadlock scan (a safety net; cycles are also checked when a request starts waiting). 0 disables the scan.")
	fs.DurationVar(&o.undecidedBound, "undecided-key-bound", controller.DefaultUndecidedBound, "How long a lock key may show work (a release asked for, a grant to write, an expiry, a free key with waiters, a request without a status) without a decision before the watchdog decides it from a live read, emits an Undecided event and counts it in turnstile_undecided_keys_total. The watchdog looks every third of this, at the cache only. 0 turns it off.")
	fs.BoolVar(&o.deadlockDetection, "deadlock-detection", true, "Detect wait-for cycles and fail one victim per cycle (see --deadlock-victim). false turns detection off: a cycle then lasts until a waitTimeout or ttl ends it.")
	fs.BoolVar(&o.activeActive, "active-active", false, "Run every replica active: the owner of a key (rendezvous hashing over the live members) decides it at once, every other replica --backup-delay later, so a dead replica delays hand-offs by about that much. Excludes --leader-elect.")
	fs.StringVar(&o.membership.Namespace, "membership-namespace", os.Getenv("POD_NAMESPACE"), "Namespace of the membership Leases of --active-active (default: $POD_NAMESPACE).")
	fs.StringVar(&o.membership.Identity, "membership-id", "", "This replica's member identity (default: $POD_NAME or the host name, plus a random suffix: each process is a new member).")
	fs.DurationVar(&o.membership.Renew, "membership-renew-interval", time.Second, "How often each replica renews its membership Lease.")
	fs.DurationVar(&o.membership.Lapse, "membership-lapse", 3*time.Second, "How long a membership Lease may go unrenewed before the replica stops counting as a member and its keys move to the others.")
	fs.DurationVar(&o.membership.Backup, "backup-delay", 300*time.Millisecond, "How long a replica waits before deciding a key another live replica owns: the longest a dead owner delays a hand-off before its membership lapses.")
	fs.DurationVar(&o.handover, "shutdown-handover", time.Second, "With --active-active, how long a stopping replica keeps working after deleting its membership Lease, while the others take its keys over.")
	o.memoryReserve = *resource.NewQuantity(memlimit.DefaultReserve, resource.BinarySI)
	fs.Var(quantityFlag{&o.memoryReserve}, "memory-limit-reserve", "What the Go runtime's soft memory limit leaves of $MEMORY_LIMIT, the container's memory limit, for what the runtime does not count: the binary's page cache, which the container is charged for too (at most half the limit is left). Ignored when $GOMEMLIMIT is set or $MEMORY_LIMIT is not.")
	fs.BoolVar(&o.gateWorkloads, "gate-workloads", true, "Take the lock of every Pod and Job annotated locks.turnstile.dev/lock, and let it run once granted (docs/gated-workloads.md).")
	fs.StringVar(&o.hubKubeconfig, "hub-kubeconfig", "", "Run as a fleet's spoke agent (docs/fleet.md): the kubeconfig of the hub, as this spoke's identity there. The hub decides every lock of this cluster; this manager mirrors the cluster's LockRequests to it and copies its decisions back. Needs --cluster-name.")
	fs.StringVar(&o.clusterName, "cluster-name", "", "This cluster's name in the fleet (a DNS-1123 label, unique in the fleet), with --hub-kubeconfig.")
	fs.DurationVar(&o.hubLease, "hub-lease-duration", spoke.DefaultLeaseDuration, "With --hub-kubeconfig, the duration of the spoke's holder Lease on the hub: a spoke that stops renewing it loses its locks this long after its last renewal.")
	fs.DurationVar(&o.fleetGrace, "fleet-grace", skew.DefaultGrace, "With --hub-kubeconfig, how long a running holder's stop may take when the hub is unreachable (a gated Pod's deletion grace): the spoke stops its holders this long, plus 3s and --max-clock-skew, before the hub can hand their locks on; at most --hub-lease-duration/2 - 3s - --max-clock-skew.")
	fs.DurationVar(&o.maxClockSkew, "max-clock-skew", skew.DefaultMaxSkew, "With --hub-kubeconfig, the largest clock skew with the hub the spoke accepts, measured from its Lease renewals: past it the spoke stops every holder and lets nothing go (at least 1.5s).")
	zopts := zap.Options{Development: false}
	zopts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, zopts, err
	}
	err := o.validate()
	return o, zopts, err
}

// validate checks the flags together, once parsed, and fills in what defaults to others.
func (o *options) validate() error {
	if o.leaderElect && (o.retryPeriod <= 0 || o.retryPeriod >= o.renewDeadline || o.renewDeadline >= o.leaseDuration) {
		return fmt.Errorf("leader election needs 0 < --leader-elect-retry-period (%s) < --leader-elect-renew-deadline (%s) < --leader-elect-lease-duration (%s)", o.retryPeriod, o.renewDeadline, o.leaseDuration)
	}
	if o.undecidedBound < 0 {
		return fmt.Errorf("--undecided-key-bound must not be negative (0 turns the watchdog off), got %s", o.undecidedBound)
	}
	if o.activeActive {
		if o.leaderElect {
			return errors.New("--active-active and --leader-elect exclude each other: pick one")
		}
		if o.membership.Identity == "" {
			o.membership.Identity = defaultIdentity()
		}
		if err := o.membership.Validate(); err != nil {
			return fmt.Errorf("--active-active: %w (set --membership-namespace, or $POD_NAMESPACE)", err)
		}
	}
	if o.memoryReserve.Sign() < 0 {
		return fmt.Errorf("--memory-limit-reserve (%s) must not be negative", o.memoryReserve.String())
	}
	if (o.hubKubeconfig == "") != (o.clusterName == "") {
		return errors.New("a fleet's spoke needs both --hub-kubeconfig and --cluster-name")
	}
	if o.clusterName != "" {
		if errs := validation.IsDNS1123Label(o.clusterName); len(errs) > 0 {
			return fmt.Errorf("--cluster-name %q: %s", o.clusterName, strings.Join(errs, "; "))
		}
		if o.activeActive {
			return errors.New("--hub-kubeconfig and --active-active exclude each other: a spoke decides nothing (run its replicas with --leader-elect)")
		}
		if o.hubLease < 3*time.Second {
			return fmt.Errorf("--hub-lease-duration (%s) must be at least 3s", o.hubLease)
		}
		if err := o.fleetSettings().Validate(); err != nil {
			return err
		}
	}
	if o.cfg.DefaultTTL <= 0 || o.cfg.MaxTTL <= 0 || o.cfg.DefaultTTL > o.cfg.MaxTTL {
		return fmt.Errorf("--default-ttl (%s) must be positive and at most --max-ttl (%s)", o.cfg.DefaultTTL, o.cfg.MaxTTL)
	}
	return nil
}

// fleetSettings are the spoke's partition rule's flags.
func (o options) fleetSettings() skew.Settings {
	return skew.Settings{Lease: o.hubLease, Grace: o.fleetGrace, MaxSkew: o.maxClockSkew}
}

func main() {
	o, zopts, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zopts)))
	// Before anything else allocates much: the runtime's soft limit from the container's.
	limit, err := memlimit.Set(os.Getenv, o.memoryReserve.Value(), debug.SetMemoryLimit)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	o.memory = limit
	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		ctrl.Log.Error(err, "manager exited")
		os.Exit(1)
	}
}

// quantityFlag is a flag given as a resource quantity ("64Mi").
type quantityFlag struct{ q *resource.Quantity }

func (f quantityFlag) String() string {
	if f.q == nil {
		return ""
	}
	return f.q.String()
}

func (f quantityFlag) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("not a quantity such as 64Mi: %w", err)
	}
	*f.q = q
	return nil
}

// policyFlag is --deadlock-victim: parsed into a deadlock.Policy once, and its default shown
// (and read by the chart's test of its values) like any other flag's.
type policyFlag struct{ p *deadlock.Policy }

func (f policyFlag) String() string {
	if f.p == nil {
		return ""
	}
	return string(*f.p)
}

func (f policyFlag) Set(s string) (err error) {
	*f.p, err = deadlock.ParsePolicy(s)
	return err
}

// defaultIdentity is $POD_NAME or the host name, lower-cased, plus a random suffix.
func defaultIdentity() string {
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	name = strings.ToLower(name)
	if name == "" {
		name = "manager"
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	return fmt.Sprintf("%s-%x", name, suffix)
}

func run(ctx context.Context, o options) error {
	log := ctrl.Log.WithName("setup")
	mgr, err := newManager(o)
	if err != nil {
		return err
	}
	reporter, err := reportCluster(mgr, log)
	if err != nil {
		return err
	}
	setup := controller.SetupOptions{
		Queue:               o.cfg,
		Freeze:              o.flags,
		Workers:             o.workers,
		Retention:           o.retention,
		PositionRefreshRate: o.refreshRate,
		DeadlockPolicy:      o.deadlockPolicy,
		DeadlockScan:        o.deadlockScan,
		UndecidedBound:      o.undecidedBound,
		Registry:            metrics.Registry,

		DisableDeadlockDetection: !o.deadlockDetection,
	}
	if o.activeActive {
		members, err := joinMembership(mgr, o, log)
		if err != nil {
			return err
		}
		setup.Router = members
		ctx = handOverOnStop(ctx, members, o.handover)
	}
	// The gated workloads' cache: the workload controllers', and a spoke agent's, which waits in
	// it for a holder it stopped to be gone.
	var gated ctrlcache.Cache
	if o.gateWorkloads {
		if gated, err = workload.NewGatedCache(mgr); err != nil {
			return err
		}
	}
	if o.hubKubeconfig != "" {
		if err := setupSpoke(mgr, o, setup, gated); err != nil {
			return err
		}
	} else {
		if err := controller.Setup(ctx, mgr, setup); err != nil {
			return err
		}
		if err := setupHub(ctx, mgr, setup.Router, log); err != nil {
			return err
		}
	}
	if o.gateWorkloads {
		opts := []workload.Option{workload.WithGatedCache(gated)}
		if o.hubKubeconfig != "" {
			// A spoke stops its holders --fleet-grace before the hub can hand their locks on.
			opts = append(opts, workload.WithStopGrace(o.fleetGrace))
		}
		if err := workload.SetupWithManager(mgr, opts...); err != nil {
			return err
		}
	}
	if err := addChecks(mgr); err != nil {
		return err
	}
	if err := mgr.Add(reporter); err != nil {
		return err
	}
	// version is the release (make release stamps it), or "(devel)".
	build := version.Get()
	// memoryLimit is the runtime's soft memory limit (math.MaxInt64 when there is none), from
	// memoryLimitSource: $MEMORY_LIMIT, the container's limit (containerMemoryLimit) that the
	// chart passes, less --memory-limit-reserve; or $GOMEMLIMIT.
	log.Info("starting manager", "version", build.Version, "commit", build.Commit, "goVersion", build.GoVersion, "leaderElection", o.leaderElect, "activeActive", o.activeActive,
		"identity", o.membership.Identity, "fleetSpoke", o.clusterName, "metrics", o.metricsAddr, "probes", o.probeAddr,
		"memoryLimit", debug.SetMemoryLimit(-1), "memoryLimitSource", o.memory.Source, "containerMemoryLimit", o.memory.Container)
	return mgr.Start(ctx)
}

// reportCluster says, in one line, which Kubernetes version the manager runs on and what of
// Turnstile's it serves, and refuses to go on, saying what to do, when Turnstile's CRDs are
// missing (rather than a controller's "no matches for kind"). The Reporter it returns then
// records the same as an Event on the manager's Pod and the turnstile_cluster_info metric,
// with the admission policies it finds running (compat.Probe).
// setupSpoke runs the manager as a fleet's spoke (docs/fleet.md): the agent, and of the
// controllers only what decides nothing (controller.SetupSpoke). gated is the gated workloads'
// cache (nil without --gate-workloads): the agent waits in it for the holders it stops.
func setupSpoke(mgr ctrl.Manager, o options, setup controller.SetupOptions, gated ctrlcache.Cache) error {
	hub, err := clientcmd.BuildConfigFromFlags("", o.hubKubeconfig)
	if err != nil {
		return fmt.Errorf("--hub-kubeconfig: %w", err)
	}
	hub.QPS, hub.Burst = float32(o.qps), o.burst
	turnstile.BoundRetryAfter(hub, time.Second)
	if err := controller.SetupSpoke(mgr, setup); err != nil {
		return err
	}
	_, err = spoke.SetupWithManager(mgr, spoke.Options{Cluster: o.clusterName, Hub: hub, Settings: o.fleetSettings(), Workloads: gated})
	return err
}

// setupHub runs the fleet view (internal/fleet/hub) on a manager that is not a spoke: every
// such manager is a hub to the spokes its members ConfigMap lists, and without config/fleet it
// keeps no Spoke. An API server that does not serve Spokes (CRDs of an older release) turns it
// off, saying so once.
func setupHub(ctx context.Context, mgr ctrl.Manager, router sharding.Router, log logr.Logger) error {
	gvk := locksv1.GroupVersion.WithKind("Spoke")
	if _, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
		if meta.IsNoMatchError(err) {
			log.Info("the API server serves no Spokes (install this release's CRDs): the fleet view is off")
			return nil
		}
		return fmt.Errorf("the Spoke resource: %w", err)
	}
	if err := hub.NewSpokeReconciler(mgr.GetClient(), hub.WithRouter(router)).SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if err := metrics.Registry.Register(hub.NewCollector(mgr.GetCache(), nil)); err != nil {
		return fmt.Errorf("register fleet metrics: %w", err)
	}
	return nil
}

func reportCluster(mgr ctrl.Manager, log logr.Logger) (*compat.Reporter, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	cluster, err := compat.Discover(dc)
	if err != nil {
		return nil, err
	}
	log.Info("kubernetes", "version", cluster.Version.Describe(), "supported", cluster.Version.Supported(), "range", compat.Range(),
		"mutatingAdmissionPolicy", cluster.MutatingDescription())
	if err := cluster.CheckInstalled(); err != nil {
		return nil, err
	}
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "default"
	}
	return compat.NewReporter(metrics.Registry, &compat.Reporter{
		Cluster:   cluster,
		Client:    mgr.GetClient(),
		Namespace: ns,
		Recorder:  mgr.GetEventRecorder("turnstile"),
		Regarding: compat.Pod(os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")),
		Log:       ctrl.Log.WithName("cluster"),
	})
}

// newManager makes the controller-runtime manager: its client, cache, metrics endpoint,
// probes and (with --leader-elect) leader election.
func newManager(o options) (ctrl.Manager, error) {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	// A starting API server answers 503 Retry-After: 5: after its restart the manager would
	// sleep through seconds of a server that is back (docs/faults.md).
	turnstile.BoundRetryAfter(cfg, time.Second)

	metricsOpts := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.metricsSecure}
	if o.metricsSecure {
		metricsOpts.FilterProvider = metricsauth.Filter
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        controller.NewScheme(),
		Cache:                         cacheOptions(),
		NewCache:                      cache.New,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        o.probeAddr,
		PprofBindAddress:              o.pprofAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              o.leaderElectionID,
		LeaderElectionNamespace:       o.leaderElectNS,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &o.leaseDuration,
		RenewDeadline:                 &o.renewDeadline,
		RetryPeriod:                   &o.retryPeriod,
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	return mgr, nil
}

// cacheOptions are the manager's cache's options: internal/cache's, and of ConfigMaps only the
// fleet's members (internal/fleet/hub).
func cacheOptions() ctrlcache.Options {
	o := cache.Options()
	o.ByObject = map[client.Object]ctrlcache.ByObject{hub.CacheObject(): hub.CacheOptions()}
	return o
}

// joinMembership adds this replica's membership (--active-active) to mgr, with its metric.
func joinMembership(mgr ctrl.Manager, o options, log logr.Logger) (*sharding.Membership, error) {
	members := sharding.New(o.membership, mgr.GetClient(), mgr.GetCache(), nil)
	members.OnChange(func(live []string) { log.Info("membership changed", "live", live) })
	if err := metrics.Registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "turnstile_membership_live_members",
		Help: "Live members (active-active replicas) as this replica sees them.",
	}, func() float64 { return float64(len(members.Live())) })); err != nil {
		return nil, fmt.Errorf("register membership metric: %w", err)
	}
	return members, mgr.Add(members)
}

// addChecks registers the holder metrics, the liveness and the readiness checks.
func addChecks(mgr ctrl.Manager) error {
	// When each key's holder was granted it, read from the cache at scrape time (the
	// TurnstileLockHeldTooLong alert).
	if err := metrics.Registry.Register(lockmetrics.NewHolderCollector(mgr.GetCache())); err != nil {
		return fmt.Errorf("register lock metrics: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("caches", controller.CachesSynced(mgr.GetCache()))
}

// handOverOnStop returns a context that ends handover after ctx: when the stop signal comes,
// the replica first deletes its membership Lease, so the others own its keys as soon as they see
// that, and goes on deciding its own keys until they have (a rolling upgrade never stalls).
func handOverOnStop(ctx context.Context, members *sharding.Membership, handover time.Duration) context.Context {
	mgrCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer cancel()
		select {
		case <-ctx.Done():
		case <-mgrCtx.Done():
			return
		}
		leaveCtx, stop := context.WithTimeout(mgrCtx, 5*time.Second)
		err := members.Leave(leaveCtx)
		stop()
		if err != nil {
			ctrl.Log.Error(err, "leave the membership")
			return
		}
		select {
		case <-time.After(handover):
		case <-mgrCtx.Done():
		}
	}()
	return mgrCtx
}

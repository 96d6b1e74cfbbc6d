// Command manager runs the Turnstile operator: the lock-key, CommandLock and retention
// controllers, deadlock detection, health probes and the metrics endpoint.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/deadlock"
	"github.com/turnstile-dev/turnstile/internal/lockmetrics"
	"github.com/turnstile-dev/turnstile/internal/queue"
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
}

func parseFlags(args []string) (options, zap.Options, error) {
	o := options{cfg: queue.DefaultConfig(), deadlockPolicy: deadlock.PolicyNewest}
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address the metrics endpoint binds to; \"0\" disables it.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", false, "Serve metrics over HTTPS with Kubernetes authentication and authorization (on in the deployed configuration).")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "0", "Address net/http/pprof binds to, e.g. 127.0.0.1:8082; \"0\" (the default) disables it. Profiles show internals: keep it off a public address.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Elect one active manager among replicas. For efficiency only: safety never depends on it.")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "turnstile.locks.turnstile.dev", "Name of the leader election Lease.")
	fs.StringVar(&o.leaderElectNS, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the pod's namespace).")
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
	fs.Func("deadlock-victim", "Which request of a deadlock cycle fails: newest, oldest or lowest-priority (default newest).", func(s string) (err error) {
		o.deadlockPolicy, err = deadlock.ParsePolicy(s)
		return err
	})
	fs.DurationVar(&o.deadlockScan, "deadlock-scan-interval", 30*time.Second, "Period of the full deadlock scan (a safety net; cycles are also checked when a request starts waiting). 0 disables the scan.")
	fs.BoolVar(&o.deadlockDetection, "deadlock-detection", true, "Detect wait-for cycles and fail one victim per cycle (see --deadlock-victim). false turns detection off: a cycle then lasts until a waitTimeout or ttl ends it.")
	zopts := zap.Options{Development: false}
	zopts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, zopts, err
	}
	if o.leaderElect && (o.retryPeriod <= 0 || o.retryPeriod >= o.renewDeadline || o.renewDeadline >= o.leaseDuration) {
		return o, zopts, fmt.Errorf("leader election needs 0 < --leader-elect-retry-period (%s) < --leader-elect-renew-deadline (%s) < --leader-elect-lease-duration (%s)", o.retryPeriod, o.renewDeadline, o.leaseDuration)
	}
	if o.cfg.DefaultTTL <= 0 || o.cfg.MaxTTL <= 0 || o.cfg.DefaultTTL > o.cfg.MaxTTL {
		return o, zopts, fmt.Errorf("--default-ttl (%s) must be positive and at most --max-ttl (%s)", o.cfg.DefaultTTL, o.cfg.MaxTTL)
	}
	return o, zopts, nil
}

func main() {
	o, zopts, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zopts)))
	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		ctrl.Log.Error(err, "manager exited")
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	log := ctrl.Log.WithName("setup")
	scheme := controller.NewScheme()
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst

	metricsOpts := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.metricsSecure}
	if o.metricsSecure {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         controller.CacheOptions(),
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
		return fmt.Errorf("create manager: %w", err)
	}
	if err := controller.Setup(ctx, mgr, controller.SetupOptions{
		Queue:               o.cfg,
		Freeze:              o.flags,
		Workers:             o.workers,
		Retention:           o.retention,
		PositionRefreshRate: o.refreshRate,
		DeadlockPolicy:      o.deadlockPolicy,
		DeadlockScan:        o.deadlockScan,
		Registry:            metrics.Registry,

		DisableDeadlockDetection: !o.deadlockDetection,
	}); err != nil {
		return err
	}
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
	log.Info("starting manager", "leaderElection", o.leaderElect, "metrics", o.metricsAddr, "probes", o.probeAddr)
	return mgr.Start(ctx)
}

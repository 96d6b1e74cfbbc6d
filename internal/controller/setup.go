package controller

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/deadlock"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/sharding"
)

// SetupOptions configure every Turnstile controller.
type SetupOptions struct {
	Queue               queue.Config
	Freeze              queue.FreezeFlags
	Workers             int
	Retention           time.Duration
	PositionRefreshRate float64
	DeadlockPolicy      deadlock.Policy
	// DeadlockScan is the full-scan period; 0 disables it. Detection on new waiters stays on
	// unless DisableDeadlockDetection is set.
	DeadlockScan             time.Duration
	DisableDeadlockDetection bool
	// Registry receives the metrics; nil leaves them unregistered.
	Registry prometheus.Registerer
	// Router, when set, runs the controllers active-active: keys this replica does not own are
	// decided after the router's backup delay (internal/sharding). nil: every key at once.
	Router sharding.Router
	// Clock is the one clock of every controller and the deadlock detector (grants, expiry,
	// aging, retention); nil is the real clock. The fault tests give replicas skewed clocks.
	Clock clock.WithTicker
	// UndecidedBound is how long a key may show work (a release asked for, a grant to write, an
	// expiry, a free key with waiters, a request without a status) without a decision before
	// the watchdog decides it from a live read and reports it; 0 turns the watchdog off.
	UndecidedBound time.Duration
}

// DefaultUndecidedBound is --undecided-key-bound's default: a hand-off takes milliseconds, and
// a few seconds on an API server so loaded that each write takes most of a second.
const DefaultUndecidedBound = 30 * time.Second

// CachesSynced is a readiness check: ready once the cache has started and every informer
// started in it so far has synced. Until then a replica cannot decide a key from its caches, so
// it is not Ready, and a rolling update does not stop the next old replica while this one is
// still listing.
func CachesSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 100*time.Millisecond)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("the informer caches have not synced yet")
		}
		return nil
	}
}

// Setup registers the indexes, controllers and the deadlock detector with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, o SetupOptions) error {
	if err := SetupIndexes(ctx, mgr.GetCache()); err != nil {
		return err
	}
	counts := NewRequestCounts()
	requests, err := mgr.GetCache().GetInformer(ctx, &locksv1.LockRequest{})
	if err != nil {
		return err
	}
	if _, err := requests.AddEventHandler(counts); err != nil {
		return err
	}
	m := NewMetrics(o.Registry, counts)
	recorder := newBoundedRecorder(mgr.GetEventRecorder("turnstile"), eventRate, eventBurst, m.EventsDropped.Inc)
	clk := o.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	opts := []Option{WithConfig(o.Queue), WithFreezeFlags(o.Freeze), WithMetrics(m), WithRouter(o.Router), WithClock(clk)}
	if o.Workers > 0 {
		opts = append(opts, WithWorkers(o.Workers))
	}
	if o.PositionRefreshRate > 0 {
		opts = append(opts, WithPositionRefreshRate(o.PositionRefreshRate, max(1, int(o.PositionRefreshRate))))
	}
	if !o.DisableDeadlockDetection {
		policy := o.DeadlockPolicy
		if policy == "" {
			policy = deadlock.PolicyNewest
		}
		det := NewDeadlockDetector(mgr.GetClient(), recorder, WithConfig(o.Queue), WithFreezeFlags(o.Freeze),
			WithDeadlockPolicy(policy), WithScanInterval(o.DeadlockScan), WithRequestCounts(counts), WithMetrics(m), WithLiveReader(mgr.GetAPIReader()), WithClock(clk))
		if err := mgr.Add(det); err != nil {
			return err
		}
		opts = append(opts, WithDeadlockChecker(det))
	}
	locks := NewLockReconciler(mgr.GetClient(), mgr.GetAPIReader(), recorder, opts...)
	if err := locks.SetupWithManager(mgr); err != nil {
		return err
	}
	if o.UndecidedBound > 0 {
		if err := mgr.Add(NewWatchdog(locks, o.UndecidedBound)); err != nil {
			return err
		}
	}
	if err := NewCommandLockReconciler(mgr.GetClient(), mgr.GetAPIReader(), recorder, WithFreezeFlags(o.Freeze), WithMetrics(m), WithRouter(o.Router), WithClock(clk)).SetupWithManager(mgr); err != nil {
		return err
	}
	return NewRetentionReconciler(mgr.GetClient(), o.Retention, WithRouter(o.Router), WithClock(clk)).SetupWithManager(mgr)
}

// SetupSpoke sets up what a fleet's spoke runs of the controllers (docs/fleet.md "One
// authority"): the retention of finished requests, and nothing that decides. The hub is the
// only authority of a spoke's keys: its agent (internal/fleet/spoke) writes the hub's decisions
// into the spoke's requests, and a lock controller here would be a second authority, granting
// keys the hub has given to another cluster. So no lock controller, no ProjectLocks, no
// deadlock detector, no watchdog and no CommandLock controller run in a spoke.
func SetupSpoke(mgr ctrl.Manager, o SetupOptions) error {
	clk := o.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	// guard:spoke-decides-nothing
	return NewRetentionReconciler(mgr.GetClient(), o.Retention, WithRouter(o.Router), WithClock(clk)).SetupWithManager(mgr)
}

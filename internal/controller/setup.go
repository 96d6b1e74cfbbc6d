package controller

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/deadlock"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/sharding"
	turnstile "github.com/turnstile-dev/turnstile/pkg/client"
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

// CacheOptions are the cache settings the controllers are written for. Cached objects carry no
// managedFields: nothing here reads them, they are a large part of a small object such as a
// LockRequest or a Lease, and the manager caches every request of a deep queue and every Lease
// in the cluster. Status updates of such an object keep the stored managedFields (the API
// server reads a missing list as "unchanged"). LockRequests are trimmed further
// (TrimLockRequest): the annotations no decision reads go, shared strings are stored once.
//
// Its informers relist at once when a watch is answered 410 Gone (pkg/client.NewInformer), not
// after client-go's informer backoff: after an API server restart every watch is. The
// LockRequest informer stores compact requests (CompactLockRequests). Use it with NewCache.
func CacheOptions() cache.Options {
	// guard:cache-compacts-requests
	return cache.Options{DefaultTransform: trimTransform(), NewInformer: CompactLockRequests(turnstile.NewInformer)}
}

// NewCache is the manager's cache (ctrl.Options.NewCache, with CacheOptions): cache.New, with
// the LockRequest informer watching through a decoder that reads each event once
// (WatchLockRequestsWith, internal/watchjson). That watch is of every LockRequest, which is
// what controller-runtime's would be only when nothing scopes them, so options that scope
// LockRequests (namespaces, selectors) are refused rather than half applied: the list would
// keep to the scope and the watch would not.
func NewCache(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
	// guard:cache-refuses-scoped-requests
	if err := unscopedLockRequests(opts); err != nil {
		return nil, err
	}
	start, err := lockRequestWatch(cfg, opts.HTTPClient)
	if err != nil {
		return nil, err
	}
	newInformer := opts.NewInformer
	if newInformer == nil {
		newInformer = toolscache.NewSharedIndexInformer
	}
	// guard:cache-watches-lockrequests-once
	opts.NewInformer = WatchLockRequestsWith(start, newInformer)
	return cache.New(cfg, opts)
}

// unscopedLockRequests is an error when opts scope what the cache holds of LockRequests.
func unscopedLockRequests(opts cache.Options) error {
	scoped := len(opts.DefaultNamespaces) > 0 || opts.DefaultLabelSelector != nil || opts.DefaultFieldSelector != nil
	for obj, by := range opts.ByObject {
		if _, ok := obj.(*locksv1.LockRequest); ok && (len(by.Namespaces) > 0 || by.Label != nil || by.Field != nil) {
			scoped = true
		}
	}
	if scoped {
		return errors.New("the manager's cache holds every LockRequest: its options must not scope them by namespace or selector (NewCache watches them all)")
	}
	return nil
}

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

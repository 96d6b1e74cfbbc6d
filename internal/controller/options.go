package controller

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/turnstile-dev/turnstile/internal/deadlock"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/sharding"
)

// Option configures a reconciler or the deadlock detector, Kueue-style: each constructor takes
// the same options and reads the ones it uses, so a clock is injected the same way everywhere.
type Option func(*options)

// options is what the options set; the reconcilers and the detector embed it.
type options struct {
	// clock is the only source of time: tests inject a fake one (k8s.io/utils/clock/testing).
	clock   clock.WithTicker
	cfg     queue.Config
	flags   queue.FreezeFlags
	metrics *Metrics

	// The key reconciler's.
	workers      int
	deadlocks    DeadlockChecker
	refreshRate  rate.Limit
	refreshBurst int

	// The detector's.
	policy deadlock.Policy
	scan   time.Duration
	// counts are the informer-kept request counts: the scan's namespaces come from them
	// instead of a list of every request. nil: the scan lists.
	counts *RequestCounts
	// live reads past the cache: the detector re-reads a cycle from it before failing its
	// victim. nil: the detector's client.
	live client.Reader

	// router delays the keys another replica owns (active-active); nil: none.
	router sharding.Router
}

func newOptions(opts []Option) options {
	o := options{
		clock: clock.RealClock{}, cfg: queue.DefaultConfig(), workers: 8,
		refreshRate: 20, refreshBurst: 20, policy: deadlock.PolicyNewest,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.metrics == nil {
		o.metrics = NewMetrics(nil)
	}
	return o
}

// WithLiveReader gives the deadlock detector a reader past the cache (the manager's API
// reader): a cycle is re-read from it before its victim is failed.
func WithLiveReader(r client.Reader) Option { return func(o *options) { o.live = r } }

// WithRequestCounts gives the deadlock detector the informer-kept request counts, which name
// the namespaces its periodic scan checks.
func WithRequestCounts(c *RequestCounts) Option { return func(o *options) { o.counts = c } }

// WithClock sets the clock (tests use a fake one).
func WithClock(c clock.WithTicker) Option { return func(o *options) { o.clock = c } }

// WithConfig sets the queue policy.
func WithConfig(cfg queue.Config) Option { return func(o *options) { o.cfg = cfg } }

// WithFreezeFlags sets --disable-apply and --disable-global-apply-lock.
func WithFreezeFlags(f queue.FreezeFlags) Option { return func(o *options) { o.flags = f } }

// WithMetrics sets where metrics are recorded.
func WithMetrics(m *Metrics) Option { return func(o *options) { o.metrics = m } }

// WithWorkers sets how many keys reconcile at once.
func WithWorkers(n int) Option { return func(o *options) { o.workers = n } }

// WithDeadlockChecker wires deadlock detection into the key reconciler.
func WithDeadlockChecker(d DeadlockChecker) Option { return func(o *options) { o.deadlocks = d } }

// WithPositionRefreshRate bounds position-only status writes per key.
func WithPositionRefreshRate(perSecond float64, burst int) Option {
	return func(o *options) { o.refreshRate, o.refreshBurst = rate.Limit(perSecond), burst }
}

// WithDeadlockPolicy sets which request of a cycle the detector fails.
func WithDeadlockPolicy(p deadlock.Policy) Option { return func(o *options) { o.policy = p } }

// WithScanInterval sets the detector's full-scan period; <= 0 disables the scan.
func WithScanInterval(d time.Duration) Option { return func(o *options) { o.scan = d } }

// WithRouter runs the key, CommandLock and retention reconcilers active-active: keys this
// replica does not own are decided after the router's backup delay (internal/sharding).
func WithRouter(rt sharding.Router) Option { return func(o *options) { o.router = rt } }

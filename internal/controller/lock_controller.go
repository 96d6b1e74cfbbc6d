package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/cache"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/sharding"
)

// conflictRetry is how soon a key is decided again after an optimistic write lost a race. The
// winning write's watch event usually gets there first; this only covers a cache that lags.
const conflictRetry = 20 * time.Millisecond

// LockReconciler decides one lock key at a time: its reconcile.Request names the key's
// ProjectLock (namespace/name), whether or not that ProjectLock exists yet. Keys reconcile in
// parallel and independently, so one busy key never delays another.
type LockReconciler struct {
	// options: refreshRate bounds the writes that only refresh a waiter's queue position, per
	// key, so a hand-off costs O(1) writes however deep the queue is.
	options
	client    client.Client
	apiReader client.Reader
	recorder  events.EventRecorder

	mu      sync.Mutex
	refresh map[types.NamespacedName]*rate.Limiter

	// overlay holds this reconciler's own recent writes until the cache shows them.
	overlay *cache.Overlay
	// keys is what the work queue says of each key (woken, queued, held by a worker).
	keys *keyTracker
}

var _ reconcile.Reconciler = (*LockReconciler)(nil)

// DeadlockChecker is told when requests start waiting, so it can look for a cycle through them.
type DeadlockChecker interface {
	Waiting(ctx context.Context, namespace string, waits []NewWait)
}

// NewWait is a request that started waiting.
type NewWait struct {
	// Request is the request as read before its waiting status was written.
	Request *locksv1.LockRequest
	// Last is true when it waits on the decided key and nobody waits behind it there.
	Last bool
}

// NewLockReconciler builds the key reconciler. apiReader reads past the cache; it confirms a
// holder is really gone before its lock is handed on.
func NewLockReconciler(c client.Client, apiReader client.Reader, recorder events.EventRecorder, opts ...Option) *LockReconciler {
	r := &LockReconciler{
		options: newOptions(opts),
		client:  c, apiReader: apiReader, recorder: recorder,
		refresh: map[types.NamespacedName]*rate.Limiter{},
		overlay: cache.NewOverlay(),
	}
	r.keys = newKeyTracker(r.clock)
	return r
}

// +kubebuilder:rbac:groups=locks.turnstile.dev,resources=projectlocks;lockrequests;commandlocks,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=locks.turnstile.dev,resources=projectlocks/status;lockrequests/status;commandlocks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile decides one key and executes the plan (execute.go): decide, write one step at a
// time, and decide again only where the plan says so, at most maxDecisions times.
func (r *LockReconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, err error) {
	if l, ok := tracing(); ok {
		l.Info("reconcile", "key", req.String())
		defer func() { l.Info("reconciled", "key", req.String(), "requeueAfter", res.RequeueAfter, "error", err) }()
	}
	return r.decide(ctx, req, false)
}

// decide reads the key, decides it and executes the plan. live reads the ProjectLock, and every
// request of the key that may have work (no status yet, holding, asked to release), from the
// API server rather than the cache and this reconciler's overlay: the watchdog's decision of a
// key the cache has not let anyone decide.
func (r *LockReconciler) decide(ctx context.Context, req reconcile.Request, live bool) (reconcile.Result, error) {
	now := r.clock.Now()
	// Events that wake the key from here on are new work: position refreshes yield to them.
	wakes := r.keys.wakes(req)
	in, ok, err := r.read(ctx, req, now, live)
	if err != nil || !ok {
		return reconcile.Result{}, err
	}
	in.LostHolders, in.UnprotectedLeases, in.NextLeaseLapse, err = r.holderLeases(ctx, req.Namespace, in.Requests, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	// Only as many position refreshes as the key's write rate allows are worth building, and
	// none on a backup: a waiter's position is the owner's to refresh (a backup refreshing it
	// too doubled those writes and made 409s); it is only information, nobody waits on it.
	in.Refreshes = queue.RefreshBudget{Limited: true}
	if !r.backup(req) {
		in.Refreshes.N = int(r.limiter(req.NamespacedName).TokensAt(now))
	}
	for n := 1; ; n++ {
		d := queue.Decide(in)
		next, res, err := r.execute(ctx, req, in, d, wakes)
		if next == nil {
			return res, err
		}
		if n == maxDecisions {
			// The plans keep ending in "decide again" (freezes changing under them): let the
			// cache catch up, and decide from a fresh read.
			return reconcile.Result{RequeueAfter: conflictRetry}, nil
		}
		in = *next
	}
}

// read gathers the decision's inputs. ok is false when there is nothing to decide.
func (r *LockReconciler) read(ctx context.Context, req reconcile.Request, now time.Time, live bool) (queue.Input, bool, error) {
	in := queue.Input{Now: now, Name: req.Name, Config: r.cfg}
	var err error
	if in.Lock, err = r.readLock(ctx, req, now, live); err != nil {
		return in, false, err
	}
	byUID, active, err := r.readRequests(ctx, req, &in, live)
	if err != nil || (in.Lock == nil && !active) {
		return in, false, err
	}
	// The cache may lag. Where acting on it could hand a lock on too early, read the truth.
	// A request that claims this key while the cached ProjectLock does not list it: is the
	// ProjectLock really gone (a force-unlock), or is the cache behind our own grant? And a
	// holder that shows a token above the cached ProjectLock's saw a later write of it (a
	// re-issued grant): deciding on the cached one would write that holder its older token.
	if queue.CachedLockBehind(in.Lock, in.Requests, req.Name) {
		if in.Lock, err = r.liveLock(ctx, req); err != nil {
			return in, false, err
		}
	}
	if err := r.confirmHolders(ctx, req, &in, byUID); err != nil {
		return in, false, err
	}
	var cls locksv1.CommandLockList
	if err := r.client.List(ctx, &cls); err != nil {
		return in, false, fmt.Errorf("list commandlocks: %w", err)
	}
	in.Freezes, in.NextThaw = queue.ResolveFreezes(cls.Items, r.flags, now)
	if err := r.inNamespace(ctx, req.Namespace, &in.Freezes); err != nil {
		return in, false, err
	}
	// guard:fleet-grant-cluster-labels
	if err := inFleet(ctx, r.apiReader, &in.Freezes); err != nil {
		return in, false, err
	}
	return in, true, nil
}

// readLock reads the key's ProjectLock from the cache, overlaid with this reconciler's writes
// (live: from the API server); nil when it does not exist.
func (r *LockReconciler) readLock(ctx context.Context, req reconcile.Request, now time.Time, live bool) (*locksv1.ProjectLock, error) {
	var lock *locksv1.ProjectLock
	if live {
		var err error
		if lock, err = r.liveLock(ctx, req); lock == nil || err != nil {
			return nil, err
		}
	} else {
		var cached locksv1.ProjectLock
		switch err := r.client.Get(ctx, req.NamespacedName, &cached); {
		case apierrors.IsNotFound(err):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("get projectlock %s: %w", req, err)
		}
		lock = r.overlay.ProjectLock(&cached)
		if l, ok := tracing(); ok {
			l.Info("read projectlock", "key", req.String(), "cachedRV", cached.ResourceVersion, "usedRV", lock.ResourceVersion,
				"cachedToken", cached.Status.FencingToken, "usedToken", lock.Status.FencingToken, "holders", lock.Status.HolderRequests())
		}
	}
	// guard:no-finalizer/2
	if lock.DeletionTimestamp != nil || slices.Contains(lock.Finalizers, locksv1.ReleaseHoldersFinalizer) {
		return lock, nil
	}
	// Made before ProjectLocks carried the finalizer: add it before anyone is granted on it,
	// or a force-unlock could let a second holder in (docs/protocol.md).
	withFinalizer := lock.DeepCopy()
	withFinalizer.Finalizers = append(withFinalizer.Finalizers, locksv1.ReleaseHoldersFinalizer)
	if err := r.client.Update(ctx, withFinalizer); err != nil {
		return nil, fmt.Errorf("add finalizer to projectlock %s: %w", req, err)
	}
	r.overlay.WroteProjectLock(withFinalizer, now)
	return withFinalizer, nil
}

// readRequests lists the requests that name the key into in, and the key's target. It reports
// which requests it saw and whether one is not final (active).
func (r *LockReconciler) readRequests(ctx context.Context, req reconcile.Request, in *queue.Input, live bool) (byUID map[types.UID]bool, active bool, err error) {
	var list locksv1.LockRequestList
	// The cache's own objects, not copies: a deep queue is listed on every reconcile, and
	// queue.Decide only reads its input (its property test checks that); writes deep-copy.
	if err := r.client.List(ctx, &list, client.InNamespace(req.Namespace), client.MatchingFields{cache.KeyIndex: req.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, false, fmt.Errorf("list lockrequests for %s: %w", req, err)
	}
	byUID = make(map[types.UID]bool, len(list.Items))
	for i := range list.Items {
		var lr *locksv1.LockRequest
		if live {
			var gone bool
			if lr, gone, err = r.liveRequest(ctx, &list.Items[i]); err != nil {
				return nil, false, err
			} else if gone {
				continue
			}
		} else {
			lr = r.overlay.Request(&list.Items[i])
		}
		if l, ok := tracing(); ok && (lr != &list.Items[i] || !lr.Status.Phase.IsFinal()) {
			l.Info("read request", "key", req.String(), "request", lr.Name, "cachedRV", list.Items[i].ResourceVersion, "usedRV", lr.ResourceVersion,
				"phase", lr.Status.Phase, "release", lr.Spec.Release)
		}
		byUID[lr.UID] = true
		in.Requests = append(in.Requests, lr)
		active = active || !lr.Status.Phase.IsFinal()
		if in.Target.Repo == "" {
			for _, ref := range lockkey.Refs(lr.Spec.Locks) {
				if ref.Name == req.Name {
					in.Target = ref.Target
				}
			}
		}
	}
	if in.Lock != nil {
		in.Target = lockkey.Normalize(in.Lock.Spec.LockTarget)
	}
	return byUID, active, nil
}

// liveRequest is a cached request as the API server has it now when it may have work for its
// keys (not final and not a plain waiter: no status yet, holding, asked to release); a waiter
// as cached. gone: it no longer exists.
func (r *LockReconciler) liveRequest(ctx context.Context, cached *locksv1.LockRequest) (lr *locksv1.LockRequest, gone bool, err error) {
	if cached.Status.Phase.IsFinal() || (cached.Status.Phase == locksv1.PhasePending && len(queue.HeldLocks(cached)) == 0 && !cached.Spec.Release) {
		return cached, false, nil
	}
	var live locksv1.LockRequest
	switch err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(cached), &live); {
	case apierrors.IsNotFound(err):
		return nil, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("read lockrequest %s/%s: %w", cached.Namespace, cached.Name, err)
	case live.UID != cached.UID:
		return nil, true, nil
	}
	return &live, false, nil
}

// liveLock reads the key's ProjectLock past the cache; nil when it does not exist.
func (r *LockReconciler) liveLock(ctx context.Context, req reconcile.Request) (*locksv1.ProjectLock, error) {
	var live locksv1.ProjectLock
	switch err := r.apiReader.Get(ctx, req.NamespacedName, &live); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("confirm projectlock %s: %w", req, err)
	}
	return &live, nil
}

// confirmHolders looks up a holder missing from the cache: deleted, or created after the
// cache's last event? A deleted one's last token is what its delete event said, if the watch
// saw it; one that is not known deleted is read live, and added to in if it is there.
func (r *LockReconciler) confirmHolders(ctx context.Context, req reconcile.Request, in *queue.Input, byUID map[types.UID]bool) error {
	if in.Lock == nil {
		return nil
	}
	for _, h := range in.Lock.Status.HolderRequests() {
		uid := types.UID(h.UID)
		// guard:no-live-holder-read
		// guard:no-live-holder-read-controller
		if byUID[uid] {
			continue
		}
		if deleted, token, known := r.overlay.Deleted(uid); deleted {
			if known {
				if in.GoneTokens == nil {
					in.GoneTokens = map[types.UID]int64{}
				}
				in.GoneTokens[uid] = token
			}
			continue
		}
		var live locksv1.LockRequest
		err := r.apiReader.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: h.Name}, &live)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("confirm holder %s/%s: %w", req.Namespace, h.Name, err)
		case string(live.UID) == h.UID:
			in.Requests = append(in.Requests, &live)
		}
	}
	return nil
}

// waitsLast reports whether the waiting update u leaves its request last in the queue of key
// name, and that queue is the one it waits in (its first key not held yet).
func waitsLast(name string, u queue.Update, q []*locksv1.LockRequest) bool {
	if len(q) == 0 || q[len(q)-1].UID != u.Request.UID {
		return false
	}
	after := *u.Request
	after.Status = u.Status
	ref, ok := queue.FirstUnheld(&after)
	return ok && ref.Name == name
}

// frozenSince reads the CommandLocks from the API server before a request that names one of
// commands is written as holding the key (protocol step 5): a freeze that the cache does not
// show yet must stop it, or Drained could be True while it starts (docs/protocol.md, "Freezes and Drained"). It reports whether such a
// request is frozen, and then puts the live freezes into in.
func (r *LockReconciler) frozenSince(ctx context.Context, in *queue.Input, commands []string, grants []queue.Update) (bool, error) {
	// The CommandLocks that can freeze these commands are the ones named after them and "all":
	// each is read with a GET, which the API server answers from etcd. (A LIST with no
	// resourceVersion is served from the watch cache once that cache has caught up with etcd,
	// which it learns from a progress notification requested every 100 ms: a quiet resource
	// like CommandLocks made every commanded grant wait for one.) The rest come from the
	// cache, for the re-decision.
	// guard:live-freeze-check-without-all
	live := map[string]bool{locksv1.CommandAll: true}
	for _, c := range commands {
		live[c] = true
	}
	// The GETs run at once: the grant waits for one round trip, not one per CommandLock.
	names := slices.Sorted(maps.Keys(live))
	got := make([]*locksv1.CommandLock, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			var cl locksv1.CommandLock
			switch err := r.apiReader.Get(ctx, client.ObjectKey{Name: name}, &cl); {
			case apierrors.IsNotFound(err):
			case err != nil:
				errs[i] = fmt.Errorf("read commandlock %s: %w", name, err)
			default:
				got[i] = &cl
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	var read []locksv1.CommandLock
	for _, cl := range got {
		if cl != nil {
			read = append(read, *cl)
		}
	}
	var cached locksv1.CommandLockList
	if err := r.client.List(ctx, &cached); err != nil {
		return false, fmt.Errorf("list commandlocks: %w", err)
	}
	for _, cl := range cached.Items {
		if !live[cl.Name] {
			read = append(read, cl)
		}
	}
	freezes, thaw := queue.ResolveFreezes(read, r.flags, in.Now)
	if len(grants) > 0 {
		if err := r.inNamespace(ctx, grants[0].Request.Namespace, &freezes); err != nil {
			return false, err
		}
		if err := inFleet(ctx, r.apiReader, &freezes); err != nil {
			return false, err
		}
	}
	for _, u := range grants {
		if _, frozen := freezes.ForRequest(u.Request); frozen && u.Acquires {
			in.Freezes, in.NextThaw = freezes, thaw
			return true, nil
		}
	}
	return false, nil
}

func (r *LockReconciler) limiter(key types.NamespacedName) *rate.Limiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, ok := r.refresh[key]
	if !ok {
		l = rate.NewLimiter(r.refreshRate, r.refreshBurst)
		r.refresh[key] = l
	}
	return l
}

func (r *LockReconciler) forgetLimiter(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.refresh, key)
}

// backup reports whether another live replica owns the key (active-active): this replica then
// decides it only as a backup, a backup delay after the owner, and leaves position refreshes
// to the owner. Grants, hand-offs, expiries and first statuses it still writes, so a dead
// owner delays them by the backup delay only.
func (r *LockReconciler) backup(req reconcile.Request) bool {
	return !sharding.Judge(r.router, req.String()).Owner
}

// refreshRetry is when the key's write rate allows the next position refresh.
func (r *LockReconciler) refreshRetry() time.Duration {
	return time.Second / time.Duration(max(1, int(r.refreshRate)))
}

func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// requestKeys maps a LockRequest event to the keys it names.
func requestKeys(_ context.Context, o client.Object) []reconcile.Request {
	lr, ok := o.(*locksv1.LockRequest)
	if !ok {
		return nil
	}
	names := lockkey.Names(lr.Spec.Locks)
	out := make([]reconcile.Request, len(names))
	for i, n := range names {
		out[i] = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: lr.Namespace, Name: n}}
	}
	return out
}

// SetupWithManager registers the key reconciler: ProjectLock events enqueue their own key,
// LockRequest events every key they name, CommandLock events the keys of their command's
// requests, holder Lease events the keys of the requests that name the Lease.
func (r *LockReconciler) SetupWithManager(mgr ctrl.Manager) error {
	var queueOpts []sharding.QueueOption
	if r.router != nil {
		// A backup leaves a key alone while its owner is seen deciding it.
		progress := newDecisions(r.clock)
		if err := progress.watch(context.Background(), mgr.GetCache()); err != nil {
			return err
		}
		// guard:backup-ignores-owner
		queueOpts = append(queueOpts, sharding.WithProgress(progress), sharding.WithQueueClock(r.clock))
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("lock").
		For(&locksv1.ProjectLock{}, builder.WithPredicates(traceLockEvents(), relevantUpdates(), r.notOwnEcho())).
		Watches(&locksv1.LockRequest{}, r.requestEvents()).
		Watches(&locksv1.CommandLock{}, handler.EnqueueRequestsFromMapFunc(r.commandKeys), builder.WithPredicates(relevantUpdates())).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(r.leaseKeys), builder.WithPredicates(leaseShortened())).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.workers, RateLimiter: retryLimiter(), NewQueue: newTrackedQueue(r.keys, r.router, queueOpts...)}).
		Complete(r)
}

// notOwnEcho drops the update event of a ProjectLock status this reconciler just wrote: the
// key decided on it already (see overlay.EchoesRequest).
func (r *LockReconciler) notOwnEcho() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		pl, ok := e.ObjectNew.(*locksv1.ProjectLock)
		echo := ok && r.overlay.EchoesProjectLock(pl)
		if l, on := tracing(); on && echo {
			l.Info("projectlock event", "key", client.ObjectKeyFromObject(pl).String(), "rv", pl.ResourceVersion, "what", "ignored: the key's own write")
		}
		return !echo
	}}
}

// commandKeys maps a CommandLock event to the keys of requests for its command.
func (r *LockReconciler) commandKeys(ctx context.Context, o client.Object) []reconcile.Request {
	var list locksv1.LockRequestList
	opts := []client.ListOption{}
	if o.GetName() != locksv1.CommandAll {
		opts = append(opts, client.MatchingFields{IndexCommand: o.GetName()})
	}
	if err := r.client.List(ctx, &list, opts...); err != nil {
		log.FromContext(ctx).Error(err, "list lockrequests for commandlock", "commandlock", o.GetName())
		return nil
	}
	return liveRequestKeys(ctx, list.Items, func(lr *locksv1.LockRequest) bool { return lr.Spec.Command != "" })
}

// liveRequestKeys is the keys named by the requests that are not final and pass keep, each once.
func liveRequestKeys(ctx context.Context, items []locksv1.LockRequest, keep func(*locksv1.LockRequest) bool) []reconcile.Request {
	seen := map[reconcile.Request]bool{}
	var out []reconcile.Request
	for i := range items {
		lr := &items[i]
		if lr.Status.Phase.IsFinal() || (keep != nil && !keep(lr)) {
			continue
		}
		for _, k := range requestKeys(ctx, lr) {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

func isConflict(err error) bool { return apierrors.IsConflict(err) }

// maxRetryDelay caps a key's retry backoff after failed reconciles. client-go's default grows to
// 1000 s; after an API server outage of a few seconds a key had backed off for several seconds
// more, so hand-offs resumed long after the server was back (test/faults, docs/faults.md).
const maxRetryDelay = 500 * time.Millisecond

// retryLimiter is controller-runtime's default limiter with the per-item backoff capped at
// maxRetryDelay: 5 ms doubling per failure, and the overall 10 qps / 100 burst bucket.
func retryLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

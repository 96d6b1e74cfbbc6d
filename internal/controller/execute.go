package controller

// The executor: a decision's plan applied one write at a time, in order, but the waiters'
// statuses, which go out together.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// maxDecisions bounds the decisions of one reconcile: the first, and one after each plan that
// ends in deciding again (a created ProjectLock, a holder gone with a token nobody knows, a
// freeze the live read found, a counted grant that had the write to itself). Past it the key is
// requeued and decided from a fresh read.
const maxDecisions = 3

// execution is one plan being applied.
type execution struct {
	r   *LockReconciler
	req reconcile.Request
	in  queue.Input
	d   queue.Decision
	// lock is the ProjectLock as read, or as this plan last wrote it.
	lock *locksv1.ProjectLock
	// again is set by a write after which the key is decided again (the freeze check).
	again        bool
	result       reconcile.Result
	newlyWaiting []NewWait
	writes       int
	// wakes is how often an event had woken the key when the reconcile began; told counts the
	// waiters' statuses written; yielded is set when the rest were left to the next decision
	// because new work came (waitersYield).
	wakes   uint64
	told    int
	yielded bool
}

// execute applies d's writes in order and stops at the first that fails: then the key is
// requeued (conflict) or the error returned, and decided again from a fresh read. The waiters'
// statuses, last in every plan, are written a batch at a time (tellWaiters). It returns the
// input of the next decision when the plan ends in deciding again, and nil when it is done.
func (r *LockReconciler) execute(ctx context.Context, req reconcile.Request, in queue.Input, d queue.Decision, wakes uint64) (*queue.Input, reconcile.Result, error) {
	logPlan(ctx, d)
	x := &execution{r: r, req: req, in: in, d: d, lock: in.Lock, result: reconcile.Result{RequeueAfter: d.RequeueAfter}, wakes: wakes}
	defer func() { r.metrics.PlanWrites.Observe(float64(x.writes)) }()
	for i := 0; i < len(d.Writes); i++ {
		w := d.Writes[i]
		if w.Kind == queue.WriteWaiting {
			// The waiters' statuses (the plan's last writes) go out together.
			n := 1
			for i+n < len(d.Writes) && d.Writes[i+n].Kind == queue.WriteWaiting {
				n++
			}
			if failed, err := x.tellWaiters(ctx, d.Writes[i:i+n]); err != nil {
				res, err := r.failed(failed, err)
				return nil, res, err
			}
			i += n - 1
			continue
		}
		// guard:executor-goes-on-after-failure
		if err := x.do(ctx, w); err != nil {
			res, err := r.failed(w, err)
			return nil, res, err
		}
		if x.again {
			return x.next(), reconcile.Result{}, nil
		}
	}
	if d.DecidesAgain() {
		if d.More {
			// A counted grant's plan is written in full, its waiters too: they go to the
			// deadlock checker now; the next decision grants who it left (queue.Decision.More).
			x.done(ctx)
		}
		return x.next(), reconcile.Result{}, nil
	}
	x.done(ctx)
	return nil, x.result, nil
}

// failed is the one place that says what happens after a write fails: a lost optimistic race
// (a conflict, the object gone, the ProjectLock created by someone else) requeues the key, to
// be decided again from a fresh read soon; anything else is an error (requeued with backoff).
func (r *LockReconciler) failed(w queue.Write, err error) (reconcile.Result, error) {
	if l, ok := tracing(); ok {
		l.Info("write failed", "kind", w.Kind, "step", w.Step.String(), "object", w.Object, "rv", w.RV, "error", err.Error())
	}
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) {
		r.metrics.Conflicts.Inc()
		r.metrics.StepConflicts.WithLabelValues(w.Step.String()).Inc()
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	return reconcile.Result{}, fmt.Errorf("%s %s (step %s): %w", w.Kind, w.Object, w.Step, err)
}

// next is the input of the decision after this plan: the ProjectLock as written (or created),
// the requests as this reconciler last wrote them, and the freezes the live read found.
func (x *execution) next() *queue.Input {
	in := x.in
	in.Lock = x.lock
	in.Requests = make([]*locksv1.LockRequest, len(x.in.Requests))
	for i, lr := range x.in.Requests {
		in.Requests[i] = x.r.overlay.Request(lr)
	}
	return &in
}

// do makes one write of the plan.
func (x *execution) do(ctx context.Context, w queue.Write) error {
	r, key := x.r, x.req.NamespacedName
	switch w.Kind {
	case queue.WriteCreate:
		return x.createLock(ctx)
	case queue.WriteReleaseFinalizer:
		// Every holder of the force-unlocked ProjectLock has been told: let it go. The
		// resourceVersion read makes sure nobody was listed since.
		lock := x.lock.DeepCopy()
		lock.Finalizers = slices.DeleteFunc(lock.Finalizers, func(f string) bool { return f == locksv1.ReleaseHoldersFinalizer })
		x.writes++
		err := r.client.Update(ctx, lock)
		r.overlay.ForgetProjectLock(key)
		return err
	case queue.WriteLockStatus:
		lock := x.lock.DeepCopy()
		lock.Status = *w.Lock
		x.writes++
		if err := r.client.Status().Update(ctx, lock); err != nil {
			r.overlay.ForgetProjectLock(key)
			return err
		}
		r.overlay.WroteProjectLock(lock, r.clock.Now())
		x.lock = lock
		return nil
	case queue.WriteCheckFreezes:
		// A command froze after the cache last said so: decide again on what was just written
		// and the freezes the API server reports, which takes the grant back (demotes it).
		frozen, err := r.frozenSince(ctx, &x.in, w.Commands, x.d.Grant)
		x.again = frozen
		return err
	case queue.WriteWaiting:
		_, err := x.tellWaiters(ctx, []queue.Write{w})
		return err
	}
	return x.request(ctx, w)
}

// request writes one request's status (finish, demote, grant) and counts it.
func (x *execution) request(ctx context.Context, w queue.Write) error {
	r := x.r
	if err := x.writeRequest(ctx, *w.Update); err != nil {
		return err
	}
	switch w.Kind {
	case queue.WriteFinish:
		r.metrics.finished(*w.Update, r.clock.Now())
	case queue.WriteDemote:
		r.metrics.Demoted.Inc()
	case queue.WriteGrant:
		if w.Update.Event != nil {
			r.metrics.granted(*w.Update, r.clock.Now())
		}
		if w.Update.Acquires {
			r.recordBypass(*w.Update, x.in.Freezes)
		}
	}
	return nil
}

// waiterWritesAtOnce is how many waiters' statuses a plan writes at once. Each is a write of
// its own request with the resourceVersion it was read at, and none makes anyone a holder, so
// their order does not matter; written one after another, a burst of 50 new requests' first
// statuses held the key's worker for 50 round trips, seconds each on a loaded API server (issue
// #47). At once, they take about as long as the slowest of each batch.
const waiterWritesAtOnce = 8

// tellWaiters writes the waiters' statuses ws, waiterWritesAtOnce at a time, until the rest
// yield to new work (waitersYield); a position refresh only if the key's write rate allows it.
// A failed write ends it once its batch is done: it returns that write and its error.
func (x *execution) tellWaiters(ctx context.Context, ws []queue.Write) (queue.Write, error) {
	r := x.r
	for len(ws) > 0 {
		if x.yielded || x.waitersYield() {
			x.yielded = true
			x.result.RequeueAfter = minPositive(x.result.RequeueAfter, r.refreshRetry())
			return queue.Write{}, nil
		}
		var batch []queue.Write
		// guard:waiters-written-at-once
		for len(batch) < waiterWritesAtOnce && len(ws) > 0 {
			w := ws[0]
			ws = ws[1:]
			if w.Update.Refresh && !x.refreshAllowed() {
				continue
			}
			batch = append(batch, w)
		}
		errs := make([]error, len(batch))
		var wg sync.WaitGroup
		for i, w := range batch {
			wg.Go(func() { errs[i] = r.writeStatus(ctx, x.req, *w.Update) })
		}
		wg.Wait()
		x.writes += len(batch)
		for i, w := range batch {
			if errs[i] != nil {
				return w, errs[i]
			}
		}
		for _, w := range batch {
			x.told++
			if u := *w.Update; !u.Refresh {
				x.newlyWaiting = append(x.newlyWaiting, NewWait{Request: u.Request, Last: waitsLast(x.req.Name, u, x.d.Queue)})
			}
		}
	}
	return queue.Write{}, nil
}

// refreshAllowed takes a token of the key's write rate for a position refresh, if it has one;
// if not, the key comes back when it will.
func (x *execution) refreshAllowed() bool {
	r := x.r
	// Delay and Cancel would read the wall clock: the reservation is on the injected one.
	now := r.clock.Now()
	if res := r.limiter(x.req.NamespacedName).ReserveN(now, 1); res.DelayFrom(now) > 0 {
		res.CancelAt(now)
		x.result.RequeueAfter = minPositive(x.result.RequeueAfter, r.refreshRetry())
		return false
	}
	return true
}

// waitersYield says whether the waiters' statuses still to write are left to the next
// decision: an event woke the key since this reconcile began (a release, a new request, a
// holder gone), or a deadline of the decision (an expiry, a wait timeout) has passed. A
// waiter's status makes nobody a holder; every one written while a decision waits delays that
// decision (under load, 20 position refreshes of a deep queue held up each hand-off by seconds,
// and the first statuses of a burst of 50 new requests a holder's release by 14 s: issue #47).
// The next decision writes what is left, first statuses before refreshes. Each decision writes
// one batch of waiters' statuses at least, so waiters are still told on a key that is never
// quiet.
func (x *execution) waitersYield() bool {
	if x.told == 0 {
		return false
	}
	// guard:waiters-yield-to-events
	if x.r.keys.wakes(x.req) != x.wakes {
		return true
	}
	return x.d.RequeueAfter > 0 && !x.r.clock.Now().Before(x.in.Now.Add(x.d.RequeueAfter))
}

// createLock creates the key's ProjectLock, with the finalizer that makes a force-unlock tell
// the holders first; the next decision is made on it (a grant's token is its revision).
func (x *execution) createLock(ctx context.Context) error {
	lock := &locksv1.ProjectLock{}
	lock.Namespace, lock.Name = x.req.Namespace, x.req.Name
	// guard:no-finalizer
	lock.Finalizers = []string{locksv1.ReleaseHoldersFinalizer}
	lock.Spec.LockTarget = x.in.Target
	x.writes++
	if err := x.r.client.Create(ctx, lock); err != nil {
		// AlreadyExists: created by someone else, or a deleted one still going (failed requeues).
		return err
	}
	x.r.overlay.WroteProjectLock(lock, x.r.clock.Now())
	x.lock = lock
	return nil
}

// writeRequest writes one request's status with the resourceVersion it was read at, then emits
// its event.
func (x *execution) writeRequest(ctx context.Context, u queue.Update) error {
	x.writes++
	return x.r.writeStatus(ctx, x.req, u)
}

// writeStatus is writeRequest for key's reconcile, safe to call from several goroutines.
func (r *LockReconciler) writeStatus(ctx context.Context, key reconcile.Request, u queue.Update) error {
	obj := u.Request.DeepCopy()
	obj.Status = u.Status
	if err := r.client.Status().Update(ctx, obj); err != nil {
		r.overlay.ForgetRequest(obj.UID)
		return err
	}
	r.overlay.WroteRequest(obj, key.NamespacedName, r.clock.Now())
	if u.Event != nil {
		r.recorder.Eventf(obj, nil, u.Event.Type, u.Event.Reason, "Reconcile", "%s", u.Event.Message)
	}
	return nil
}

// done is what follows a plan written in full: the time-driven requeue is the decision's
// (queue.Decide's nextDeadline), the write rate is ours; new waits go to the deadlock checker.
func (x *execution) done(ctx context.Context) {
	r, req, d := x.r, x.req, x.d
	if l, ok := tracing(); ok {
		l.Info("plan done", "key", req.String(), "stale", d.Stale, "writes", x.writes, "waitersYielded", x.yielded, "holder", d.Holder, "queue", len(d.Queue), "requeueAfter", x.result.RequeueAfter)
	}
	if d.Stale {
		log.FromContext(ctx).V(1).Info("not decided: the ProjectLock read is older than a token its holders show", "retry", d.RequeueAfter)
		return
	}
	r.metrics.queueDepth(req.Namespace, req.Name, len(d.Queue))
	// The decision's deadline is a time, read as a delay from the read: the plan's writes took
	// some of it. (Under load they took seconds, and every expiry came that much late.)
	// guard:deadline-from-the-read
	if d.RequeueAfter > 0 {
		left := max(x.in.Now.Add(d.RequeueAfter).Sub(r.clock.Now()), time.Millisecond)
		if x.result.RequeueAfter == d.RequeueAfter || left < x.result.RequeueAfter {
			x.result.RequeueAfter = left
		}
	}
	if d.RefreshDeferred && !r.backup(req) {
		x.result.RequeueAfter = minPositive(x.result.RequeueAfter, r.refreshRetry())
	}
	if len(d.Waiting) == 0 && len(d.Queue) == 0 {
		r.forgetLimiter(req.NamespacedName)
	}
	if r.deadlocks != nil && len(x.newlyWaiting) > 0 {
		r.deadlocks.Waiting(ctx, req.Namespace, x.newlyWaiting)
	}
	log.FromContext(ctx).V(1).Info("decided", "holder", d.Holder, "queue", len(d.Queue), "finished", len(d.Finish), "granted", len(d.Grant), "writes", x.writes)
}

// logPlan logs the plan at V(1): each write's step, kind, object, precondition and reason.
func logPlan(ctx context.Context, d queue.Decision) {
	logger := log.FromContext(ctx).V(1)
	if !logger.Enabled() || len(d.Writes) == 0 {
		return
	}
	writes := make([]string, len(d.Writes))
	for i, w := range d.Writes {
		writes[i] = fmt.Sprintf("%d %s %s %s@%s: %s", w.Step, w.Step, w.Kind, w.Object, w.RV, w.Why)
	}
	logger.Info("plan", "writes", writes, "decidesAgain", d.DecidesAgain())
}

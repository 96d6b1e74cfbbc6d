package controller

// The executor: a decision's plan applied one write at a time, in order.

import (
	"context"
	"fmt"
	"slices"

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
}

// execute applies d's writes in order and stops at the first that fails: then the key is
// requeued (conflict) or the error returned, and decided again from a fresh read. It returns the
// input of the next decision when the plan ends in deciding again, and nil when it is done.
func (r *LockReconciler) execute(ctx context.Context, req reconcile.Request, in queue.Input, d queue.Decision) (*queue.Input, reconcile.Result, error) {
	logPlan(ctx, d)
	x := &execution{r: r, req: req, in: in, d: d, lock: in.Lock, result: reconcile.Result{RequeueAfter: d.RequeueAfter}}
	defer func() { r.metrics.PlanWrites.Observe(float64(x.writes)) }()
	for _, w := range d.Writes {
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
		in.Requests[i] = x.r.overlay.request(lr)
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
		r.overlay.forgetLock(key)
		return err
	case queue.WriteLockStatus:
		lock := x.lock.DeepCopy()
		lock.Status = *w.Lock
		x.writes++
		if err := r.client.Status().Update(ctx, lock); err != nil {
			r.overlay.forgetLock(key)
			return err
		}
		r.overlay.wroteLock(lock, r.clock.Now())
		x.lock = lock
		return nil
	case queue.WriteCheckFreezes:
		// A command froze after the cache last said so: decide again on what was just written
		// and the freezes the API server reports, which takes the grant back (demotes it).
		frozen, err := r.frozenSince(ctx, &x.in, w.Commands, x.d.Grant)
		x.again = frozen
		return err
	case queue.WriteWaiting:
		return x.waiting(ctx, *w.Update)
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

// waiting writes a waiter's status; a position refresh only if the key's write rate allows it.
func (x *execution) waiting(ctx context.Context, u queue.Update) error {
	r := x.r
	if u.Refresh {
		// Delay and Cancel would read the wall clock: the reservation is on the injected one.
		now := r.clock.Now()
		if res := r.limiter(x.req.NamespacedName).ReserveN(now, 1); res.DelayFrom(now) > 0 {
			res.CancelAt(now)
			x.result.RequeueAfter = minPositive(x.result.RequeueAfter, r.refreshRetry())
			return nil
		}
	}
	if err := x.writeRequest(ctx, u); err != nil {
		return err
	}
	if !u.Refresh {
		x.newlyWaiting = append(x.newlyWaiting, NewWait{Request: u.Request, Last: waitsLast(x.req.Name, u, x.d.Queue)})
	}
	return nil
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
	x.r.overlay.wroteLock(lock, x.r.clock.Now())
	x.lock = lock
	return nil
}

// writeRequest writes one request's status with the resourceVersion it was read at, then emits
// its event.
func (x *execution) writeRequest(ctx context.Context, u queue.Update) error {
	r := x.r
	obj := u.Request.DeepCopy()
	obj.Status = u.Status
	x.writes++
	if err := r.client.Status().Update(ctx, obj); err != nil {
		r.overlay.forgetRequest(obj.UID)
		return err
	}
	r.overlay.wroteRequest(obj, x.req.NamespacedName, r.clock.Now())
	if u.Event != nil {
		r.recorder.Eventf(obj, nil, u.Event.Type, u.Event.Reason, "Reconcile", "%s", u.Event.Message)
	}
	return nil
}

// done is what follows a plan written in full: the time-driven requeue is the decision's
// (queue.Decide's nextDeadline), the write rate is ours; new waits go to the deadlock checker.
func (x *execution) done(ctx context.Context) {
	r, req, d := x.r, x.req, x.d
	if d.Stale {
		log.FromContext(ctx).V(1).Info("not decided: the ProjectLock read is older than a token its holders show", "retry", d.RequeueAfter)
		return
	}
	r.metrics.queueDepth(req.Namespace, req.Name, len(d.Queue))
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

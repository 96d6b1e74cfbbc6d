package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/sharding"
)

// RetentionReconciler deletes finished LockRequests once their retention has passed, like a
// Job's ttlSecondsAfterFinished: the deadline is derived from status.finishedAt and the
// reconcile requeues at it.
type RetentionReconciler struct {
	options
	client    client.Client
	retention time.Duration
}

var _ reconcile.Reconciler = (*RetentionReconciler)(nil)

// NewRetentionReconciler deletes requests retention after they finish; retention <= 0 keeps
// them forever. It uses WithClock.
func NewRetentionReconciler(c client.Client, retention time.Duration, opts ...Option) *RetentionReconciler {
	return &RetentionReconciler{options: newOptions(opts), client: c, retention: retention}
}

// Reconcile deletes one finished request when its retention is over.
func (r *RetentionReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if r.retention <= 0 {
		return reconcile.Result{}, nil
	}
	var lr locksv1.LockRequest
	if err := r.client.Get(ctx, req.NamespacedName, &lr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !lr.Status.Phase.IsFinal() || lr.Status.FinishedAt == nil {
		return reconcile.Result{}, nil
	}
	left := lr.Status.FinishedAt.Add(r.retention).Sub(r.clock.Now())
	if left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
	}
	// Preconditioned on the UID and resourceVersion read: never delete a request that changed.
	err := r.client.Delete(ctx, &lr, client.Preconditions{UID: &lr.UID, ResourceVersion: &lr.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return reconcile.Result{}, fmt.Errorf("delete finished lockrequest %s: %w", req, err)
	}
	return reconcile.Result{}, nil
}

// SetupWithManager registers the reconciler. Only finished requests are its concern: the
// events of a request that waits or holds (most of them: grants, queue positions, renewals)
// enqueue nothing, on every replica. A request that finishes sends its final update; after a
// restart, the informer's initial list sends one create per finished request.
func (r *RetentionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("retention").
		For(&locksv1.LockRequest{}, builder.WithPredicates(finished())).
		WithOptions(controller.Options{NewQueue: sharding.NewQueueFunc(r.router)}).Complete(r)
}

// finished passes the creates and updates of requests in a final phase.
func finished() predicate.Funcs {
	final := func(o client.Object) bool {
		lr, ok := o.(*locksv1.LockRequest)
		return ok && lr.Status.Phase.IsFinal()
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return final(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return final(e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(e event.GenericEvent) bool { return final(e.Object) },
	}
}

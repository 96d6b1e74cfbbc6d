package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

type requestQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// requestEvents enqueues the keys a LockRequest names. Updates that change nothing a decision
// reads — a refreshed queue position or message, written by this controller — are dropped, so
// deep queues do not reconcile once per refresh, and so is the echo of a status a key just
// wrote, for that key (the others it names still hear of it). Deletions are remembered, so the
// reconcile that hands the lock on need not ask the API server whether the holder is really
// gone.
func (r *LockReconciler) requestEvents() handler.Funcs {
	add := func(ctx context.Context, o client.Object, q requestQueue) {
		for _, k := range requestKeys(ctx, o) {
			q.Add(k)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q requestQueue) { add(ctx, e.Object, q) },
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q requestQueue) {
			oldReq, ok1 := e.ObjectOld.(*locksv1.LockRequest)
			newReq, ok2 := e.ObjectNew.(*locksv1.LockRequest)
			if !ok1 || !ok2 {
				add(ctx, e.ObjectNew, q)
				return
			}
			if !decisionInputChanged(oldReq, newReq) {
				return
			}
			for _, k := range requestKeys(ctx, newReq) {
				if !r.overlay.echoesRequest(newReq, k.NamespacedName) {
					q.Add(k)
				}
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q requestQueue) {
			last, _ := e.Object.(*locksv1.LockRequest)
			if e.DeleteStateUnknown {
				last = nil // a tombstone: the state before some writes we missed
			}
			r.overlay.sawDeleted(e.Object.GetUID(), last, r.clock.Now())
			add(ctx, e.Object, q)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q requestQueue) { add(ctx, e.Object, q) },
	}
}

// decisionInputChanged says whether an update touches what queue.Decide reads: the spec
// (generation), labels and annotations, deletion, or the status fields that carry the grant
// and the queue order. Queue position, blockedBy and condition messages are its output only.
func decisionInputChanged(a, b *locksv1.LockRequest) bool {
	if a.Generation != b.Generation || (a.DeletionTimestamp == nil) != (b.DeletionTimestamp == nil) ||
		!equality.Semantic.DeepEqual(a.Labels, b.Labels) || !equality.Semantic.DeepEqual(a.Annotations, b.Annotations) {
		return true
	}
	sa, sb := &a.Status, &b.Status
	return sa.Phase != sb.Phase || sa.FencingToken != sb.FencingToken || sa.ObservedGeneration != sb.ObservedGeneration ||
		!equality.Semantic.DeepEqual(sa.Locks, sb.Locks) ||
		!equality.Semantic.DeepEqual(sa.QueuedAt, sb.QueuedAt) ||
		!equality.Semantic.DeepEqual(sa.GrantedAt, sb.GrantedAt) ||
		!equality.Semantic.DeepEqual(sa.RenewedAt, sb.RenewedAt) ||
		!equality.Semantic.DeepEqual(sa.ExpiresAt, sb.ExpiresAt) ||
		!equality.Semantic.DeepEqual(sa.FinishedAt, sb.FinishedAt)
}

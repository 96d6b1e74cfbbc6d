package controller

import (
	"context"
	"reflect"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

type requestQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// requestEvents enqueues the keys a LockRequest names. Updates that change only ignored fields
// (ignoredStatusFields) — a refreshed queue position or message, written by this controller —
// are dropped, so
// deep queues do not reconcile once per refresh, and so is the echo of a status a key just
// wrote, for that key (the others it names still hear of it). Deletions are remembered, so the
// reconcile that hands the lock on need not ask the API server whether the holder is really
// gone.
func (r *LockReconciler) requestEvents() handler.Funcs {
	add := func(ctx context.Context, kind string, o client.Object, q requestQueue) {
		for _, k := range requestKeys(ctx, o) {
			lr, _ := o.(*locksv1.LockRequest)
			traceEvent(kind, k.String(), lr, "enqueued")
			q.Add(k)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q requestQueue) { add(ctx, "create", e.Object, q) },
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q requestQueue) {
			oldReq, ok1 := e.ObjectOld.(*locksv1.LockRequest)
			newReq, ok2 := e.ObjectNew.(*locksv1.LockRequest)
			if !ok1 || !ok2 {
				add(ctx, "update", e.ObjectNew, q)
				return
			}
			if !decisionInputChanged(oldReq, newReq) {
				traceEvent("update", "", newReq, "ignored: no decision input changed")
				return
			}
			for _, k := range requestKeys(ctx, newReq) {
				if !r.overlay.EchoesRequest(newReq, k.NamespacedName) {
					traceEvent("update", k.String(), newReq, "enqueued")
					q.Add(k)
				} else {
					traceEvent("update", k.String(), newReq, "ignored: the key's own write")
				}
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q requestQueue) {
			last, _ := e.Object.(*locksv1.LockRequest)
			if e.DeleteStateUnknown {
				last = nil // a tombstone: the state before some writes we missed
			}
			r.overlay.SawDeleted(e.Object.GetUID(), last, r.clock.Now())
			add(ctx, "delete", e.Object, q)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q requestQueue) { add(ctx, "generic", e.Object, q) },
	}
}

// ignoredStatusFields are, per kind, the only status fields whose change alone does not make an
// update worth a decision: what queue.Decide writes and never reads (a waiter's queue position,
// its blocker, its conditions' messages). Every other change is relevant — a field added to a
// status tomorrow included: the filter fails closed. TestUpdateFilterFailsClosed changes every
// status field of every kind, by reflection, and checks both halves.
var ignoredStatusFields = map[reflect.Type][]string{
	// guard:update-filter-ignores-fences
	reflect.TypeFor[locksv1.LockRequest](): {"QueuePosition", "BlockedBy", "Conditions"},
}

// ignoredMetaFields change with every write and say nothing a decision reads.
var ignoredMetaFields = []string{"ResourceVersion", "ManagedFields"}

// relevantUpdates passes the updates that change anything but the ignored fields.
func relevantUpdates() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return decisionInputChanged(e.ObjectOld, e.ObjectNew)
	}}
}

// decisionInputChanged says whether an update changes anything but the ignored fields.
func decisionInputChanged(a, b client.Object) bool {
	return !equality.Semantic.DeepEqual(withoutIgnored(a), withoutIgnored(b))
}

// withoutIgnored is a shallow copy of o with its ignored fields zeroed; o is not changed.
func withoutIgnored(o client.Object) any {
	v := reflect.ValueOf(o).Elem()
	c := reflect.New(v.Type()).Elem()
	c.Set(v)
	meta := c.FieldByName("ObjectMeta")
	for _, f := range ignoredMetaFields {
		meta.FieldByName(f).SetZero()
	}
	if st := c.FieldByName("Status"); st.IsValid() {
		for _, f := range ignoredStatusFields[v.Type()] {
			st.FieldByName(f).SetZero()
		}
	}
	return c.Addr().Interface()
}

package controller

import (
	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// traceV is the verbosity of the key trace (--zap-log-level=2 and up): each LockRequest event
// the lock controller hears and what it does with it, and each reconcile's view of the key (the
// resourceVersions of the cached and the overlaid ProjectLock and holders), so a key that
// stands still can be followed event by event (docs/faults.md, "A key that stood still").
const traceV = 2

var traceLog = ctrl.Log.WithName("lock-trace")

func tracing() (logr.Logger, bool) {
	l := traceLog.V(traceV)
	return l, l.Enabled()
}

// traceEvent logs a LockRequest event for key k and what became of it.
func traceEvent(kind, k string, lr *locksv1.LockRequest, what string) {
	l, ok := tracing()
	if !ok || lr == nil {
		return
	}
	l.Info("event", "kind", kind, "key", k, "request", lr.Name, "rv", lr.ResourceVersion,
		"phase", lr.Status.Phase, "release", lr.Spec.Release, "what", what)
}

// traceLockEvents passes every ProjectLock event, and logs it.
func traceLockEvents() predicate.Funcs {
	trace := func(kind string, o client.Object) bool {
		if l, ok := tracing(); ok {
			l.Info("projectlock event", "kind", kind, "key", client.ObjectKeyFromObject(o).String(), "rv", o.GetResourceVersion())
		}
		return true
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return trace("create", e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return trace("update", e.ObjectNew) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return trace("delete", e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return trace("generic", e.Object) },
	}
}

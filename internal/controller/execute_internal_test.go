package controller

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/turnstile-dev/turnstile/internal/queue"
)

// TestFailedIsTheOnePlaceAfterAConflict: a write that lost a race (conflict, gone, created by
// someone else) requeues the key soon and is counted by its step; any other failure is an error.
func TestFailedIsTheOnePlaceAfterAConflict(t *testing.T) {
	r := NewLockReconciler(nil, nil, nil)
	gr := schema.GroupResource{Group: "locks.turnstile.dev", Resource: "projectlocks"}
	lost := []error{apierrors.NewConflict(gr, "k", errors.New("changed")), apierrors.NewNotFound(gr, "k"), apierrors.NewAlreadyExists(gr, "k")}
	for _, err := range lost {
		res, got := r.failed(queue.Write{Kind: queue.WriteLockStatus, Step: queue.StepLock, Object: "k"}, err)
		if got != nil || res.RequeueAfter != conflictRetry {
			t.Errorf("after %v: %+v, %v; want a requeue after %s and no error", err, res, got, conflictRetry)
		}
	}
	if n := testutil.ToFloat64(r.metrics.StepConflicts.WithLabelValues("projectlock")); n != 3 {
		t.Errorf("conflicts counted at step projectlock = %v, want 3", n)
	}
	if _, err := r.failed(queue.Write{Kind: queue.WriteGrant, Step: queue.StepGrant, Object: "a"}, errors.New("boom")); err == nil {
		t.Errorf("a failure that is not a lost race must be an error")
	}
	if n := testutil.ToFloat64(r.metrics.StepConflicts.WithLabelValues("grant")); n != 0 {
		t.Errorf("an error counted as a conflict: %v", n)
	}
}

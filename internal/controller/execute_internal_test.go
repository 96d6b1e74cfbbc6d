package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

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

// TestDeadlineCountsFromTheRead: a decision's deadline (an expiry, a wait timeout) is a time;
// the requeue that brings the key back for it is what is left of it when the plan is written,
// not the whole delay again from then (under load a plan took seconds, and every expiry came
// that much late).
func TestDeadlineCountsFromTheRead(t *testing.T) {
	read := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(read)
	r := NewLockReconciler(nil, nil, nil, WithClock(clk))
	for _, tc := range []struct {
		took, want time.Duration
	}{
		{0, 10 * time.Second},
		{4 * time.Second, 6 * time.Second},
		{12 * time.Second, time.Millisecond}, // past due: at once
	} {
		clk.SetTime(read.Add(tc.took))
		d := queue.Decision{RequeueAfter: 10 * time.Second}
		x := &execution{r: r, in: queue.Input{Now: read}, d: d, result: reconcile.Result{RequeueAfter: d.RequeueAfter}}
		x.done(context.Background())
		if x.result.RequeueAfter != tc.want {
			t.Errorf("a plan that took %s: requeue after %s, want %s", tc.took, x.result.RequeueAfter, tc.want)
		}
	}
}

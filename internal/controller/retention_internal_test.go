package controller

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/event"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// TestFinished: the retention reconciler is only woken by requests in a final phase.
func TestFinished(t *testing.T) {
	at := func(p locksv1.LockRequestPhase) *locksv1.LockRequest {
		lr := &locksv1.LockRequest{}
		lr.Status.Phase = p
		return lr
	}
	p := finished()
	for _, tc := range []struct {
		phase locksv1.LockRequestPhase
		want  bool
	}{
		{"", false},
		{locksv1.PhasePending, false},
		{locksv1.PhaseGranted, false},
		{locksv1.PhaseReleased, true},
		{locksv1.PhaseExpired, true},
		{locksv1.PhaseFailed, true},
	} {
		lr := at(tc.phase)
		if got := p.Create(event.CreateEvent{Object: lr}); got != tc.want {
			t.Errorf("create of a request %q: %t, want %t", tc.phase, got, tc.want)
		}
		if got := p.Update(event.UpdateEvent{ObjectOld: at(locksv1.PhaseGranted), ObjectNew: lr}); got != tc.want {
			t.Errorf("update to %q: %t, want %t", tc.phase, got, tc.want)
		}
		if got := p.Generic(event.GenericEvent{Object: lr}); got != tc.want {
			t.Errorf("generic event of a request %q: %t, want %t", tc.phase, got, tc.want)
		}
		if p.Delete(event.DeleteEvent{Object: lr}) {
			t.Errorf("delete of a request %q passes: a deleted request has nothing left to delete", tc.phase)
		}
	}
}

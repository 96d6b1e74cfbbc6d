package spoke

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

var endNow = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func grantedHub(token int64) *locksv1.LockRequest {
	return &locksv1.LockRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "eu-west-1.bob", UID: k8stypes.UID("uid-bob")},
		Status:     locksv1.LockRequestStatus{Phase: locksv1.PhaseGranted, FencingToken: token},
	}
}

// TestEnded: a grant the hub still shows Granted, released or being deleted, waits for this
// spoke; one not granted, or final, does not.
func TestEnded(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(*locksv1.LockRequest)
		want   bool
	}{
		"granted":                   {func(*locksv1.LockRequest) {}, false},
		"granted, released":         {func(l *locksv1.LockRequest) { l.Spec.Release = true }, true},
		"granted, being deleted":    {func(l *locksv1.LockRequest) { l.DeletionTimestamp = &metav1.Time{Time: endNow} }, true},
		"released, final already":   {func(l *locksv1.LockRequest) { l.Spec.Release = true; l.Status.Phase = locksv1.PhaseReleased }, false},
		"waiting, released":         {func(l *locksv1.LockRequest) { l.Spec.Release = true; l.Status.Phase = locksv1.PhasePending }, false},
		"granted, its stop said":    {func(l *locksv1.LockRequest) { l.Spec.Release = true; markStopped(l) }, true},
		"granted, expired by clock": {func(l *locksv1.LockRequest) { l.Status.ExpiresAt = &metav1.Time{Time: endNow.Add(-time.Hour)} }, false},
	} {
		t.Run(name, func(t *testing.T) {
			hub := grantedHub(7)
			tc.change(hub)
			if got := Ended(hub); got != tc.want {
				t.Errorf("Ended = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestEndedStatus: a spoke request whose hub grant an admin ended shows it no more (final,
// Released, Stalled: kstatus Failed; the reason and the hub request named), whether it ran or
// was never let go; one its own holder released or deleted keeps what it shows.
func TestEndedStatus(t *testing.T) {
	hub := grantedHub(7)
	hub.Spec.Release = true
	for name, spoke := range map[string]*locksv1.LockRequest{
		"running":        {Status: locksv1.LockRequestStatus{Phase: locksv1.PhaseGranted, FencingToken: 7}},
		"never let go":   {Status: locksv1.LockRequestStatus{Phase: locksv1.PhasePending, QueuePosition: 1, BlockedBy: "alice"}},
		"not seen yet":   {},
		"another's view": {Status: locksv1.LockRequestStatus{Phase: locksv1.PhaseGranted, FencingToken: 5}},
	} {
		t.Run(name, func(t *testing.T) {
			got := EndedStatus(spoke, hub, "eu-west-1", endNow)
			if got.Phase != locksv1.PhaseReleased || got.FinishedAt == nil || got.QueuePosition != 0 || got.BlockedBy != "" {
				t.Fatalf("%+v: want Released, finished, out of the queue", got)
			}
			c := meta.FindStatusCondition(got.Conditions, locksv1.ConditionGranted)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonEndedOnHub ||
				c.Message != "its hub request team/eu-west-1.bob was released on the hub (by an admin there): the holder in this cluster (eu-west-1) is stopped, and the hub hands the lock on once this spoke has said so" {
				t.Errorf("Granted %+v", c)
			}
			if !meta.IsStatusConditionTrue(got.Conditions, locksv1.ConditionStalled) {
				t.Error("not Stalled: kstatus would not read the ended grant as Failed")
			}
		})
	}
	own := &locksv1.LockRequest{Spec: locksv1.LockRequestSpec{Release: true}, Status: locksv1.LockRequestStatus{Phase: locksv1.PhaseGranted, FencingToken: 7}}
	if got := EndedStatus(own, hub, "eu-west-1", endNow); got.Phase != locksv1.PhaseGranted {
		t.Errorf("a request its own holder released: %s, want what it showed (the hub's final status follows)", got.Phase)
	}
}

// TestNotForDoneRequests: a grant is never let go to a spoke request released or being deleted
// (the agent may have said its stop with the release); a holder already shown, and anything not
// a grant, pass.
func TestNotForDoneRequests(t *testing.T) {
	grant := locksv1.LockRequestStatus{Phase: locksv1.PhaseGranted, FencingToken: 7}
	for name, tc := range map[string]struct {
		spoke *locksv1.LockRequest
		want  locksv1.LockRequestPhase
	}{
		"a live waiter gets it":           {&locksv1.LockRequest{Status: locksv1.LockRequestStatus{Phase: locksv1.PhasePending}}, locksv1.PhaseGranted},
		"a released waiter does not":      {&locksv1.LockRequest{Spec: locksv1.LockRequestSpec{Release: true}, Status: locksv1.LockRequestStatus{Phase: locksv1.PhasePending}}, locksv1.PhasePending},
		"a waiter being deleted does not": {&locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{Time: endNow}}}, locksv1.PhasePending},
		"a released holder keeps showing": {&locksv1.LockRequest{Spec: locksv1.LockRequestSpec{Release: true}, Status: grant}, locksv1.PhaseGranted},
	} {
		t.Run(name, func(t *testing.T) {
			if got := notForDoneRequests(tc.spoke, grant); got.Phase != tc.want {
				t.Errorf("%s, want %s", got.Phase, tc.want)
			}
		})
	}
}

func TestMarkStopped(t *testing.T) {
	hub := grantedHub(42)
	markStopped(hub)
	if !locksv1.SpokeStopped(hub) || hub.Annotations[locksv1.AnnotationSpokeStopped] != "42" {
		t.Errorf("annotations %v", hub.Annotations)
	}
	hub.Status.FencingToken = 43
	if locksv1.SpokeStopped(hub) {
		t.Error("a stop said for token 42 counts for a grant of token 43")
	}
	waiting := grantedHub(0)
	waiting.Status.Phase = locksv1.PhasePending
	if markStopped(waiting); waiting.Annotations != nil {
		t.Errorf("a stop said for a request the view does not show granted: %v", waiting.Annotations)
	}
}

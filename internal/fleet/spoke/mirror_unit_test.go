package spoke_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
)

// TestMirrorCommandLock: a CommandLock mirror is the hub's freeze (spec, status, labels) marked
// as a mirror, dated and naming the spoke's cluster, without the hub's finalizers, annotations
// or write freeze.
func TestMirrorCommandLock(t *testing.T) {
	seen := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	hub := &locksv1.CommandLock{
		ObjectMeta: metav1.ObjectMeta{Name: "apply", ResourceVersion: "42", Labels: map[string]string{"team": "platform"},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}, Finalizers: []string{"x/y"}},
		Spec: locksv1.CommandLockSpec{Locked: true, Reason: "weekend", Clusters: &locksv1.ClusterScope{Names: []string{"eu-west-1"}},
			Admission: &locksv1.AdmissionFreeze{Resources: []locksv1.AdmissionResources{{APIGroups: []string{"apps"}}}}},
		Status: locksv1.CommandLockStatus{ActiveHolders: 2, Admission: &locksv1.AdmissionStatus{}},
	}
	got := spoke.MirrorCommandLock(hub, "eu-west-1", seen)
	want := &locksv1.CommandLock{
		ObjectMeta: metav1.ObjectMeta{Name: "apply",
			Labels: map[string]string{"team": "platform", locksv1.LabelMirror: locksv1.MirrorHub},
			Annotations: map[string]string{locksv1.AnnotationHubResourceVersion: "42", locksv1.AnnotationHubSeenAt: "2026-11-28T12:00:00Z",
				locksv1.AnnotationMirrorCluster: "eu-west-1"}},
		Spec:   locksv1.CommandLockSpec{Locked: true, Reason: "weekend", Clusters: &locksv1.ClusterScope{Names: []string{"eu-west-1"}}},
		Status: locksv1.CommandLockStatus{ActiveHolders: 2},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MirrorCommandLock (-want +got):\n%s", diff)
	}
	if hub.Spec.Admission == nil || hub.Labels[locksv1.LabelMirror] != "" {
		t.Errorf("MirrorCommandLock changed the hub's object: %+v", hub)
	}
	if got := spoke.HubSeenAt(spoke.MirrorCommandLock(hub, "eu-west-1", time.Time{})); !got.IsZero() {
		t.Errorf("a mirror made before the hub was read is undated, got %v", got)
	}
}

func TestMirrorProjectLock(t *testing.T) {
	hub := &locksv1.ProjectLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "k", ResourceVersion: "7", Finalizers: []string{locksv1.ReleaseHoldersFinalizer},
			Annotations: map[string]string{"a": "b"}},
		Spec:   locksv1.ProjectLockSpec{LockTarget: locksv1.LockTarget{Repo: "acme/infra", Path: "vpc", Workspace: "default"}},
		Status: locksv1.ProjectLockStatus{FencingToken: 9},
	}
	got := spoke.MirrorProjectLock(hub)
	want := &locksv1.ProjectLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "k", Labels: map[string]string{locksv1.LabelMirror: locksv1.MirrorHub},
			Annotations: map[string]string{locksv1.AnnotationHubResourceVersion: "7"}},
		Spec:   hub.Spec,
		Status: locksv1.ProjectLockStatus{FencingToken: 9},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MirrorProjectLock (-want +got):\n%s", diff)
	}
	if !spoke.IsMirror(got) || spoke.IsMirror(hub) {
		t.Error("IsMirror")
	}
}

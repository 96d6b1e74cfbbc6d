package controller

import (
	"reflect"
	"testing"

	toolscache "k8s.io/client-go/tools/cache"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// TestRequestCounts: adds, phase changes, deletes and tombstones keep the counts, and a
// namespace whose requests are all gone is forgotten.
func TestRequestCounts(t *testing.T) {
	req := func(ns string, p locksv1.LockRequestPhase) *locksv1.LockRequest {
		lr := &locksv1.LockRequest{}
		lr.Namespace, lr.Status.Phase = ns, p
		return lr
	}
	snapshot := func(c *RequestCounts) map[string]int {
		out := map[string]int{}
		c.Each(func(ns string, p locksv1.LockRequestPhase, n int) { out[ns+"/"+string(p)] = n })
		return out
	}
	c := NewRequestCounts()
	c.OnAdd(req("a", ""), true)
	c.OnAdd(req("a", locksv1.PhaseGranted), true)
	c.OnAdd(req("b", locksv1.PhasePending), false)
	c.OnUpdate(req("a", ""), req("a", locksv1.PhasePending))
	if got, want := snapshot(c), map[string]int{"a/Pending": 1, "a/Granted": 1, "b/Pending": 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("counts %v, want %v (an undecided request counts as Pending)", got, want)
	}
	c.OnUpdate(req("a", locksv1.PhaseGranted), req("a", locksv1.PhaseReleased))
	c.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "b/x", Obj: req("b", locksv1.PhasePending)})
	if got, want := snapshot(c), map[string]int{"a/Pending": 1, "a/Released": 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("counts %v, want %v", got, want)
	}
	if got := c.Namespaces(); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("namespaces %v, want [a]: b has no requests left", got)
	}
	c.OnDelete(req("a", locksv1.PhasePending))
	c.OnDelete(req("a", locksv1.PhaseReleased))
	if got := c.Namespaces(); len(got) != 0 {
		t.Errorf("namespaces %v, want none", got)
	}
}

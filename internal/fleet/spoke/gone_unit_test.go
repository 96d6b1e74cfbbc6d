package spoke

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

// TestParseWaitTrustsTheStop: the wait read back from a request's annotations (which its owner
// may write) is only a stopped request's (its status, the manager's, says so), and its hand-on
// time is taken no later than the stop + 1 s + L, whatever the annotation says.
func TestParseWaitTrustsTheStop(t *testing.T) {
	const lease = 20 * time.Second
	stop := time.Date(2026, 11, 29, 10, 2, 40, 0, time.UTC)
	stopped := func(handOn string) *locksv1.LockRequest {
		lr := &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "pod-apply", Annotations: map[string]string{
			workload.AnnotationWorkload: "pod/apply", workload.AnnotationWorkloadUID: "u1", AnnotationHandOn: handOn}}}
		lr.Status = LostStatus(lr, "spoke-eu", skew.State{}, skew.Verdict{Stop: true}, stop)
		return lr
	}
	for _, tc := range []struct {
		name string
		lr   *locksv1.LockRequest
		want time.Time // zero: no wait
	}{
		{"the hand-on time written with the stop", stopped("2026-11-29T10:02:53.5Z renewTime+L"), stop.Add(13500 * time.Millisecond)},
		{"a hand-on time written far ahead is taken at the stop + 1 s + L", stopped("2030-01-01T00:00:00Z renewTime+L"), stop.Add(21 * time.Second)},
		{"unreadable", stopped("soon"), time.Time{}},
		{"a request not stopped (its status says nothing of it) has no wait", func() *locksv1.LockRequest {
			lr := stopped("2026-11-29T10:02:53Z renewTime+L")
			lr.Status = locksv1.LockRequestStatus{Phase: locksv1.PhaseGranted}
			return lr
		}(), time.Time{}},
		{"a request a user made (no workload) has none", func() *locksv1.LockRequest {
			lr := stopped("2026-11-29T10:02:53Z renewTime+L")
			delete(lr.Annotations, workload.AnnotationWorkload)
			return lr
		}(), time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := parseWait(tc.lr, lease)
			switch {
			case tc.want.IsZero() && w != nil:
				t.Fatalf("a wait until %s, want none", w.handOn)
			case tc.want.IsZero():
			case w == nil:
				t.Fatalf("no wait, want one until %s", tc.want)
			case !w.handOn.Equal(tc.want):
				t.Errorf("hand-on %s, want %s", w.handOn, tc.want)
			}
		})
	}
}

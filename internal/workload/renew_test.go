package workload

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

func TestNextRenewal(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { m := metav1.NewTime(t0.Add(d)); return &m }
	granted := func(term time.Duration) *locksv1.LockRequest {
		return &locksv1.LockRequest{
			ObjectMeta: metav1.ObjectMeta{Generation: 1},
			Status: locksv1.LockRequestStatus{Phase: locksv1.PhaseGranted, ObservedGeneration: 1,
				GrantedAt: at(0), ExpiresAt: at(term)},
		}
	}
	tests := map[string]struct {
		lr   func() *locksv1.LockRequest
		now  time.Duration
		want renewal
	}{
		"not due before a quarter of the term: back when it is": {
			lr: func() *locksv1.LockRequest { return granted(40 * time.Minute) }, now: 4 * time.Minute,
			want: renewal{after: 6 * time.Minute},
		},
		"due at a quarter of the term: an even term falls a second": {
			lr: func() *locksv1.LockRequest { return granted(40 * time.Minute) }, now: 10 * time.Minute,
			want: renewal{ttl: 40*time.Minute - time.Second, after: 10 * time.Minute},
		},
		"an odd term (the last renewal fell) rises a second, counted from renewedAt": {
			lr: func() *locksv1.LockRequest {
				lr := granted(0)
				lr.Status.RenewedAt, lr.Status.ExpiresAt = at(time.Hour), at(time.Hour+7*time.Second)
				return lr
			},
			now:  time.Hour + 2*time.Second,
			want: renewal{ttl: 8 * time.Second, after: 1750 * time.Millisecond},
		},
		"a refused renewal (over the maximum) is followed by a lower ttl": {
			lr: func() *locksv1.LockRequest {
				lr := granted(7 * time.Second)
				lr.Status.Conditions = []metav1.Condition{{Type: locksv1.ConditionGranted, Status: metav1.ConditionTrue, Reason: locksv1.ReasonRenewalRefused}}
				return lr
			},
			now:  5 * time.Second,
			want: renewal{ttl: 6 * time.Second, after: 1750 * time.Millisecond},
		},
		"a renewal not answered yet is not made again": {
			lr: func() *locksv1.LockRequest {
				lr := granted(8 * time.Second)
				lr.Generation = 2
				return lr
			},
			now:  5 * time.Second,
			want: renewal{after: time.Second},
		},
		"a one-second term rises to two": {
			lr: func() *locksv1.LockRequest { return granted(time.Second) }, now: time.Second,
			want: renewal{ttl: 2 * time.Second, after: 250 * time.Millisecond},
		},
		"released: nothing to renew": {
			lr: func() *locksv1.LockRequest {
				lr := granted(8 * time.Second)
				lr.Spec.Release = true
				return lr
			},
			now: 5 * time.Second,
		},
		"expired: nothing to renew": {
			lr: func() *locksv1.LockRequest {
				lr := granted(8 * time.Second)
				lr.Status.Phase = locksv1.PhaseExpired
				return lr
			},
			now: 9 * time.Second,
		},
		"waiting: nothing to renew": {
			lr: func() *locksv1.LockRequest {
				return &locksv1.LockRequest{Status: locksv1.LockRequestStatus{Phase: locksv1.PhasePending}}
			},
			now: time.Minute,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := nextRenewal(tc.lr(), t0.Add(tc.now))
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(renewal{})); diff != "" {
				t.Errorf("nextRenewal (-want +got):\n%s", diff)
			}
		})
	}
}

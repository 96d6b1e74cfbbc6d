package workdir

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestLeaseExpiry(t *testing.T) {
	t0 := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	micro := func(d time.Duration) *metav1.MicroTime { return ptr.To(metav1.NewMicroTime(t0.Add(d))) }
	type want struct {
		Expiry, Renewed time.Time
		OK              bool
		LapsedAt10s     bool
	}
	cases := map[string]struct {
		spec coordinationv1.LeaseSpec
		want want
	}{
		"renewed": {
			spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](15), AcquireTime: micro(0), RenewTime: micro(5 * time.Second)},
			want: want{Expiry: t0.Add(20 * time.Second), Renewed: t0.Add(5 * time.Second), OK: true},
		},
		"acquired, never renewed": {
			spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](5), AcquireTime: micro(time.Second)},
			want: want{Expiry: t0.Add(6 * time.Second), Renewed: t0.Add(time.Second), OK: true, LapsedAt10s: true},
		},
		"neither: counted from its creation": {
			spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](5)},
			want: want{Expiry: t0.Add(5 * time.Second), Renewed: t0, OK: true, LapsedAt10s: true},
		},
		"no duration: lapses only when deleted": {
			spec: coordinationv1.LeaseSpec{RenewTime: micro(0)},
			want: want{Renewed: t0},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0)}, Spec: tc.spec}
			expiry, renewed, ok := LeaseExpiry(l)
			got := want{Expiry: expiry, Renewed: renewed, OK: ok, LapsedAt10s: leaseLapsed(l, t0.Add(10*time.Second))}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("LeaseExpiry (-want +got):\n%s", diff)
			}
		})
	}
}

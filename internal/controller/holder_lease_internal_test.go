package controller

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

var t0 = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)

func lease(renew *time.Time, acquire *time.Time, seconds *int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))}}
	if renew != nil {
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(*renew))
	}
	if acquire != nil {
		l.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(*acquire))
	}
	l.Spec.LeaseDurationSeconds = seconds
	return l
}

func TestJudgeLease(t *testing.T) {
	key := types.NamespacedName{Namespace: "team-a", Name: "runner-1"}
	renewed := t0.Add(-10 * time.Second)
	deleting := lease(&renewed, nil, ptr.To[int32](60))
	deleting.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	cases := map[string]struct {
		lease      *coordinationv1.Lease
		wantLost   string
		wantExpiry time.Time
	}{
		"renewed within its duration": {
			lease: lease(&renewed, nil, ptr.To[int32](15)), wantExpiry: t0.Add(5 * time.Second),
		},
		"lapsed exactly now": {
			lease:    lease(&renewed, nil, ptr.To[int32](10)),
			wantLost: "holder Lease team-a/runner-1 lapsed at 2026-03-14T09:00:00Z: last renewed 2026-03-14T08:59:50Z with a duration of 10s, the holder is gone",
		},
		"never renewed: acquireTime counts": {
			lease: lease(nil, &renewed, ptr.To[int32](15)), wantExpiry: t0.Add(5 * time.Second),
		},
		"neither renewed nor acquired: creation counts": {
			lease:    lease(nil, nil, ptr.To[int32](15)),
			wantLost: "holder Lease team-a/runner-1 lapsed at 2026-03-14T08:00:15Z: last renewed 2026-03-14T08:00:00Z with a duration of 15s, the holder is gone",
		},
		"no duration: only deletion ends it": {
			lease: lease(&renewed, nil, nil),
		},
		"being deleted": {
			lease: deleting, wantLost: "holder Lease team-a/runner-1 is being deleted: the holder is gone",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := judgeLease(key, tc.lease, t0)
			if got.lost != tc.wantLost || !got.expiry.Equal(tc.wantExpiry) {
				t.Errorf("judgeLease = {lost %q, expiry %v}, want {lost %q, expiry %v}", got.lost, got.expiry, tc.wantLost, tc.wantExpiry)
			}
		})
	}
}

func TestLeaseShortened(t *testing.T) {
	at := func(d time.Duration) *time.Time { return ptr.To(t0.Add(d)) }
	cases := map[string]struct {
		old, new *coordinationv1.Lease
		want     bool
	}{
		"a renewal pushes the expiry back: no reconcile": {
			old: lease(at(0), nil, ptr.To[int32](15)), new: lease(at(2*time.Second), nil, ptr.To[int32](15)), want: false,
		},
		"a shorter duration brings it forward": {
			old: lease(at(0), nil, ptr.To[int32](15)), new: lease(at(time.Second), nil, ptr.To[int32](1)), want: true,
		},
		"a duration appears": {
			old: lease(at(0), nil, nil), new: lease(at(0), nil, ptr.To[int32](15)), want: true,
		},
		"unchanged": {
			old: lease(at(0), nil, ptr.To[int32](15)), new: lease(at(0), nil, ptr.To[int32](15)), want: false,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := leaseShortened().Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
				t.Errorf("Update = %v, want %v", got, tc.want)
			}
		})
	}
	if !leaseShortened().Delete(event.DeleteEvent{Object: lease(at(0), nil, nil)}) {
		t.Error("a deleted Lease must be reconciled")
	}
}

package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// lrAt is request a at resourceVersion rv, its status only a phase.
func lrAt(rv string, phase locksv1.LockRequestPhase) *locksv1.LockRequest {
	return wrappers.MakeLockRequest("a", "ns").UID("uid-a").ResourceVersion(rv).
		Status(locksv1.LockRequestStatus{Phase: phase}).Obj()
}

func TestDecisionInputChanged(t *testing.T) {
	base := lrAt("1", locksv1.PhasePending)
	base.Status.QueuePosition = 5
	cases := map[string]struct {
		mutate func(*locksv1.LockRequest)
		want   bool
	}{
		"a refreshed position and message": {func(lr *locksv1.LockRequest) {
			lr.Status.QueuePosition = 4
			lr.Status.BlockedBy = "locked by bob"
			lr.Status.Conditions = []metav1.Condition{{Type: locksv1.ConditionGranted, Message: "position 4 of 9"}}
		}, false},
		"granted":             {func(lr *locksv1.LockRequest) { lr.Status.Phase = locksv1.PhaseGranted }, true},
		"a spec change":       {func(lr *locksv1.LockRequest) { lr.Generation++ }, true},
		"deletion started":    {func(lr *locksv1.LockRequest) { lr.DeletionTimestamp = &metav1.Time{} }, true},
		"queued (stamped)":    {func(lr *locksv1.LockRequest) { lr.Status.QueuedAt = &metav1.MicroTime{} }, true},
		"one lock held":       {func(lr *locksv1.LockRequest) { lr.Status.Locks = []locksv1.LockStatus{{Name: "k", Held: true}} }, true},
		"a label for queries": {func(lr *locksv1.LockRequest) { lr.Labels = map[string]string{"team": "a"} }, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			changed := base.DeepCopy()
			tc.mutate(changed)
			if got := decisionInputChanged(base, changed); got != tc.want {
				t.Errorf("decisionInputChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestOwnEchoes: the watch event of a status a key just wrote wakes every other key the request
// names, but not the writer; anything else still wakes them all.
func TestOwnEchoes(t *testing.T) {
	now := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	// A request on two keys, granted k1 of them; the event's old object is what the write replaced.
	twoKeys := func(rv string) *locksv1.LockRequest {
		lr := lrAt(rv, locksv1.PhasePending)
		lr.Spec.Locks = []locksv1.LockTarget{{Repo: "acme/infra", Path: "a", Workspace: "default"}, {Repo: "acme/infra", Path: "b", Workspace: "default"}}
		return lr
	}
	names := lockkey.Names(twoKeys("1").Spec.Locks)
	writer := types.NamespacedName{Namespace: "ns", Name: names[0]}
	other := types.NamespacedName{Namespace: "ns", Name: names[1]}
	held := func(lr *locksv1.LockRequest) *locksv1.LockRequest {
		lr.Status.Locks = []locksv1.LockStatus{{Name: names[0], Held: true}, {Name: names[1]}}
		return lr
	}
	cases := map[string]struct {
		wrote     *locksv1.LockRequest // what writer's reconcile wrote, if anything
		event     *locksv1.LockRequest // the new object of the update event
		wantWoken []string
	}{
		"our own write: only the other key": {
			wrote: held(twoKeys("11")), event: held(twoKeys("11")), wantWoken: []string{other.Name},
		},
		"nothing written by us: both keys": {
			event: held(twoKeys("11")), wantWoken: []string{writer.Name, other.Name},
		},
		"a later write by someone else: both keys": {
			wrote: held(twoKeys("11")), event: held(twoKeys("12")), wantWoken: []string{writer.Name, other.Name},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := NewLockReconciler(nil, nil, nil)
			if tc.wrote != nil {
				r.overlay.WroteRequest(tc.wrote, writer, now)
			}
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			r.requestEvents().Update(context.Background(), event.UpdateEvent{ObjectOld: twoKeys("10"), ObjectNew: tc.event}, q)
			var woken []string
			for q.Len() > 0 {
				k, _ := q.Get()
				woken = append(woken, k.Name)
				q.Done(k)
			}
			if diff := cmp.Diff(tc.wantWoken, woken, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("keys woken (-want +got):\n%s", diff)
			}
			// A reconcile of the writer that listed the cache just before the echo still reads
			// its own write, not the version it replaced.
			if tc.wrote != nil {
				if got := r.overlay.Request(twoKeys("10")); got.ResourceVersion != tc.wrote.ResourceVersion {
					t.Errorf("after the echo, a read of the replaced version gave rv %s, want our write %s", got.ResourceVersion, tc.wrote.ResourceVersion)
				}
			}
		})
	}

	// The ProjectLock: only its own key writes it, so its echo wakes nobody.
	r := NewLockReconciler(nil, nil, nil)
	pl := &locksv1.ProjectLock{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "k", UID: "uid-k", ResourceVersion: "21"}}
	r.overlay.WroteProjectLock(pl, now)
	older, newer := pl.DeepCopy(), pl.DeepCopy()
	older.ResourceVersion, newer.ResourceVersion = "20", "22"
	echo := r.notOwnEcho()
	if !echo.Update(event.UpdateEvent{ObjectOld: older, ObjectNew: newer}) {
		t.Errorf("a ProjectLock version we did not write must wake its key")
	}
	if echo.Update(event.UpdateEvent{ObjectOld: older, ObjectNew: pl.DeepCopy()}) {
		t.Errorf("the echo of our own ProjectLock write must not wake its key")
	}
	if got := r.overlay.ProjectLock(older); got.ResourceVersion != pl.ResourceVersion {
		t.Errorf("after the echo, a read of the replaced ProjectLock gave rv %s, want our write %s", got.ResourceVersion, pl.ResourceVersion)
	}
}

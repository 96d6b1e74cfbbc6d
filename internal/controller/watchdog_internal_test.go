package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// TestPendingWork: each kind of work a decision of a key would do is seen, where it is the key's
// (a request waits in its first key), and a settled key, or one held back by a freeze, has none.
func TestPendingWork(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	vpc := locksv1.LockTarget{Repo: "acme/infra", Path: "vpc", Workspace: "default"}
	dns := locksv1.LockTarget{Repo: "acme/infra", Path: "dns", Workspace: "default"}
	name := lockkey.Name(vpc)
	req := func(n string) *LockRequestWrapper {
		return MakeLockRequest(n, "ns").Lock(vpc.Repo, vpc.Path, vpc.Workspace).Owner(n, 1).UID("uid-" + n)
	}
	holderA := locksv1.LockHolder{Owner: "a", Pull: 1, Requests: []locksv1.HolderRequest{{Name: "a", UID: "uid-a"}}}
	held := MakeProjectLock("ns", vpc, name).Holder(holderA).Token(7).Queue(1).Obj()
	free := MakeProjectLock("ns", vpc, name).Token(7).Queue(1).Obj()
	sharedHeld := free.DeepCopy()
	sharedHeld.Status.SharedHolders = []locksv1.SharedHolder{{Request: locksv1.HolderRequest{Name: "r", UID: "uid-r"}, Owner: "r"}}
	granted := req("a").Granted(now.Add(-time.Minute), 7)
	waiting := req("b").Waiting(locksv1.ReasonQueued, "locked by pull #1 (a); position 1 of 1", 1, "a#1")
	// counting is the key shared holders hold with maxHolders 2, n of them listed.
	counting := func(n int) *locksv1.ProjectLock {
		pl := free.DeepCopy()
		pl.Status.MaxHolders = 2
		for i := range n {
			r := "r" + strings.Repeat("1", i)
			pl.Status.SharedHolders = append(pl.Status.SharedHolders, locksv1.SharedHolder{Request: locksv1.HolderRequest{Name: r, UID: "uid-" + r}, Owner: r})
		}
		pl.Status.HolderCount = int32(n)
		return pl
	}
	sharedWaiting := func(position int32) *LockRequestWrapper {
		return req("s").Shared().MaxHolders(2).Waiting(locksv1.ReasonQueued, "held shared by 1 of at most 2", position, "")
	}
	cases := map[string]struct {
		lock *locksv1.ProjectLock
		reqs []*locksv1.LockRequest
		want []string
	}{
		"a settled key: a holder and a waiter": {
			lock: held, reqs: []*locksv1.LockRequest{granted.Obj(), waiting.Obj()},
		},
		"a request without a status": {
			lock: held, reqs: []*locksv1.LockRequest{granted.Obj(), req("c").Obj()}, want: []string{"the first status of c"},
		},
		"a request without a status waits in its first key only": {
			lock: held, reqs: []*locksv1.LockRequest{granted.Obj(), req("c").Lock(dns.Repo, dns.Path, dns.Workspace).Obj()},
		},
		"a holder asked to release": {
			lock: held, reqs: []*locksv1.LockRequest{req("a").Release().Granted(now.Add(-time.Minute), 7).Obj()}, want: []string{"the release of a"},
		},
		"a spoke's holder released, its spoke not heard yet: nothing to decide until it is": {
			lock: held, reqs: []*locksv1.LockRequest{req("a").Cluster("eu").Lease("spoke-eu").Annotation(locksv1.AnnotationConfirmsStops, "true").Release().Granted(now.Add(-time.Minute), 7).Obj()},
		},
		"a spoke's holder released and its stop said": {
			lock: held, reqs: []*locksv1.LockRequest{req("a").Cluster("eu").Lease("spoke-eu").Annotation(locksv1.AnnotationConfirmsStops, "true").Release().Annotation(locksv1.AnnotationSpokeStopped, "7").Granted(now.Add(-time.Minute), 7).Obj()},
			want: []string{"the release of a"},
		},
		"a holder past its expiry": {
			lock: held, reqs: []*locksv1.LockRequest{req("a").TTL(30*time.Second).Granted(now.Add(-time.Minute), 7).Obj()}, want: []string{"the expiry of a"},
		},
		"a holder before its expiry": {
			lock: held, reqs: []*locksv1.LockRequest{req("a").TTL(2*time.Minute).Granted(now.Add(-time.Minute), 7).Obj()},
		},
		"a holder the ProjectLock lists that is gone": {
			lock: held, reqs: []*locksv1.LockRequest{waiting.Obj()}, want: []string{"the release of a (gone)"},
		},
		"a holder the ProjectLock lists that is final": {
			lock: held, reqs: []*locksv1.LockRequest{req("a").Granted(now.Add(-time.Minute), 7).Phase(locksv1.PhaseReleased).Obj()},
			want: []string{"the release of a (Released, still listed)"},
		},
		"a grant the ProjectLock lists that was never written": {
			lock: held, reqs: []*locksv1.LockRequest{req("a").Waiting(locksv1.ReasonQueued, "position 1 of 1", 1, "").Obj()},
			want: []string{"the grant of a (listed by the ProjectLock, not written)"},
		},
		"a free key with a waiter queued behind nobody": {
			lock: free, reqs: []*locksv1.LockRequest{waiting.Obj()}, want: []string{"a holder for the free key (b queued)"},
		},
		"a key shared holders hold, with a waiter queued": {
			lock: sharedHeld, reqs: []*locksv1.LockRequest{req("r").Granted(now.Add(-time.Minute), 7).Obj(), waiting.Obj()},
		},
		"a counting key with a place free, and a shared waiter next in line": {
			lock: counting(1), reqs: []*locksv1.LockRequest{req("r").Shared().MaxHolders(2).Granted(now.Add(-time.Minute), 7).Obj(), sharedWaiting(1).Obj()},
			want: []string{"a holder for a free place of the counting key (s queued)"},
		},
		"a counting key with every place taken": {
			lock: counting(2), reqs: []*locksv1.LockRequest{req("r").Shared().MaxHolders(2).Granted(now.Add(-time.Minute), 7).Obj(),
				req("r1").Shared().MaxHolders(2).Granted(now.Add(-time.Minute), 8).Obj(), sharedWaiting(1).Obj()},
		},
		"a counting key with a place free, and its waiter behind another": {
			lock: counting(1), reqs: []*locksv1.LockRequest{req("r").Shared().MaxHolders(2).Granted(now.Add(-time.Minute), 7).Obj(), sharedWaiting(2).Obj()},
		},
		"a counting key with a place free, and an exclusive waiter next in line": {
			lock: counting(1), reqs: []*locksv1.LockRequest{req("r").Shared().MaxHolders(2).Granted(now.Add(-time.Minute), 7).Obj(), waiting.Obj()},
		},
		"a free key whose waiter a freeze holds back": {
			lock: free, reqs: []*locksv1.LockRequest{req("b").Waiting(locksv1.ReasonCommandLocked, "Apply commands are locked globally", 1, "apply").Obj()},
		},
		"a new key: no ProjectLock yet, a request without a status": {
			reqs: []*locksv1.LockRequest{req("c").Obj()}, want: []string{"the first status of c"},
		},
	}
	for tn, tc := range cases {
		t.Run(tn, func(t *testing.T) {
			got := PendingWork(name, tc.lock, tc.reqs, now)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PendingWork (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKeyTracker: the tracked queue says of a key whether it is queued (since when), held by a
// worker (since when) or neither, and counts the adds that are events (not delayed requeues).
func TestKeyTracker(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC))
	kt := newKeyTracker(clk)
	q := newTrackedQueue(kt, nil)("test", nil)
	defer q.ShutDown()
	k := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "key"}}
	t0 := clk.Now()

	q.AddAfter(k, time.Second)
	if due, held := kt.where(k); !due.Equal(t0.Add(time.Second)) || !held.IsZero() {
		t.Fatalf("after a delayed add: due %v, held %v; want due in a second, not held", due, held)
	}
	if n := kt.wakes(k); n != 0 {
		t.Errorf("a delayed requeue counted as an event: %d wakes", n)
	}
	q.Add(k)
	if due, _ := kt.where(k); !due.Equal(t0) {
		t.Errorf("after an event: due %v, want now", due)
	}
	if n := kt.wakes(k); n != 1 {
		t.Errorf("wakes = %d after one event, want 1", n)
	}
	clk.SetTime(t0.Add(time.Minute))
	got, _ := q.Get()
	if got != k {
		t.Fatalf("got %v, want %v", got, k)
	}
	if due, held := kt.where(k); !due.IsZero() || !held.Equal(t0.Add(time.Minute)) {
		t.Errorf("handed out: due %v, held %v; want not due, held since now", due, held)
	}
	q.Add(k) // an event while a worker holds it
	if n := kt.wakes(k); n != 2 {
		t.Errorf("wakes = %d, want 2: the event while the key was held woke it", n)
	}
	q.Done(k)
	if due, held := kt.where(k); due.IsZero() || !held.IsZero() {
		t.Errorf("done with an add pending: due %v, held %v; want queued, not held", due, held)
	}
	got, _ = q.Get()
	q.Done(got)
	if due, held := kt.where(k); !due.IsZero() || !held.IsZero() {
		t.Errorf("done: due %v, held %v; want the key forgotten", due, held)
	}
	if len(kt.keys) != 0 {
		t.Errorf("the tracker keeps %d keys nothing holds or queues", len(kt.keys))
	}
}

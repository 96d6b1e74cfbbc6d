package controller_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/cache"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/deadlock"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// laggingCache reads through to the API server like a cache that has caught up with everything
// but the requests it hides (created after the cache's last event) and the objects it still
// shows at an older version. It answers the field-index lists the reconciler makes of a cache.
type laggingCache struct {
	client.Client
	hidden []string        // LockRequest names the cache has not seen
	stale  []client.Object // objects the cache shows as they were
	// getsLive: a Get sees the stale objects as they are now (the cache moved on since a List).
	getsLive bool
}

func (c laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	for _, o := range c.stale {
		if !c.getsLive && client.ObjectKeyFromObject(o) == key && reflect.TypeOf(o) == reflect.TypeOf(obj) {
			reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(o.DeepCopyObject()).Elem())
			return nil
		}
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c laggingCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lrs, ok := list.(*locksv1.LockRequestList)
	if !ok {
		return c.Client.List(ctx, list, opts...)
	}
	var lo client.ListOptions
	lo.ApplyOptions(opts)
	var key string
	if lo.FieldSelector != nil {
		key, _ = lo.FieldSelector.RequiresExactMatch(cache.KeyIndex)
	}
	var all locksv1.LockRequestList
	if err := c.Client.List(ctx, &all, client.InNamespace(lo.Namespace)); err != nil {
		return err
	}
	lrs.Items = nil
	for _, lr := range all.Items {
		if slices.Contains(c.hidden, lr.Name) || (key != "" && !slices.Contains(lockkey.Names(lr.Spec.Locks), key)) {
			continue
		}
		for _, o := range c.stale {
			if old, ok := o.(*locksv1.LockRequest); ok && old.Namespace == lr.Namespace && old.Name == lr.Name {
				lr = *old.DeepCopy()
			}
		}
		lrs.Items = append(lrs.Items, lr)
	}
	return nil
}

type nopRecorder struct{}

func (nopRecorder) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...any) {}

// Each spec here fails when the guard it names is taken out of the code (hack/mutants).
var _ = Describe("Guards of the controllers", func() {
	It("reads a holder missing from a lagging cache live before its key moves on (the live holder read)", func() {
		ns := newNamespace()
		aliceHoldsBobWaits(ns)
		before := projectLock(ns, vpc)

		// A second reconciler whose cache has b but not the holder a; its API reader has both.
		r := controller.NewLockReconciler(laggingCache{Client: k8s, hidden: []string{"a"}}, k8s, nopRecorder{})
		key := types.NamespacedName{Namespace: ns, Name: lockkey.Name(vpc)}
		_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		Expect(err).NotTo(HaveOccurred())

		after := projectLock(ns, vpc)
		Expect(after.Status.Holder).NotTo(BeNil())
		Expect(after.Status.Holder.Requests).To(ConsistOf(locksv1.HolderRequest{Name: "a", UID: string(get(ns, "a").UID)}),
			"the key moved on from a holder the cache did not show")
		Expect(after.Status.FencingToken).To(Equal(before.Status.FencingToken))
		Expect(get(ns, "a").Status.Phase).To(Equal(locksv1.PhaseGranted))
		Expect(get(ns, "b").Status.Phase).To(Equal(locksv1.PhasePending))
	})
	It("reads a holder Lease the cache shows lapsed live before it releases the holder (the live Lease read)", func() {
		ns := newNamespace()
		lease := holderLease(ns, "runner", time.Hour)
		create(req("a", ns).Owner("alice", 1).Lease("runner").Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		create(req("b", ns).Owner("bob", 2).Obj())
		expectPhase(ns, "b", locksv1.PhasePending)

		// The cache still shows the Lease as renewed two hours ago; the runner has renewed it since.
		lapsed := lease.DeepCopy()
		lapsed.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(-2 * time.Hour)}
		r := controller.NewLockReconciler(laggingCache{Client: k8s, stale: []client.Object{lapsed}}, k8s, nopRecorder{})
		key := types.NamespacedName{Namespace: ns, Name: lockkey.Name(vpc)}
		_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		Expect(err).NotTo(HaveOccurred())

		Expect(get(ns, "a").Status.Phase).To(Equal(locksv1.PhaseGranted), "a live holder was released on a stale Lease")
		Expect(get(ns, "b").Status.Phase).To(Equal(locksv1.PhasePending))
		var live coordinationv1.Lease
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(lease), &live)).To(Succeed())
		Expect(live.Spec.RenewTime.Time).To(BeTemporally(">", lapsed.Spec.RenewTime.Time))
	})
	It("reads a holder missing from the cache live before it says a freeze is drained (the live holder read of Drained)", func() {
		ns := newNamespace()
		command := "apply-" + ns
		create(req("h", ns).Owner("alice", 1).Command(command).Obj())
		expectPhase(ns, "h", locksv1.PhaseGranted)
		// A granted request of a command counts for the "all" CommandLock of every later spec
		// (envtest deletes no namespace): let go of it at the end.
		DeferCleanup(func() { release(ns, "h"); expectPhase(ns, "h", locksv1.PhaseReleased) })
		freeze(command, "maintenance", nil)
		Eventually(clCond(command, locksv1.ConditionDrained), timeout, interval).Should(HavePrefix("False/"))

		// A second reconciler whose cache has not seen h; the ProjectLock lists it as holder.
		r := controller.NewCommandLockReconciler(laggingCache{Client: k8s, hidden: []string{"h"}}, k8s, nopRecorder{})
		// Every Drained it writes is checked, not the one read after it: the suite's manager
		// (whose cache has h) would write a wrong True back to False at once.
		drained := drainedWritten(command, func() {
			_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: command}})
			Expect(err).NotTo(HaveOccurred())
		})
		Expect(drained).NotTo(ContainElement(HavePrefix("True/")), "drained while h holds the key")
		Expect(clCond(command, locksv1.ConditionDrained)()).To(HavePrefix("False/"), "drained while h holds the key")
	})

	It("fails a deadlock victim only if it still waits (the victim's phase check)", func() {
		ns := newNamespace()
		k1, k2 := vpc, locksv1.LockTarget{Repo: vpc.Repo, Path: "modules/dns", Workspace: vpc.Workspace}
		on := func(name, owner string, pull int64, t locksv1.LockTarget) *locksv1.LockRequest {
			return MakeLockRequest(name, ns).Lock(t.Repo, t.Path, t.Workspace).Owner(owner, pull).Obj()
		}
		create(on("a1", "alice", 1, k1), on("b2", "bob", 2, k2))
		expectPhase(ns, "a1", locksv1.PhaseGranted)
		expectPhase(ns, "b2", locksv1.PhaseGranted)
		create(on("v-bob", "bob", 2, k1))
		expectPhase(ns, "v-bob", locksv1.PhasePending)
		waiting := get(ns, "v-bob")
		release(ns, "v-bob")
		expectPhase(ns, "v-bob", locksv1.PhaseReleased)
		create(on("w-alice", "alice", 1, k2))
		expectPhase(ns, "w-alice", locksv1.PhasePending)

		// The detector's list still shows v-bob waiting, which closes a cycle with w-alice; by
		// the time it reads the victim (the older waiter), v-bob has let go.
		det := controller.NewDeadlockDetector(laggingCache{Client: k8s, stale: []client.Object{waiting}, getsLive: true}, nopRecorder{},
			controller.WithDeadlockPolicy(deadlock.PolicyOldest))
		Expect(det.Check(ctx, ns)).To(Succeed())
		Expect(get(ns, "v-bob").Status.Phase).To(Equal(locksv1.PhaseReleased), "a released request was failed as a deadlock victim")
		Expect(get(ns, "w-alice").Status.Phase).To(Equal(locksv1.PhasePending))
	})
})

// drainedWritten runs do and returns the Drained condition ("Status/Reason: message") of every
// write of the CommandLock name from just before do until just after it, read from a watch
// that starts at the version before: a write another controller overwrote is seen too.
func drainedWritten(name string, do func()) []string {
	GinkgoHelper()
	from := commandLock(name).ResourceVersion
	w, err := k8s.Watch(ctx, &locksv1.CommandLockList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: from}})
	Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	do()
	until := commandLock(name).ResourceVersion
	var seen []string
	for rv := from; rv != until; {
		select {
		case ev, ok := <-w.ResultChan():
			Expect(ok).To(BeTrue(), "the watch closed")
			cl, isLock := ev.Object.(*locksv1.CommandLock)
			if !isLock || cl.Name != name {
				continue
			}
			rv = cl.ResourceVersion
			if c := meta.FindStatusCondition(cl.Status.Conditions, locksv1.ConditionDrained); c != nil {
				seen = append(seen, fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message))
			}
		case <-time.After(timeout):
			Fail("the watch never reached resourceVersion " + until)
		}
	}
	return seen
}

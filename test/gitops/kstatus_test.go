package gitops_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// Each spec is one row of the README's "Health in GitOps tools" table, asserted with kstatus's
// own status.Compute on the object as the API server returns it. The first spec runs with the
// controllers stopped, so its request is certainly undecided.
var _ = Describe("kstatus (sigs.k8s.io/cli-utils v0.37.2) reads", Ordered, ContinueOnFailure, func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	on := func(name, path string) *LockRequestWrapper {
		return MakeLockRequest(name, ns).Lock("acme/infra", path, "default")
	}
	// net is the key most specs lock.
	net := locksv1.LockTarget{Repo: "acme/infra", Path: "net", Workspace: "default"}
	// grantedOn creates a request for path owned by alice#1 and waits until it reads Current.
	grantedOn := func(name, path string, w ...func(*LockRequestWrapper)) {
		GinkgoHelper()
		r := on(name, path).Owner("alice", 1)
		for _, f := range w {
			f(r)
		}
		create(r.Obj())
		expectKstatus(lockRequestGVK, ns, name, status.CurrentStatus, "Resource is Ready", "")
	}
	patchRelease := func(name string) {
		GinkgoHelper()
		var lr locksv1.LockRequest
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &lr)).To(Succeed())
		p := client.MergeFrom(lr.DeepCopy())
		lr.Spec.Release = true
		Expect(k8s.Patch(ctx, &lr, p)).To(Succeed())
	}

	It("a fresh LockRequest the controller has not decided yet as InProgress, not Current (status defaults to observedGeneration 0)", func() {
		// No controller may see the request before it is read: stop them if another spec started them.
		if mgr != nil {
			Expect(mgr.Stop()).To(Succeed())
			mgr = nil
		}
		obj, err := framework.Unstructured(on("fresh", "net").Obj(), lockRequestGVK)
		Expect(err).NotTo(HaveOccurred())
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		// What `kubectl apply` prints back, and what a pipeline's first poll reads.
		Expect(obj.Object).To(HaveKeyWithValue("status", map[string]any{"observedGeneration": int64(0)}))
		Expect(compute(obj)).To(Equal(verdict{status.InProgressStatus, "LockRequest generation is 1, but latest observed generation is 0"}))
		expectKstatus(lockRequestGVK, ns, "fresh", status.InProgressStatus, "latest observed generation is 0", "undecided")

		// A CommandLock is judged the same way before the controller has written it.
		cl := MakeCommandLock("kstatus-fresh").Locked("maintenance").Obj()
		create(cl)
		DeferCleanup(func() { _ = k8s.Delete(ctx, cl) })
		expectKstatus(commandLockGVK, "", cl.Name, status.InProgressStatus, "latest observed generation is 0", "undecided")

		// And a ProjectLock that exists before the controller has written its status (here made
		// by hand; the controller creates it, then writes its status).
		pl := MakeProjectLock(ns, net, lockkey.Name(net)).Obj()
		create(pl)
		expectKstatus(projectLockGVK, ns, pl.Name, status.InProgressStatus, "latest observed generation is 0", "undecided")

		startManager()
		expectKstatus(lockRequestGVK, ns, "fresh", status.CurrentStatus, "Resource is Ready", "")
		expectKstatus(commandLockGVK, "", cl.Name, status.CurrentStatus, "Resource is Ready", "")
		expectKstatus(projectLockGVK, ns, pl.Name, status.CurrentStatus, "Resource is current", "")
	})

	It("Pending as InProgress", func() {
		startManager()
		grantedOn("holder", "net")
		create(on("waiter", "net").Owner("bob", 2).Obj())
		expectKstatus(lockRequestGVK, ns, "waiter", status.InProgressStatus, "locked by pull #1 (alice); position 1 of 1", "pending")
		// The ProjectLock with a queue: still Current, its queue is normal business.
		name := lockkey.Name(net)
		Eventually(func() int64 {
			u, _ := read(projectLockGVK, ns, name)
			if u == nil {
				return -1
			}
			n, _, _ := unstructured.NestedInt64(u.Object, "status", "queueLength")
			return n
		}, timeout, interval).Should(BeEquivalentTo(1))
		expectKstatus(projectLockGVK, ns, name, status.CurrentStatus, "Resource is current", "queued")
	})

	It("Granted as Current", func() {
		startManager()
		create(on("granted", "net").Owner("alice", 1).TTL(time.Hour).Obj())
		expectKstatus(lockRequestGVK, ns, "granted", status.CurrentStatus, "Resource is Ready", "granted")
	})

	It("Failed as Failed", func() {
		startManager()
		grantedOn("holder", "net")
		create(on("busy", "net").Owner("bob", 2).WaitTimeout(0).Obj())
		expectKstatus(lockRequestGVK, ns, "busy", status.FailedStatus, "locked by pull #1 (alice)", "failed")
	})

	It("a voluntary release (spec.release) as Current", func() {
		startManager()
		grantedOn("done", "net")
		patchRelease("done")
		Eventually(phaseOf(ns, "done"), timeout, interval).Should(Equal(locksv1.PhaseReleased))
		expectKstatus(lockRequestGVK, ns, "done", status.CurrentStatus, "Resource is Ready", "released")
	})

	It("an involuntary end, Expired, as Failed", func() {
		startManager()
		// Not waited for as granted first: a 1s grant may be over before a poll sees it.
		create(on("short", "net").Owner("alice", 1).TTL(time.Second).Obj())
		expectKstatus(lockRequestGVK, ns, "short", status.FailedStatus, "expired", "expired")
		Expect(phaseOf(ns, "short")()).To(Equal(locksv1.PhaseExpired))
	})

	It("an involuntary end, ForceUnlocked, as Failed", func() {
		startManager()
		grantedOn("unlocked", "net")
		pl := &locksv1.ProjectLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lockkey.Name(net)}}
		Expect(k8s.Delete(ctx, pl)).To(Succeed())
		expectKstatus(lockRequestGVK, ns, "unlocked", status.FailedStatus, "force-unlocked", "force-unlocked")
		Expect(phaseOf(ns, "unlocked")()).To(Equal(locksv1.PhaseReleased))
	})

	It("an involuntary end, HolderLost, as Failed", func() {
		startManager()
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "runner"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("runner"), LeaseDurationSeconds: ptr.To(int32(3600)),
				AcquireTime: ptr.To(metav1.NowMicro()), RenewTime: ptr.To(metav1.NowMicro())},
		}
		create(lease)
		grantedOn("leased", "net", func(w *LockRequestWrapper) { w.Lease("runner") })
		Expect(k8s.Delete(ctx, lease)).To(Succeed())
		expectKstatus(lockRequestGVK, ns, "leased", status.FailedStatus, "holder Lease "+ns+"/runner does not exist", "holder-lost")
		Expect(phaseOf(ns, "leased")()).To(Equal(locksv1.PhaseReleased))
	})

	It("a deadlock victim as Failed", func() {
		startManager()
		create(on("a1", "k1").Owner("alice", 1).Obj(), on("b1", "k2").Owner("bob", 2).Obj())
		expectKstatus(lockRequestGVK, ns, "a1", status.CurrentStatus, "Resource is Ready", "")
		expectKstatus(lockRequestGVK, ns, "b1", status.CurrentStatus, "Resource is Ready", "")
		create(on("a2", "k2").Owner("alice", 1).Obj())
		expectKstatus(lockRequestGVK, ns, "a2", status.InProgressStatus, "locked by pull #2 (bob)", "")
		create(on("b2", "k1").Owner("bob", 2).Obj()) // closes the cycle; the newest is the victim
		expectKstatus(lockRequestGVK, ns, "b2", status.FailedStatus, "deadlock: ", "deadlock")
		Expect(phaseOf(ns, "b2")()).To(Equal(locksv1.PhaseFailed))
	})

	It("a CommandLock as InProgress while it drains, Current once Drained, Current when thawed", func() {
		startManager()
		grantedOn("deploying", "net", func(w *LockRequestWrapper) { w.Command("kstatus-deploy") })
		cl := MakeCommandLock("kstatus-deploy").Locked("maintenance").Obj()
		create(cl)
		DeferCleanup(func() { _ = k8s.Delete(ctx, cl) })
		expectKstatus(commandLockGVK, "", cl.Name, status.InProgressStatus, "draining: 1 granted request(s) of this command still hold their locks", "draining")

		patchRelease("deploying")
		expectKstatus(commandLockGVK, "", cl.Name, status.CurrentStatus, "Resource is Ready", "drained")
		var got locksv1.CommandLock
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cl), &got)).To(Succeed())
		Expect(got.Status.Conditions).To(ContainElement(And(HaveField("Type", locksv1.ConditionDrained), HaveField("Status", metav1.ConditionTrue))))

		p := client.MergeFrom(got.DeepCopy())
		got.Spec.Locked = false
		Expect(k8s.Patch(ctx, &got, p)).To(Succeed())
		Eventually(kstatusOf(commandLockGVK, "", cl.Name), timeout, interval).Should(Equal(verdict{status.CurrentStatus, "Resource is Ready"}))
		Eventually(func() string {
			u, err := read(commandLockGVK, "", cl.Name)
			if err != nil {
				return err.Error()
			}
			return reasonOf(u, locksv1.ConditionReady)
		}, timeout, interval).Should(Equal(locksv1.ReasonThawed))
		u, err := read(commandLockGVK, "", cl.Name)
		Expect(err).NotTo(HaveOccurred())
		dump(u, "thawed")
	})

	It("a ProjectLock as Current while held and once free", func() {
		startManager()
		grantedOn("holder", "net")
		name := lockkey.Name(net)
		Eventually(func() string {
			u, _ := read(projectLockGVK, ns, name)
			return reasonOf(u, locksv1.ConditionLocked)
		}, timeout, interval).Should(Equal(locksv1.ReasonHeld))
		expectKstatus(projectLockGVK, ns, name, status.CurrentStatus, "Resource is current", "held")
		patchRelease("holder")
		Eventually(func() string {
			u, _ := read(projectLockGVK, ns, name)
			return reasonOf(u, locksv1.ConditionLocked)
		}, timeout, interval).Should(Equal(locksv1.ReasonFree))
		expectKstatus(projectLockGVK, ns, name, status.CurrentStatus, "Resource is current", "free")
	})
})

// reasonOf is the reason of the object's condition typ, "" when it has none.
func reasonOf(u *unstructured.Unstructured, typ string) string {
	if u == nil {
		return ""
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			r, _ := m["reason"].(string)
			return r
		}
	}
	return ""
}

package safety

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/lag"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// Hole A of issue #26: a write is a fence only if it changes the stored object. The API server
// answers an update whose body equals the stored object with the resourceVersion it had, so a
// write preconditioned on that resourceVersion still lands after it.
var _ = Describe("Fences against the API server as it behaves", func() {
	var (
		ns      string
		inv     *lag.Invariants
		cfg     queue.Config
		net     locksv1.LockTarget
		k       types.NamespacedName
		command string
	)
	BeforeEach(func() {
		ns = newNamespace()
		inv = invariants()
		cfg = queue.DefaultConfig()
		net = target("net")
		k = keyOf(ns, net)
		command = "apply-" + ns
	})
	req := func(name, owner string, pull int64) *LockRequestWrapper {
		return MakeLockRequest(name, ns).Lock(net.Repo, net.Path, net.Workspace).Owner(owner, pull)
	}
	fresh := func(m *manager) {
		GinkgoHelper()
		syncHistory()
		m.view.CatchUp()
		m.decide(k)
		expectSafe(inv, ns, m.name+" decided")
	}
	setFrozen := func(cl *locksv1.CommandLock, frozen bool) {
		GinkgoHelper()
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cl), cl)).To(Succeed())
		cl.Spec.Locked, cl.Spec.Reason = frozen, "maintenance"
		Expect(k8s.Update(ctx, cl)).To(Succeed())
		syncHistory()
	}

	It("the API server keeps the resourceVersion of a status update that changes nothing", func() {
		x := req("x", "bob", 2).Obj()
		Expect(k8s.Create(ctx, x)).To(Succeed())
		x.Status.Phase = locksv1.PhasePending
		x.Status.QueuePosition = 1
		Expect(k8s.Status().Update(ctx, x)).To(Succeed())
		read := x.DeepCopy()
		rv := x.ResourceVersion

		By("an identical status update (as a demotion that writes what it read)")
		same := read.DeepCopy()
		same.ManagedFields = nil // as the manager's cache strips them
		Expect(k8s.Status().Update(ctx, same)).To(Succeed())
		Expect(same.ResourceVersion).To(Equal(rv), "the store did not change, nor did its resourceVersion")

		By("a write preconditioned on the resourceVersion read before it still lands: the no-op fenced nothing")
		held := read.DeepCopy()
		held.Status.Phase = locksv1.PhaseGranted
		Expect(k8s.Status().Update(ctx, held)).To(Succeed())

		By("a status update that changes the object, as a demotion raising status.fences does, moves it")
		demoted := held.DeepCopy()
		demoted.Status.Phase = locksv1.PhasePending
		demoted.Status.Fences++
		Expect(k8s.Status().Update(ctx, demoted)).To(Succeed())
		Expect(demoted.ResourceVersion).NotTo(Equal(held.ResourceVersion))
		late := held.DeepCopy()
		late.Status.QueuePosition = 0
		Expect(k8s.Status().Update(ctx, late)).NotTo(Succeed(), "a write read before the fence fails")
	})

	It("hole A: a demotion of a grant refrozen with the same reason fences the grant's write in flight (it changes the stored object)", func() {
		a, b := newManager("A", 0, cfg), newManager("B", 0, cfg)
		cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: command}}
		Expect(k8s.Create(ctx, cl)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, cl))).To(Succeed()) })

		By("the command is frozen (maintenance); x waits alone on a free key")
		setFrozen(cl, true)
		create(req("x", "bob", 2).Command(command))
		fresh(a)
		fresh(a)
		Expect(phase(ns, "x")).To(Equal(locksv1.PhasePending))
		c := meta.FindStatusCondition(getRequest(ns, "x").Status.Conditions, locksv1.ConditionGranted)
		Expect(c.Reason).To(Equal(locksv1.ReasonCommandLocked))

		By("the command thaws, and y queues behind x")
		setFrozen(cl, false)
		create(req("y", "carol", 3))
		syncHistory()
		a.view.CatchUp()

		By("A lists x on the ProjectLock and reads the freezes live (thawed); before x's own write the command freezes again, for the same reason, and B decides from a caught-up view")
		a.view.BeforeWrite(2, func() {
			setFrozen(cl, true)
			fresh(b)
			_, err := b.reconcileCommand(command)
			Expect(err).NotTo(HaveOccurred())
			expectSafe(inv, ns, "B demoted x, granted y and reported the freeze")
		})
		_, err := a.reconcileKey(k)
		Expect(err).NotTo(HaveOccurred())
		expectSafe(inv, ns, "A's write of x as holding")

		settle(inv, ns, []types.NamespacedName{k}, a, b)
		_, err = b.reconcileCommand(command)
		Expect(err).NotTo(HaveOccurred())
		expectSafe(inv, ns, "the freeze reported once settled")
		Expect(phase(ns, "x")).To(Equal(locksv1.PhasePending))
		Expect(phase(ns, "y")).To(Equal(locksv1.PhaseGranted))
		Expect(getRequest(ns, "x").Status.Fences).To(BeNumerically(">=", 1))
	})
})

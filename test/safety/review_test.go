package safety

import (
	"time"

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

// The two holes an adversarial review of the grant path found (issue #26, review round): both
// make a CommandLock say Drained while a request it speaks for is granted.
var _ = Describe("Drained against clocks and flags", func() {
	var (
		ns  string
		inv *lag.Invariants
		cfg queue.Config
		net locksv1.LockTarget
		k   types.NamespacedName
	)
	BeforeEach(func() {
		ns = newNamespace()
		inv = invariants()
		cfg = queue.DefaultConfig()
		net = target("net")
		k = keyOf(ns, net)
	})
	fresh := func(m *manager) {
		GinkgoHelper()
		syncHistory()
		m.view.CatchUp()
		m.decide(k)
		expectSafe(inv, ns, m.name+" decided")
	}
	report := func(m *manager, name string) *locksv1.CommandLock {
		GinkgoHelper()
		syncHistory()
		m.view.CatchUp()
		_, err := m.reconcileCommand(name)
		Expect(err).NotTo(HaveOccurred())
		expectSafe(inv, ns, m.name+" reported "+name)
		var cl locksv1.CommandLock
		Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, &cl)).To(Succeed())
		return &cl
	}
	frozen := func(name string, until *metav1.Time) {
		GinkgoHelper()
		cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: locksv1.CommandLockSpec{Locked: true, Reason: "maintenance", Until: until}}
		Expect(k8s.Create(ctx, cl)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, cl))).To(Succeed()) })
		syncHistory()
	}

	It("R1: a freeze past its until holds grants until its thaw is written, whichever manager's clock runs ahead", func() {
		command := "apply-" + ns
		r := newManager("R", 0, cfg)             // runs the CommandLock reconciler, its clock on time
		f := newManager("F", 2*time.Minute, cfg) // decides the key, its clock two minutes ahead
		until := metav1.NewTime(time.Now().Add(time.Minute))
		frozen(command, &until)
		cl := report(r, command)
		Expect(meta.IsStatusConditionTrue(cl.Status.Conditions, locksv1.ConditionLocked)).To(BeTrue())
		Expect(meta.IsStatusConditionTrue(cl.Status.Conditions, locksv1.ConditionDrained)).To(BeTrue())

		By("F, whose clock is past the until, decides a request of the frozen command")
		create(MakeLockRequest("x", ns).Lock(net.Repo, net.Path, net.Workspace).Owner("bob", 2).Command(command))
		fresh(f)
		fresh(f)
		Expect(phase(ns, "x")).To(Equal(locksv1.PhasePending), "the CommandLock still says Locked and Drained")

		By("R's clock reaches the until: it writes the thaw, and then x is granted")
		r.ahead = 2 * time.Minute
		cl = report(r, command)
		Expect(meta.IsStatusConditionTrue(cl.Status.Conditions, locksv1.ConditionLocked)).To(BeFalse())
		Expect(queue.Thawed(cl)).To(BeTrue())
		fresh(f)
		Expect(phase(ns, "x")).To(Equal(locksv1.PhaseGranted))

		By("a manager whose clock is behind the until keeps the thaw it reads")
		slow := newManager("S", -time.Minute, cfg)
		cl = report(slow, command)
		Expect(queue.Thawed(cl)).To(BeTrue())
	})

	It("R2: under --disable-global-apply-lock a freeze of all never says Drained for an apply it cannot hold back", func() {
		a := newManager("A", 0, cfg)
		a.flags = queue.FreezeFlags{DisableGlobalApplyLock: true}
		a.restart(cfg)
		inv.Flags = a.flags
		// "all" speaks for every namespace: earlier specs' requests of a command (their
		// namespaces stay until the suite ends) would keep it from draining.
		var others locksv1.LockRequestList
		Expect(k8s.List(ctx, &others)).To(Succeed())
		for i := range others.Items {
			lr := &others.Items[i]
			if lr.Spec.Command == "" || lr.Status.Phase.IsFinal() {
				continue
			}
			if len(lr.Finalizers) > 0 {
				lr.Finalizers = nil
				Expect(client.IgnoreNotFound(k8s.Update(ctx, lr))).To(Succeed())
			}
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, lr))).To(Succeed())
		}
		frozen(locksv1.CommandAll, nil)
		cl := report(a, locksv1.CommandAll)
		Expect(meta.IsStatusConditionTrue(cl.Status.Conditions, locksv1.ConditionDrained)).To(BeTrue())

		By("an apply, which no CommandLock holds back under the flag, is granted while all is frozen")
		create(MakeLockRequest("x", ns).Lock(net.Repo, net.Path, net.Workspace).Owner("bob", 2).Command("apply"))
		fresh(a)
		fresh(a)
		Expect(phase(ns, "x")).To(Equal(locksv1.PhaseGranted))

		By("all still says Drained, and says that it does not speak for apply")
		cl = report(a, locksv1.CommandAll)
		c := meta.FindStatusCondition(cl.Status.Conditions, locksv1.ConditionDrained)
		Expect(c.Status).To(Equal(metav1.ConditionTrue))
		Expect(c.Message).To(ContainSubstring("except apply"))
		Expect(cl.Status.ActiveHolders).To(BeZero())
	})
})

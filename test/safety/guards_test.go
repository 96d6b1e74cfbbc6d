package safety

import (
	"errors"
	"fmt"

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

// One test per guard of the grant path that no hole test covers on its own: each fails when its
// guard is taken out of the code (docs/protocol.md names them).
var _ = Describe("Guards of the grant path", func() {
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
	commandLock := func() *locksv1.CommandLock {
		GinkgoHelper()
		cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: command}}
		Expect(k8s.Create(ctx, cl)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, cl))).To(Succeed()) })
		return cl
	}
	setFrozen := func(cl *locksv1.CommandLock, frozen bool) {
		GinkgoHelper()
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cl), cl)).To(Succeed())
		cl.Spec.Locked, cl.Spec.Reason = frozen, "maintenance"
		Expect(k8s.Update(ctx, cl)).To(Succeed())
		syncHistory()
	}
	drained := func(cl *locksv1.CommandLock) bool {
		GinkgoHelper()
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cl), cl)).To(Succeed())
		return meta.IsStatusConditionTrue(cl.Status.Conditions, locksv1.ConditionDrained)
	}
	// listUnconfirmed leaves x listed as the key's holder without its own write: m decides the
	// grant and crashes between the ProjectLock write and the request's.
	listUnconfirmed := func(m *manager, x string) {
		GinkgoHelper()
		syncHistory()
		m.view.CatchUp()
		writes := 1 // the ProjectLock status; creating it first is one more
		if err := k8s.Get(ctx, k, &locksv1.ProjectLock{}); err != nil {
			writes = 2
		}
		m.view.CrashAfter(writes)
		_, err := m.reconcileKey(k)
		Expect(errors.Is(err, lag.ErrCrashed)).To(BeTrue(), "the decision should have crashed after its ProjectLock write, got %v", err)
		m.view.Revive()
		m.restart(cfg)
		syncHistory()
		var pl locksv1.ProjectLock
		Expect(k8s.Get(ctx, k, &pl)).To(Succeed())
		Expect(pl.Status.Holder).NotTo(BeNil())
		Expect(pl.Status.Holder.Requests[0].Name).To(Equal(x))
		Expect(phase(ns, x)).NotTo(Equal(locksv1.PhaseGranted))
		expectSafe(inv, ns, "a crash between the two writes of a grant")
	}

	It("Drained waits for a grant whose ProjectLock write came before the freeze (the live ProjectLock list)", func() {
		a, b := newManager("A", 0, cfg), newManager("B", 0, cfg)
		cl := commandLock()
		create(req("h", "alice", 1).Command("plan"))
		fresh(a)
		create(req("x", "bob", 2).Command(command))
		fresh(a)
		h := getRequest(ns, "h")
		h.Spec.Release = true
		Expect(k8s.Update(ctx, h)).To(Succeed())
		syncHistory()

		By("B hands the key to x: between its ProjectLock write and x's, apply is frozen and A reports on the freeze")
		b.view.CatchUp()
		b.view.BeforeWrite(3, func() { // h released, the ProjectLock, then x
			var pl locksv1.ProjectLock
			Expect(k8s.Get(ctx, k, &pl)).To(Succeed())
			Expect(pl.Status.Holder.Requests[0].Name).To(Equal("x"), "the test means to act between the ProjectLock write and x's")
			setFrozen(cl, true)
			a.view.CatchUp()
			_, err := a.reconcileCommand(command)
			Expect(err).NotTo(HaveOccurred())
			expectSafe(inv, ns, "A reported on the freeze mid-grant")
			Expect(drained(cl)).To(BeFalse(), "x is listed by the ProjectLock: its grant is under way")
		})
		b.decide(k)
		expectSafe(inv, ns, "B finished the grant decided before the freeze")
		Expect(phase(ns, "x")).To(Equal(locksv1.PhaseGranted))

		By("once x releases, the freeze is drained")
		release := getRequest(ns, "x")
		release.Spec.Release = true
		Expect(k8s.Update(ctx, release)).To(Succeed())
		fresh(a)
		syncHistory()
		a.view.CatchUp()
		_, err := a.reconcileCommand(command)
		Expect(err).NotTo(HaveOccurred())
		Expect(drained(cl)).To(BeTrue())
		expectSafe(inv, ns, "drained")
	})

	It("a holder missing from a lagging request cache is looked up before its key moves on (the live holder read)", func() {
		a, b := newManager("A", 0, cfg), newManager("B", 0, cfg)
		create(req("w", "bob", 2))
		onlyW := history.Mark()
		create(req("x", "alice", 1).Priority(locksv1.PriorityHigh))
		fresh(a)
		Expect(phase(ns, "x")).To(Equal(locksv1.PhaseGranted))

		syncHistory()
		b.view.CatchUpBut(lag.LockRequests, onlyW[lag.LockRequests])
		b.decide(k)
		expectSafe(inv, ns, "B decided without x in its cache")
		Expect(phase(ns, "x")).To(Equal(locksv1.PhaseGranted))
		Expect(phase(ns, "w")).To(Equal(locksv1.PhasePending))
	})

	// lagsProjectLock has A grant x a new ProjectLock (a create, then the grant written to it),
	// and then B decide with its request cache current and its ProjectLock cache missed writes
	// behind: 1, the created object without the grant; 2, no ProjectLock at all.
	lagsProjectLock := func(missed int) {
		GinkgoHelper()
		a, b := newManager("A", 0, cfg), newManager("B", 0, cfg)
		create(req("x", "alice", 1))
		syncHistory()
		a.view.CatchUp()
		a.decide(k)
		syncHistory()
		Expect(phase(ns, "x")).To(Equal(locksv1.PhaseGranted))

		b.view.CatchUpBut(lag.ProjectLocks, history.Len(lag.ProjectLocks)-missed)
		var cached locksv1.ProjectLock
		switch err := b.view.Get(ctx, k, &cached); missed {
		case 1:
			Expect(err).NotTo(HaveOccurred())
			Expect(cached.Status.Holder).To(BeNil(), "the test needs B's cache to show the ProjectLock before the grant")
		default:
			Expect(err).To(MatchError(ContainSubstring("not found")), "the test needs B's cache without the ProjectLock")
		}
		b.decide(k)
		expectSafe(inv, ns, "B decided from a ProjectLock cache without the grant")
		Expect(phase(ns, "x")).To(Equal(locksv1.PhaseGranted), "x's runner must not be told it lost the lock")
	}

	It("a manager whose ProjectLock cache lags never releases a holder it does not see listed (the live ProjectLock read)", func() {
		lagsProjectLock(1)
	})

	It("a manager whose ProjectLock cache has no ProjectLock yet never releases a holder (the live ProjectLock read)", func() {
		lagsProjectLock(2)
	})

	It("a listed grant whose own write never landed is re-issued with a ProjectLock write, never written alone (the re-issue)", func() {
		b, d, r := newManager("B", 0, cfg), newManager("D", 0, cfg), newManager("R", 0, cfg)
		cl := commandLock()
		create(req("x", "bob", 2).Command(command))
		listUnconfirmed(b, "x")
		create(req("w", "carol", 3))

		By("apply freezes; D takes x's grant back, and between its two writes apply thaws and R decides")
		setFrozen(cl, true)
		d.view.CatchUp()
		d.view.BeforeWrite(2, func() {
			setFrozen(cl, false)
			syncHistory()
			r.view.CatchUp() // the ProjectLock still lists x: D has not written it yet
			r.decide(k)
			expectSafe(inv, ns, "R decided between D's two writes")
		})
		_, err := d.reconcileKey(k)
		Expect(err).NotTo(HaveOccurred())
		expectSafe(inv, ns, "D finished")
		settle(inv, ns, []types.NamespacedName{k}, d, r)
	})

	It("a listed grant whose own write never landed, frozen since, is taken back so the freeze can drain (the demotion)", func() {
		a, b := newManager("A", 0, cfg), newManager("B", 0, cfg)
		cl := commandLock()
		create(req("x", "bob", 2).Command(command))
		listUnconfirmed(b, "x")

		setFrozen(cl, true)
		fresh(a)
		syncHistory()
		a.view.CatchUp()
		_, err := a.reconcileCommand(command)
		Expect(err).NotTo(HaveOccurred())
		Expect(drained(cl)).To(BeTrue(), "x never held the key; nothing of apply runs")
		Expect(phase(ns, "x")).To(Equal(locksv1.PhasePending))
		c := meta.FindStatusCondition(getRequest(ns, "x").Status.Conditions, locksv1.ConditionGranted)
		Expect(c.Reason).To(Equal(locksv1.ReasonCommandLocked))

		setFrozen(cl, false)
		fresh(a)
		Expect(phase(ns, "x")).To(Equal(locksv1.PhaseGranted))
	})

	It("a crash between any two writes of a hand-off leaves every holder listed and one identity holding (the write order)", func() {
		for crashAfter := 0; crashAfter <= 3; crashAfter++ {
			By(fmt.Sprintf("a crash after %d writes", crashAfter))
			ns = newNamespace()
			k = keyOf(ns, net)
			m, other := newManager("M", 0, cfg), newManager("O", 0, cfg)
			create(req("h", "alice", 1))
			fresh(m)
			create(req("w", "bob", 2))
			fresh(m)
			h := getRequest(ns, "h")
			h.Spec.Release = true
			Expect(k8s.Update(ctx, h)).To(Succeed())
			syncHistory()
			m.view.CatchUp()
			m.view.CrashAfter(crashAfter) // finish h, the ProjectLock, grant w
			_, err := m.reconcileKey(k)
			Expect(err == nil || errors.Is(err, lag.ErrCrashed)).To(BeTrue(), "%v", err)
			expectSafe(inv, ns, fmt.Sprintf("a crash after %d writes", crashAfter))
			settle(inv, ns, []types.NamespacedName{k}, other)
			Expect(phase(ns, "w")).To(Equal(locksv1.PhaseGranted))
			Expect(phase(ns, "h")).To(Equal(locksv1.PhaseReleased))
		}
	})
})

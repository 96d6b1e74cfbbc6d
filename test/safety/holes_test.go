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

// The interleavings an adversarial review found (issue #12), one named test each. Every step
// runs the real reconcilers on caches the test holds back, and the store is checked after each.
var _ = Describe("Holes in the grant protocol", func() {
	var (
		ns  string
		inv *lag.Invariants
		cfg queue.Config
	)
	BeforeEach(func() {
		ns = newNamespace()
		inv = invariants()
		cfg = queue.DefaultConfig()
	})

	remove := func(o client.Object) {
		GinkgoHelper()
		Expect(k8s.Delete(ctx, o)).To(Succeed())
		syncHistory()
	}
	request := func(name string) *locksv1.LockRequest {
		return &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	projectLock := func(k types.NamespacedName) *locksv1.ProjectLock {
		return &locksv1.ProjectLock{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
	}
	// fresh decides key with m's cache caught up with the store.
	fresh := func(m *manager, k types.NamespacedName) {
		GinkgoHelper()
		syncHistory()
		m.view.CatchUp()
		m.decide(k)
		expectSafe(inv, ns, m.name+" decided "+k.Name)
	}
	reasonOf := func(name string) string {
		GinkgoHelper()
		c := meta.FindStatusCondition(getRequest(ns, name).Status.Conditions, locksv1.ConditionGranted)
		Expect(c).NotTo(BeNil())
		return c.Reason
	}

	It("hole 1: a force-unlock decided from a lagging request cache never grants the key to a second holder", func() {
		a, b := newManager("A", 0, cfg), newManager("B", 0, cfg)
		net := target("net")
		k := keyOf(ns, net)
		create(MakeLockRequest("r", ns).Lock(net.Repo, net.Path, net.Workspace).Owner("alice", 1))
		onlyR := history.Mark()
		create(MakeLockRequest("w", ns).Lock(net.Repo, net.Path, net.Workspace).Owner("bob", 2).Priority(locksv1.PriorityHigh))
		withW := history.Mark()

		By("B, whose cache does not have W yet, grants R")
		b.view.AdvanceToMark(onlyR)
		b.decide(k)
		expectSafe(inv, ns, "B granted R")
		Expect(phase(ns, "r")).To(Equal(locksv1.PhaseGranted))

		By("an admin force-unlocks the key")
		remove(projectLock(k))
		expectSafe(inv, ns, "the force-unlock")

		By("A, whose ProjectLock cache is current but whose request cache has W and not R's grant, decides")
		a.view.CatchUpBut(lag.LockRequests, withW[lag.LockRequests])
		a.decide(k)
		expectSafe(inv, ns, "A decided from a request cache without R's grant")

		By("once the caches catch up, R is force-unlocked and W holds the key")
		settle(inv, ns, []types.NamespacedName{k}, a, b)
		Expect(phase(ns, "r")).To(Equal(locksv1.PhaseReleased))
		Expect(reasonOf("r")).To(Equal(locksv1.ReasonForceUnlocked))
		Expect(phase(ns, "w")).To(Equal(locksv1.PhaseGranted))
	})

	It("hole 8: a manager whose ProjectLock cache is behind a re-issued grant never writes the holder its older token (the live ProjectLock read of a re-issue)", func() {
		a, b := newManager("A", 0, cfg), newManager("B", 0, cfg)
		app := target("app")
		k := keyOf(ns, app)
		create(MakeLockRequest("r", ns).Lock(app.Repo, app.Path, app.Workspace).Owner("bob", 0))

		By("A crashes after creating the ProjectLock and listing R on it, before writing R")
		crashAfterListing(a, k)
		a.restart(cfg)
		syncHistory()
		listed := history.Mark()
		expectSafe(inv, ns, "A crashed mid-grant")

		By("B re-issues the grant on a new write of the ProjectLock and tells R its token")
		fresh(b, k)
		var pl locksv1.ProjectLock
		Expect(k8s.Get(ctx, k, &pl)).To(Succeed())
		r := getRequest(ns, "r")
		Expect(r.Status.Phase).To(Equal(locksv1.PhaseGranted))
		Expect(r.Status.Locks[0].FencingToken).To(Equal(pl.Status.FencingToken))

		By("A decides with its request cache current and its ProjectLock cache at the first listing")
		create(MakeLockRequest("w", ns).Lock(app.Repo, app.Path, app.Workspace).Owner("carol", 3))
		syncHistory()
		a.view.CatchUpBut(lag.ProjectLocks, listed[lag.ProjectLocks])
		a.decide(k)
		expectSafe(inv, ns, "A decided from a ProjectLock cache behind R's token")
		Expect(getRequest(ns, "r").Status.Locks[0].FencingToken).To(Equal(pl.Status.FencingToken), "R keeps the token B gave it")
		// R's token above the cached ProjectLock's made A read it live and decide at once (a
		// decision on the stale one would decide nothing, queue.Decide's staleLock, and wait
		// for the cache): the waiter that came meanwhile is queued by this very decision.
		Expect(phase(ns, "w")).To(Equal(locksv1.PhasePending), "A decided on the live ProjectLock")
	})

	// hole 8b, from the adversarial review of shared locks (issue #31).
	// hole 8 through a live holder read: hole 8's live ProjectLock read looks at the holders
	// the request cache has; one the cache does not have yet is read live (confirmHolders) and
	// was decided on with the older cached ProjectLock.
	reissueBehindRequestCache := func(shared bool) {
		a, b, c := newManager("A", 0, cfg), newManager("B", 0, cfg), newManager("C", 0, cfg)
		app := target("app")
		k := keyOf(ns, app)
		syncHistory()
		beforeR := history.Mark()
		w := MakeLockRequest("r", ns).Lock(app.Repo, app.Path, app.Workspace).Owner("bob", 0)
		if shared {
			w.Shared()
		}
		create(w)

		By("A crashes after creating the ProjectLock and listing R on it, before writing R")
		crashAfterListing(a, k)
		syncHistory()
		listed := history.Mark()
		expectSafe(inv, ns, "A crashed mid-grant")

		By("B re-issues the grant on a new write of the ProjectLock and tells R its token")
		syncHistory()
		b.view.CatchUp()
		b.decide(k)
		expectSafe(inv, ns, "B re-issued R's grant")
		r := getRequest(ns, "r")
		Expect(r.Status.Phase).To(Equal(locksv1.PhaseGranted))
		token := r.Status.Locks[0].FencingToken

		By("C decides with its request cache from before R existed and its ProjectLock cache at the first listing")
		syncHistory()
		m := history.Mark()
		m[lag.LockRequests] = beforeR[lag.LockRequests]
		m[lag.ProjectLocks] = listed[lag.ProjectLocks]
		c.view.AdvanceToMark(m)
		c.decide(k)
		expectSafe(inv, ns, "C decided from a ProjectLock cache behind R's token, R read live")
		Expect(getRequest(ns, "r").Status.Locks[0].FencingToken).To(Equal(token), "R keeps the token B gave it")
	}
	It("hole 8b: a holder read live past a lagging request cache is never written the older token its stale ProjectLock lists", func() {
		reissueBehindRequestCache(false)
	})
	It("hole 8b, shared: a shared holder read live past a lagging request cache keeps its token", func() {
		reissueBehindRequestCache(true)
	})

	It("hole 2: a manager remembers its own writes over a cache that missed two of them", func() {
		m := newManager("M", 0, cfg)
		one, two := target("a"), target("b")
		k1, k2 := keyOf(ns, one), keyOf(ns, two)
		create(MakeLockRequest("r", ns).Lock(one.Repo, one.Path, one.Workspace).Lock(two.Repo, two.Path, two.Workspace).Owner("alice", 1))
		create(MakeLockRequest("w", ns).Lock(one.Repo, one.Path, one.Workspace).Owner("bob", 2))
		m.view.CatchUp()
		requestsSeen := history.Mark()[lag.LockRequests]

		By("M grants R both keys, one write each, while its request cache stays where it was")
		for _, k := range []types.NamespacedName{k1, k2} {
			syncHistory()
			m.view.CatchUpBut(lag.LockRequests, requestsSeen)
			m.decide(k)
			expectSafe(inv, ns, "M decided "+k.Name)
		}
		Expect(phase(ns, "r")).To(Equal(locksv1.PhaseGranted))

		By("an admin force-unlocks the first key; M sees the ProjectLock go, its request cache still behind")
		remove(projectLock(k1))
		for range 3 {
			syncHistory()
			m.view.CatchUpBut(lag.LockRequests, requestsSeen)
			m.decide(k1)
			expectSafe(inv, ns, "M decided the force-unlocked key from its own memory")
		}
		Expect(phase(ns, "r")).To(Equal(locksv1.PhaseReleased), "M knows R holds the key: it wrote that itself")
		Expect(reasonOf("r")).To(Equal(locksv1.ReasonForceUnlocked))

		settle(inv, ns, []types.NamespacedName{k1, k2}, m)
		Expect(phase(ns, "w")).To(Equal(locksv1.PhaseGranted))
	})

	It("hole 3: the next holder of a key gets a token above the one a deleted multi-lock holder showed for it", func() {
		m := newManager("M", 0, cfg)
		one, two := target("one"), target("two")
		k1, k2 := keyOf(ns, one), keyOf(ns, two)
		multi := func(name, owner string, pull int64) *LockRequestWrapper {
			return MakeLockRequest(name, ns).Lock(one.Repo, one.Path, one.Workspace).Lock(two.Repo, two.Path, two.Workspace).Owner(owner, pull)
		}
		// takeBoth has the multi-lock request take the first key, wait for the second behind
		// holder, and get it once holder goes: its token for the second key comes from a
		// ProjectLock written after the first key's last write.
		takeBoth := func(name, holder string) {
			GinkgoHelper()
			fresh(m, k1)
			fresh(m, k2)
			remove(request(holder))
			fresh(m, k2)
			Expect(phase(ns, name)).To(Equal(locksv1.PhaseGranted))
		}
		create(MakeLockRequest("b", ns).Lock(two.Repo, two.Path, two.Workspace).Owner("bob", 2))
		fresh(m, k2)
		create(multi("m", "carol", 3))
		takeBoth("m", "b")

		By("the multi-lock holder is deleted, and a new holder takes the first key in the same decision")
		remove(request("m"))
		create(MakeLockRequest("n", ns).Lock(one.Repo, one.Path, one.Workspace).Owner("dave", 4))
		fresh(m, k1)
		fresh(m, k1)
		Expect(phase(ns, "n")).To(Equal(locksv1.PhaseGranted))

		By("and the same with a holder that releases, its status still there to read")
		create(MakeLockRequest("c", ns).Lock(two.Repo, two.Path, two.Workspace).Owner("bob", 2))
		fresh(m, k2)
		remove(request("n"))
		create(multi("p", "erin", 5))
		takeBoth("p", "c")
		p := getRequest(ns, "p")
		p.Spec.Release = true
		Expect(k8s.Update(ctx, p)).To(Succeed())
		create(MakeLockRequest("q", ns).Lock(one.Repo, one.Path, one.Workspace).Owner("fay", 6))
		fresh(m, k1)
		Expect(phase(ns, "q")).To(Equal(locksv1.PhaseGranted))
	})

	It("hole 4: a key's token keeps rising across re-creation when the deciding clock is behind", func() {
		ahead := newManager("ahead", 0, cfg)
		net := target("net")
		k := keyOf(ns, net)
		create(MakeLockRequest("a", ns).Lock(net.Repo, net.Path, net.Workspace).Owner("alice", 1))
		fresh(ahead, k)
		Expect(phase(ns, "a")).To(Equal(locksv1.PhaseGranted))
		remove(request("a"))
		fresh(ahead, k)

		By("an admin deletes the idle ProjectLock, so no object remembers its counter")
		remove(projectLock(k))
		fresh(ahead, k)

		By("a manager whose clock is an hour behind grants the key again")
		behind := newManager("behind", -time.Hour, cfg)
		create(MakeLockRequest("b", ns).Lock(net.Repo, net.Path, net.Workspace).Owner("bob", 2))
		fresh(behind, k)
		fresh(behind, k)
		Expect(phase(ns, "b")).To(Equal(locksv1.PhaseGranted))
	})

	It("hole 5: a holder that is being deleted is written Released before its lock moves on", func() {
		m := newManager("M", 0, cfg)
		net := target("net")
		k := keyOf(ns, net)
		r := MakeLockRequest("r", ns).Lock(net.Repo, net.Path, net.Workspace).Owner("alice", 1).Obj()
		r.Finalizers = []string{"safety.turnstile.dev/keep"}
		Expect(k8s.Create(ctx, r)).To(Succeed())
		DeferCleanup(func() {
			lr := request("r")
			if k8s.Get(ctx, client.ObjectKeyFromObject(lr), lr) == nil {
				lr.Finalizers = nil
				Expect(client.IgnoreNotFound(k8s.Update(ctx, lr))).To(Succeed())
			}
		})
		fresh(m, k)
		Expect(phase(ns, "r")).To(Equal(locksv1.PhaseGranted))
		create(MakeLockRequest("w", ns).Lock(net.Repo, net.Path, net.Workspace).Owner("bob", 2))
		fresh(m, k)

		By("someone deletes the holder, and a finalizer keeps its object")
		remove(request("r"))
		fresh(m, k)
		fresh(m, k)
		Expect(phase(ns, "w")).To(Equal(locksv1.PhaseGranted))
		Expect(phase(ns, "r")).To(Equal(locksv1.PhaseReleased), "its runner must be told before the next holder starts")
	})

	// freeze is the CommandLock the admin locks: the command's own, or "all".
	hole6 := func(freeze string) {
		a, b := newManager("A", 0, cfg), newManager("B", 0, cfg)
		apply := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: freeze}}
		Expect(k8s.Create(ctx, apply)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, apply))).To(Succeed()) })
		net := target("net")
		k := keyOf(ns, net)
		create(MakeLockRequest("h", ns).Lock(net.Repo, net.Path, net.Workspace).Owner("alice", 1).Command("plan"))
		fresh(a, k)
		create(MakeLockRequest("x", ns).Lock(net.Repo, net.Path, net.Workspace).Owner("bob", 2).Command("apply"))
		fresh(a, k)
		Expect(phase(ns, "h")).To(Equal(locksv1.PhaseGranted))
		syncHistory()
		unfrozen := history.Mark()

		By("an admin freezes " + freeze + ", and A reports on it")
		patch := client.MergeFrom(apply.DeepCopy())
		apply.Spec.Locked, apply.Spec.Reason = true, "maintenance"
		Expect(k8s.Patch(ctx, apply, patch)).To(Succeed())
		syncHistory()
		a.view.CatchUp()
		_, err := a.reconcileCommand(freeze)
		Expect(err).NotTo(HaveOccurred())
		expectSafe(inv, ns, "A reported the freeze")

		By("the plan holder releases, and B, whose CommandLock cache is from before the freeze, decides")
		remove(request("h"))
		b.view.CatchUpBut(lag.CommandLocks, unfrozen[lag.CommandLocks])
		b.decide(k)
		expectSafe(inv, ns, "B decided with a stale freeze")
		_, err = a.reconcileCommand(freeze)
		Expect(err).NotTo(HaveOccurred())
		expectSafe(inv, ns, "A reported the freeze again")
		Expect(phase(ns, "x")).To(Equal(locksv1.PhasePending))
	}
	It("hole 6: Drained is never True while a grant decided from a stale freeze lands", func() { hole6("apply") })
	It("hole 6, a global freeze: a grant decided from a stale cache reads the freeze of all commands live too", func() { hole6(locksv1.CommandAll) })

	It("hole 7: requests are served first come, first served whichever manager's clock saw them first", func() {
		cfg.AgingStep = 10 * time.Minute
		fast, slow := newManager("fast", 0, cfg), newManager("slow", -5*time.Second, cfg)
		net := target("net")
		k := keyOf(ns, net)
		create(MakeLockRequest("h", ns).Lock(net.Repo, net.Path, net.Workspace).Owner("alice", 1))
		fresh(fast, k)
		create(MakeLockRequest("x", ns).Lock(net.Repo, net.Path, net.Workspace).Owner("bob", 2))
		fresh(fast, k)
		create(MakeLockRequest("y", ns).Lock(net.Repo, net.Path, net.Workspace).Owner("carol", 3))
		fresh(slow, k)
		Expect(phase(ns, "x")).To(Equal(locksv1.PhasePending))
		Expect(phase(ns, "y")).To(Equal(locksv1.PhasePending))

		remove(request("h"))
		fresh(fast, k)
		fresh(slow, k)
		Expect(phase(ns, "x")).To(Equal(locksv1.PhaseGranted), "x was created first")
		Expect(phase(ns, "y")).To(Equal(locksv1.PhasePending))
	})
})

// crashAfterListing: m, its cache current, decides k and crashes after its first two writes
// (creating k's ProjectLock and listing the new holder on it), before writing the holder.
func crashAfterListing(m *manager, k types.NamespacedName) {
	m.view.CatchUp()
	m.view.CrashAfter(2)
	if _, err := m.reconcileKey(k); err != nil {
		Expect(err).To(MatchError(lag.ErrCrashed))
	}
	m.view.Revive()
}

package safety

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/deadlock"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/lag"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// Hole D of issue #26: with --deadlock-victim=lowest-priority every replica runs a detector. Two
// that find one cycle from views and clocks a little apart must fail one request, not one each.
var _ = Describe("Deadlock victims across detectors", func() {
	const step = 10 * time.Minute
	var (
		ns     string
		inv    *lag.Invariants
		cfg    queue.Config
		k1, k2 types.NamespacedName
		d1, d2 *controller.DeadlockDetector
		v1, v2 *lag.View
		qa     time.Time
	)
	fresh := func(m *manager, k types.NamespacedName) {
		GinkgoHelper()
		syncHistory()
		m.view.CatchUp()
		m.decide(k)
		expectSafe(inv, ns, m.name+" decided "+k.Name)
	}
	detector := func(v *lag.View, now time.Time) *controller.DeadlockDetector {
		return controller.NewDeadlockDetector(v, nopRecorder{}, controller.WithConfig(cfg),
			controller.WithDeadlockPolicy(deadlock.PolicyLowestPriority),
			controller.WithClock(clocktesting.NewFakeClock(now)), controller.WithLiveReader(k8s))
	}
	victims := func() []string {
		GinkgoHelper()
		var list locksv1.LockRequestList
		Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		var out []string
		for _, lr := range list.Items {
			c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
			if lr.Status.Phase == locksv1.PhaseFailed && c != nil && c.Reason == locksv1.ReasonDeadlock {
				out = append(out, lr.Name)
			}
		}
		return out
	}

	BeforeEach(func() {
		ns = newNamespace()
		inv = invariants()
		cfg = queue.DefaultConfig()
		cfg.AgingStep = step
		t1, t2 := target("one"), target("two")
		k1, k2 = keyOf(ns, t1), keyOf(ns, t2)
		// B's clock is 2 s ahead of A's: the requests each queues are stamped by its clock.
		a, b := newManager("A", 0, cfg), newManager("B", 2*time.Second, cfg)

		By("alice holds one, bob holds two; then alice (Low) waits for two and bob (Normal) for one")
		create(MakeLockRequest("a1", ns).Lock(t1.Repo, t1.Path, t1.Workspace).Owner("alice", 1))
		create(MakeLockRequest("b1", ns).Lock(t2.Repo, t2.Path, t2.Workspace).Owner("bob", 2))
		fresh(a, k1)
		fresh(a, k2)
		create(MakeLockRequest("a2", ns).Lock(t2.Repo, t2.Path, t2.Workspace).Owner("alice", 1).Priority(locksv1.PriorityLow))
		fresh(a, k2)
		create(MakeLockRequest("b2", ns).Lock(t1.Repo, t1.Path, t1.Workspace).Owner("bob", 2).Priority(locksv1.PriorityNormal))
		fresh(b, k1)
		Expect(phase(ns, "a2")).To(Equal(locksv1.PhasePending))
		Expect(phase(ns, "b2")).To(Equal(locksv1.PhasePending))
		qa = getRequest(ns, "a2").Status.QueuedAt.Time
		Expect(getRequest(ns, "b2").Status.QueuedAt.Time).To(BeTemporally(">", qa.Add(time.Second)))
		syncHistory()

		// Two detectors whose clocks are 1 s apart, on either side of a2's first aging step: by
		// the first a2 is still Low (below b2), by the second it has aged to Normal, level with
		// b2, which waited less (the newest goes first among equals).
		v1, v2 = lag.NewView(history, k8s), lag.NewView(history, k8s)
		v1.CatchUp()
		v2.CatchUp()
		d1 = detector(v1, qa.Add(step-500*time.Millisecond))
		d2 = detector(v2, qa.Add(step+500*time.Millisecond))
	})

	It("hole D: two detectors deciding at once rank the cycle alike (by the store), and only one victim's write lands", func() {
		By("the first detector is about to write its victim when the second checks the namespace")
		v1.BeforeWrite(1, func() {
			Expect(d2.Check(ctx, ns)).To(Succeed())
			expectSafe(inv, ns, "the second detector's check")
		})
		Expect(d1.Check(ctx, ns)).To(Succeed())
		expectSafe(inv, ns, "the first detector's check")
		Expect(victims()).To(ConsistOf("a2"), "one request per cycle, the lowest priority by the store")
		Expect(phase(ns, "b2")).To(Equal(locksv1.PhasePending))
	})

	It("hole D: a detector on a cache from before another's victim, and before a priority change, re-reads the cycle live and leaves it broken", func() {
		setPriority := func(name string, p locksv1.Priority) {
			GinkgoHelper()
			lr := getRequest(ns, name)
			lr.Spec.Priority = p
			Expect(k8s.Update(ctx, lr)).To(Succeed())
			syncHistory()
		}
		By("alice raises a2 to Normal, and the second detector's cache is taken then: by it, b2 (level, newest) is the victim")
		setPriority("a2", locksv1.PriorityNormal)
		v2.CatchUp()
		By("alice lowers a2 to Low again, and the first detector fails it")
		setPriority("a2", locksv1.PriorityLow)
		v1.CatchUp()
		Expect(d1.Check(ctx, ns)).To(Succeed())
		expectSafe(inv, ns, "the first detector's check")
		Expect(victims()).To(ConsistOf("a2"))

		By("the second detector checks from its cache, which shows the cycle whole and b2 unchanged")
		Expect(d2.Check(ctx, ns)).To(Succeed())
		expectSafe(inv, ns, "the second detector's check")
		Expect(victims()).To(ConsistOf("a2"), "the cycle was broken already")
		Expect(phase(ns, "b2")).To(Equal(locksv1.PhasePending))
	})
})

// A detector's cache may be older than a holder's release: the cycle it finds is broken in the
// store although every waiter of it still waits. The live re-read must check the holders too.
var _ = Describe("Deadlock cycles whose holder let go", func() {
	It("hole D: a detector on a cache from before a holder's release fails no one once the cycle is broken", func() {
		ns := newNamespace()
		inv := invariants()
		cfg := queue.DefaultConfig()
		t1, t2 := target("one"), target("two")
		k1, k2 := keyOf(ns, t1), keyOf(ns, t2)
		m := newManager("M", 0, cfg)
		fresh := func(k types.NamespacedName) {
			GinkgoHelper()
			syncHistory()
			m.view.CatchUp()
			m.decide(k)
			expectSafe(inv, ns, "M decided "+k.Name)
		}
		victims := func() []string {
			GinkgoHelper()
			var list locksv1.LockRequestList
			Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			var out []string
			for _, lr := range list.Items {
				c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
				if lr.Status.Phase == locksv1.PhaseFailed && c != nil && c.Reason == locksv1.ReasonDeadlock {
					out = append(out, lr.Name)
				}
			}
			return out
		}

		By("alice holds one, bob holds two; carol (High) queues for two; then alice (Low) waits for two and bob for one: a cycle")
		create(MakeLockRequest("a1", ns).Lock(t1.Repo, t1.Path, t1.Workspace).Owner("alice", 1))
		create(MakeLockRequest("b1", ns).Lock(t2.Repo, t2.Path, t2.Workspace).Owner("bob", 2))
		fresh(k1)
		fresh(k2)
		create(MakeLockRequest("c", ns).Lock(t2.Repo, t2.Path, t2.Workspace).Owner("carol", 3).Priority(locksv1.PriorityHigh))
		fresh(k2)
		create(MakeLockRequest("a2", ns).Lock(t2.Repo, t2.Path, t2.Workspace).Owner("alice", 1).Priority(locksv1.PriorityLow))
		fresh(k2)
		create(MakeLockRequest("b2", ns).Lock(t1.Repo, t1.Path, t1.Workspace).Owner("bob", 2))
		fresh(k1)
		Expect(phase(ns, "a2")).To(Equal(locksv1.PhasePending))
		Expect(phase(ns, "b2")).To(Equal(locksv1.PhasePending))
		syncHistory()

		By("a detector's cache is taken now, with the cycle whole")
		v := lag.NewView(history, k8s)
		v.CatchUp()
		d := controller.NewDeadlockDetector(v, nopRecorder{}, controller.WithConfig(cfg),
			controller.WithDeadlockPolicy(deadlock.PolicyLowestPriority),
			controller.WithClock(clocktesting.NewFakeClock(time.Now())), controller.WithLiveReader(k8s))

		By("bob releases b1; the manager hands two to carol: alice waits for carol, who waits for no one")
		b1 := getRequest(ns, "b1")
		b1.Spec.Release = true
		Expect(k8s.Update(ctx, b1)).To(Succeed())
		fresh(k2)
		Expect(phase(ns, "b1")).To(Equal(locksv1.PhaseReleased))
		Expect(phase(ns, "c")).To(Equal(locksv1.PhaseGranted))
		Expect(phase(ns, "a2")).To(Equal(locksv1.PhasePending))

		By("the detector checks from its cache: every waiter of the cycle still waits on its key, but bob no longer holds two")
		Expect(d.Check(ctx, ns)).To(Succeed())
		Expect(victims()).To(BeEmpty(), "no cycle stands in the store: bob holds nothing alice waits for")
	})
})

// A shared waiter on a key whose shared places are all taken waits for any one holder to leave
// (issue 41): it is deadlocked only while every other holder is blocked too, and a detector
// whose cache is older than another holder's release must not fail anyone for it.
var _ = Describe("Deadlocks through a full shared key", func() {
	It("are found only while every other holder is blocked, and re-read live before a victim fails", func() {
		ns := newNamespace()
		inv := invariants()
		cfg := queue.DefaultConfig()
		t1, t2, t3 := target("full"), target("two"), target("three")
		k1, k2, k3 := keyOf(ns, t1), keyOf(ns, t2), keyOf(ns, t3)
		m := newManager("M", 0, cfg)
		fresh := func(k types.NamespacedName) {
			GinkgoHelper()
			syncHistory()
			m.view.CatchUp()
			m.decide(k)
			expectSafe(inv, ns, "M decided "+k.Name)
		}
		detector := func() *controller.DeadlockDetector {
			v := lag.NewView(history, k8s)
			v.CatchUp()
			return controller.NewDeadlockDetector(v, nopRecorder{}, controller.WithConfig(cfg),
				controller.WithClock(clocktesting.NewFakeClock(time.Now())), controller.WithLiveReader(k8s))
		}
		victims := func() []string {
			GinkgoHelper()
			var list locksv1.LockRequestList
			Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			var out []string
			for _, lr := range list.Items {
				if lr.Status.Phase == locksv1.PhaseFailed {
					out = append(out, lr.Name)
				}
			}
			return out
		}

		By("alice and carol fill the full key's shared places; bob holds two and three")
		for i := range locksv1.MaxSharedHolders - 1 {
			create(MakeLockRequest(fmt.Sprintf("a-%d", i), ns).Lock(t1.Repo, t1.Path, t1.Workspace).Shared().Owner("alice", 1))
		}
		create(MakeLockRequest("c1", ns).Lock(t1.Repo, t1.Path, t1.Workspace).Shared().Owner("carol", 3))
		create(MakeLockRequest("b2", ns).Lock(t2.Repo, t2.Path, t2.Workspace).Owner("bob", 2))
		create(MakeLockRequest("b3", ns).Lock(t3.Repo, t3.Path, t3.Workspace).Owner("bob", 2))
		fresh(k1)
		fresh(k2)
		fresh(k3)
		Expect(phase(ns, "c1")).To(Equal(locksv1.PhaseGranted))
		Expect(phase(ns, fmt.Sprintf("a-%d", locksv1.MaxSharedHolders-2))).To(Equal(locksv1.PhaseGranted))

		By("bob waits to read the full key; alice waits for two, which bob holds")
		create(MakeLockRequest("b1", ns).Lock(t1.Repo, t1.Path, t1.Workspace).Shared().Owner("bob", 2))
		fresh(k1)
		create(MakeLockRequest("a2", ns).Lock(t2.Repo, t2.Path, t2.Workspace).Owner("alice", 1))
		fresh(k2)
		Expect(phase(ns, "b1")).To(Equal(locksv1.PhasePending))
		Expect(phase(ns, "a2")).To(Equal(locksv1.PhasePending))

		By("carol waits for nothing: she can leave and let bob in, so nobody is deadlocked")
		Expect(detector().Check(ctx, ns)).To(Succeed())
		Expect(victims()).To(BeEmpty(), "the false deadlock: bob waits for any one of alice and carol, and carol can leave")

		By("carol waits for three, which bob holds: now nobody of the full key can leave")
		create(MakeLockRequest("c3", ns).Lock(t3.Repo, t3.Path, t3.Workspace).Owner("carol", 3))
		fresh(k3)
		Expect(phase(ns, "c3")).To(Equal(locksv1.PhasePending))
		stale := detector()

		By("carol gives up her place before the stale detector looks: its cache still shows the deadlock")
		c1 := getRequest(ns, "c1")
		c1.Spec.Release = true
		Expect(k8s.Update(ctx, c1)).To(Succeed())
		syncHistory()
		Expect(stale.Check(ctx, ns)).To(Succeed())
		Expect(victims()).To(BeEmpty(), "carol's place is free in the store: bob is let in on the key's next decision")
		fresh(k1)
		Expect(phase(ns, "b1")).To(Equal(locksv1.PhaseGranted))
	})

	It("fails one victim of a deadlock through a full key, naming every holder it waits for", func() {
		ns := newNamespace()
		cfg := queue.DefaultConfig()
		t1, t2, t3 := target("full"), target("two"), target("three")
		k1, k2, k3 := keyOf(ns, t1), keyOf(ns, t2), keyOf(ns, t3)
		m := newManager("M", 0, cfg)
		for i := range locksv1.MaxSharedHolders - 1 {
			create(MakeLockRequest(fmt.Sprintf("a-%d", i), ns).Lock(t1.Repo, t1.Path, t1.Workspace).Shared().Owner("alice", 1))
		}
		create(MakeLockRequest("c1", ns).Lock(t1.Repo, t1.Path, t1.Workspace).Shared().Owner("carol", 3))
		create(MakeLockRequest("b2", ns).Lock(t2.Repo, t2.Path, t2.Workspace).Owner("bob", 2))
		create(MakeLockRequest("b3", ns).Lock(t3.Repo, t3.Path, t3.Workspace).Owner("bob", 2))
		create(MakeLockRequest("b1", ns).Lock(t1.Repo, t1.Path, t1.Workspace).Shared().Owner("bob", 2))
		create(MakeLockRequest("a2", ns).Lock(t2.Repo, t2.Path, t2.Workspace).Owner("alice", 1))
		create(MakeLockRequest("c3", ns).Lock(t3.Repo, t3.Path, t3.Workspace).Owner("carol", 3))
		for _, k := range []types.NamespacedName{k2, k3, k1, k1} {
			syncHistory()
			m.view.CatchUp()
			m.decide(k)
		}
		for _, name := range []string{"b1", "a2", "c3"} {
			Expect(phase(ns, name)).To(Equal(locksv1.PhasePending), name)
		}
		v := lag.NewView(history, k8s)
		v.CatchUp()
		d := controller.NewDeadlockDetector(v, nopRecorder{}, controller.WithConfig(cfg),
			controller.WithClock(clocktesting.NewFakeClock(time.Now())), controller.WithLiveReader(k8s))
		Expect(d.Check(ctx, ns)).To(Succeed())
		var failed []string
		var list locksv1.LockRequestList
		Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		for _, lr := range list.Items {
			if lr.Status.Phase == locksv1.PhaseFailed {
				failed = append(failed, lr.Name)
				c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
				Expect(c.Reason).To(Equal(locksv1.ReasonDeadlock))
				Expect(c.Message).To(ContainSubstring("bob#2 waits for any of alice#1, carol#3 on acme/infra/full/default (carol#3 waits on acme/infra/three/default)"))
			}
		}
		Expect(failed).To(HaveLen(1), "one victim per deadlock")
		Expect(failed[0]).To(BeElementOf("b1", "a2"), "the victim is a hop of the cycle")
	})
})

// A waiter a counting bound keeps out (issue #45) waits for any one holder of the key, as on a
// full shared key: deadlocked only while every other holder is blocked too.
var _ = Describe("Deadlocks through a counting key", func() {
	It("are found only while every other holder is blocked, and name every holder waited for", func() {
		ns := newNamespace()
		inv := invariants()
		cfg := queue.DefaultConfig()
		t1, t2, t3 := target("counted"), target("two"), target("three")
		k1, k2, k3 := keyOf(ns, t1), keyOf(ns, t2), keyOf(ns, t3)
		m := newManager("M", 0, cfg)
		decide := func(keys ...types.NamespacedName) {
			GinkgoHelper()
			for _, k := range keys {
				syncHistory()
				m.view.CatchUp()
				m.decide(k)
				expectSafe(inv, ns, "M decided "+k.Name)
			}
		}
		check := func() []string {
			GinkgoHelper()
			v := lag.NewView(history, k8s)
			v.CatchUp()
			d := controller.NewDeadlockDetector(v, nopRecorder{}, controller.WithConfig(cfg),
				controller.WithClock(clocktesting.NewFakeClock(time.Now())), controller.WithLiveReader(k8s))
			Expect(d.Check(ctx, ns)).To(Succeed())
			var list locksv1.LockRequestList
			Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			var failed []string
			for _, lr := range list.Items {
				if lr.Status.Phase == locksv1.PhaseFailed {
					failed = append(failed, lr.Name)
					c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
					Expect(c.Reason).To(Equal(locksv1.ReasonDeadlock))
					Expect(c.Message).To(ContainSubstring("bob#2 waits for any of alice#1, carol#3 on acme/infra/counted/default (carol#3 waits on acme/infra/three/default)"))
				}
			}
			return failed
		}

		By("alice and carol hold the counted key at its bound of 2; bob holds two and three")
		create(MakeLockRequest("a1", ns).Lock(t1.Repo, t1.Path, t1.Workspace).MaxHolders(2).Owner("alice", 1))
		create(MakeLockRequest("c1", ns).Lock(t1.Repo, t1.Path, t1.Workspace).MaxHolders(2).Owner("carol", 3))
		create(MakeLockRequest("b2", ns).Lock(t2.Repo, t2.Path, t2.Workspace).Owner("bob", 2))
		create(MakeLockRequest("b3", ns).Lock(t3.Repo, t3.Path, t3.Workspace).Owner("bob", 2))
		decide(k1, k1, k2, k3)
		Expect(phase(ns, "a1")).To(Equal(locksv1.PhaseGranted))
		Expect(phase(ns, "c1")).To(Equal(locksv1.PhaseGranted))

		By("bob waits for a place on the counted key; alice waits for two, which bob holds")
		create(MakeLockRequest("b1", ns).Lock(t1.Repo, t1.Path, t1.Workspace).MaxHolders(2).Owner("bob", 2))
		create(MakeLockRequest("a2", ns).Lock(t2.Repo, t2.Path, t2.Workspace).Owner("alice", 1))
		decide(k1, k2)
		Expect(phase(ns, "b1")).To(Equal(locksv1.PhasePending))
		Expect(phase(ns, "a2")).To(Equal(locksv1.PhasePending))
		Expect(check()).To(BeEmpty(), "carol waits for nothing: she can leave and let bob in")

		By("carol waits for three, which bob holds: nobody of the counted key can leave")
		create(MakeLockRequest("c3", ns).Lock(t3.Repo, t3.Path, t3.Workspace).Owner("carol", 3))
		decide(k3)
		Expect(phase(ns, "c3")).To(Equal(locksv1.PhasePending))
		failed := check()
		Expect(failed).To(HaveLen(1), "one victim per deadlock")
		Expect(failed[0]).To(BeElementOf("b1", "a2"), "the victim is a hop of the cycle")
	})
})

package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

var _ = Describe("Shared locks", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	reader := func(name, owner string) *locksv1.LockRequest {
		return req(name, ns).Owner(owner, 0).Shared().Obj()
	}
	writer := func(name, owner string) *locksv1.LockRequest {
		return req(name, ns).Owner(owner, 0).Obj()
	}
	keyToken := func(name string) int64 { return get(ns, name).Status.Locks[0].FencingToken }

	It("lets readers hold together, keeps a writer waiting and prefers it over a later reader; tokens increase", func() {
		create(reader("r1", "alice"))
		expectPhase(ns, "r1", locksv1.PhaseGranted)
		create(reader("r2", "bob"))
		expectPhase(ns, "r2", locksv1.PhaseGranted)
		t1, t2 := keyToken("r1"), keyToken("r2")
		Expect(t2).To(BeNumerically(">", t1))

		pl := projectLock(ns, vpc)
		Expect(pl.Status.Mode).To(Equal(locksv1.ModeShared))
		Expect(pl.Status.HolderCount).To(BeEquivalentTo(2))
		Expect(pl.Status.Holder).To(BeNil())
		Expect(pl.Status.SharedHolders).To(HaveLen(2))
		Expect(pl.Status.SharedHolders[0].Request.Name).To(Equal("r1"))
		Expect(pl.Status.SharedHolders[0].FencingToken).To(Equal(t1))
		Expect(pl.Status.SharedHolders[1].Owner).To(Equal("bob"))
		Expect(pl.Status.SharedHolders[1].FencingToken).To(Equal(t2))

		create(writer("w", "carol"))
		Eventually(func() string { return get(ns, "w").Status.BlockedBy }, timeout, interval).
			Should(Equal("locked by alice and 1 other shared holder"))
		create(reader("r3", "dave"))
		Eventually(func() string { return get(ns, "r3").Status.BlockedBy }, timeout, interval).
			Should(Equal("locked by alice and 1 other shared holder; waiting behind exclusive request w of carol (writer preference)"))
		consistentlyPhase(ns, "r3", locksv1.PhasePending, time.Second)

		// One reader leaves: the other keeps its grant and its token; the writer still waits.
		release(ns, "r1")
		Eventually(func() int32 { return projectLock(ns, vpc).Status.HolderCount }, timeout, interval).Should(BeEquivalentTo(1))
		Expect(keyToken("r2")).To(Equal(t2))
		Expect(get(ns, "w").Status.Phase).To(Equal(locksv1.PhasePending))

		// The last reader leaves: the writer holds alone, above both readers.
		deleteRequest(ns, "r2")
		expectPhase(ns, "w", locksv1.PhaseGranted)
		tw := keyToken("w")
		Expect(tw).To(BeNumerically(">", t2))
		pl = projectLock(ns, vpc)
		Expect(pl.Status.Mode).To(Equal(locksv1.ModeExclusive))
		Expect(pl.Status.Holder.Owner).To(Equal("carol"))
		Expect(pl.Status.SharedHolders).To(BeEmpty())
		Expect(get(ns, "r3").Status.Phase).To(Equal(locksv1.PhasePending))

		// The writer leaves: the reader behind it holds, above the writer.
		release(ns, "w")
		expectPhase(ns, "r3", locksv1.PhaseGranted)
		Expect(keyToken("r3")).To(BeNumerically(">", tw))
	})

	It("finds and names a deadlock through a shared holder", func() {
		on := func(name, path, owner string, pull int64) *LockRequestWrapper {
			return MakeLockRequest(name, ns).Lock("acme/infra", path, "default").Owner(owner, pull)
		}
		// alice#1 and carol#3 read k1; bob#2 holds k2; alice waits for k2 behind bob; then bob
		// asks for k1 exclusively: he waits for both readers, and alice waits for him.
		create(on("a1", "k1", "alice", 1).Shared().Obj(), on("c1", "k1", "carol", 3).Shared().Obj(), on("b1", "k2", "bob", 2).Obj())
		for _, n := range []string{"a1", "c1", "b1"} {
			expectPhase(ns, n, locksv1.PhaseGranted)
		}
		create(on("a2", "k2", "alice", 1).Obj())
		Eventually(condOf(ns, "a2"), timeout, interval).Should(Equal("False/Queued: locked by pull #2 (bob); position 1 of 1"))
		create(on("b2", "k1", "bob", 2).Obj())
		const cycle = "deadlock: alice#1 waits for bob#2 on acme/infra/k2/default; bob#2 waits for alice#1 on acme/infra/k1/default"
		Eventually(condOf(ns, "b2"), timeout, interval).Should(Equal("False/Deadlock: " + cycle))
		expectPhase(ns, "b2", locksv1.PhaseFailed)
		Expect(get(ns, "a2").Status.Phase).To(Equal(locksv1.PhasePending))
	})

	It("force-unlocks every shared holder", func() {
		create(reader("r1", "alice"), reader("r2", "bob"))
		expectPhase(ns, "r1", locksv1.PhaseGranted)
		expectPhase(ns, "r2", locksv1.PhaseGranted)
		Expect(k8s.Delete(ctx, projectLock(ns, vpc))).To(Succeed())
		Eventually(condOf(ns, "r1"), timeout, interval).Should(HavePrefix("False/ForceUnlocked"))
		Eventually(condOf(ns, "r2"), timeout, interval).Should(HavePrefix("False/ForceUnlocked"))
	})
})

package controller_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

var _ = Describe("Counting locks", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	upgrade := func(i int, maxHolders int32) *locksv1.LockRequest {
		return req(fmt.Sprintf("up%d", i), ns).Owner(fmt.Sprintf("cluster-%d", i), 0).MaxHolders(maxHolders).Obj()
	}
	granted := func() []string {
		var out []string
		for i := range 5 {
			if r := get(ns, fmt.Sprintf("up%d", i)); r.Status.Phase == locksv1.PhaseGranted {
				out = append(out, r.Name)
			}
		}
		return out
	}
	keyToken := func(name string) int64 { return get(ns, name).Status.Locks[0].FencingToken }

	It("lets at most maxHolders hold, each with a token of its own, and hands a slot to the next", func() {
		for i := range 5 {
			create(upgrade(i, 3))
		}
		// Three hold: each counted grant has its ProjectLock write to itself, and the key is
		// decided again at once for the waiters it left (no other event wakes it).
		Eventually(granted, timeout, interval).Should(HaveLen(3))
		Consistently(granted, time.Second, interval).Should(HaveLen(3))
		holders := granted()
		var tokens []int64
		for _, n := range holders {
			tokens = append(tokens, keyToken(n))
		}
		for i := range tokens {
			for j := range i {
				Expect(tokens[i]).NotTo(Equal(tokens[j]), "tokens %v: each counted grant's is its own", tokens)
			}
		}
		pl := projectLock(ns, vpc)
		Expect(pl.Status.Mode).To(Equal(locksv1.ModeShared))
		Expect(pl.Status.HolderCount).To(BeEquivalentTo(3))
		Expect(pl.Status.MaxHolders).To(BeEquivalentTo(3))
		Expect(pl.Status.QueueLength).To(BeEquivalentTo(2))
		for _, h := range pl.Status.SharedHolders {
			Expect(h.FencingToken).To(Equal(keyToken(h.Request.Name)))
		}
		waiting := ""
		for i := range 5 {
			if n := fmt.Sprintf("up%d", i); get(ns, n).Status.Phase == locksv1.PhasePending {
				waiting = n
				break
			}
		}
		Eventually(func() string { return get(ns, waiting).Status.BlockedBy }, timeout, interval).
			Should(HaveSuffix(" and 2 other shared holders (3 of at most 3 hold it)"))

		// One leaves: exactly one waiter takes its place, above every token before. (Three held
		// before the release was seen: wait for it first.)
		release(ns, holders[0])
		expectPhase(ns, holders[0], locksv1.PhaseReleased)
		Eventually(func() int { return len(granted()) }, timeout, interval).Should(Equal(3))
		Consistently(granted, time.Second, interval).Should(HaveLen(3))
		top := max(tokens[0], tokens[1], tokens[2])
		for _, n := range granted() {
			if n != holders[1] && n != holders[2] {
				Expect(keyToken(n)).To(BeNumerically(">", top))
			}
		}
	})

	It("hands slots that open at once to as many waiters, each counted grant decided on its own", func() {
		// Alice holds alone (maxHolders 1); bob and carol wait with maxHolders 3, High (no aging
		// step requeues the key). Her request is deleted: one event. Each counted grant has a
		// ProjectLock write to itself, and the key is decided again at once for the waiter it left:
		// nothing else wakes it (mutant counting-decides-again).
		create(upgrade(0, 1))
		expectPhase(ns, "up0", locksv1.PhaseGranted)
		for i := 1; i <= 2; i++ {
			create(req(fmt.Sprintf("up%d", i), ns).Owner(fmt.Sprintf("cluster-%d", i), 0).MaxHolders(3).Priority(locksv1.PriorityHigh).Obj())
			expectPhase(ns, fmt.Sprintf("up%d", i), locksv1.PhasePending)
		}
		deleteRequest(ns, "up0")
		expectPhase(ns, "up1", locksv1.PhaseGranted)
		expectPhase(ns, "up2", locksv1.PhaseGranted)
		Expect(keyToken("up2")).NotTo(Equal(keyToken("up1")))
	})

	It("keeps every holder's bound when requests on one key disagree", func() {
		create(upgrade(0, 1))
		expectPhase(ns, "up0", locksv1.PhaseGranted)
		create(upgrade(1, 3), upgrade(2, 3))
		expectPhase(ns, "up1", locksv1.PhasePending)
		expectPhase(ns, "up2", locksv1.PhasePending)
		consistentlyPhase(ns, "up1", locksv1.PhasePending, time.Second)
		Expect(get(ns, "up2").Status.Phase).To(Equal(locksv1.PhasePending))
		Expect(projectLock(ns, vpc).Status.MaxHolders).To(BeEquivalentTo(1))

		release(ns, "up0")
		expectPhase(ns, "up1", locksv1.PhaseGranted)
		expectPhase(ns, "up2", locksv1.PhaseGranted)
		Expect(keyToken("up2")).NotTo(Equal(keyToken("up1")))
		Eventually(func() int32 { return projectLock(ns, vpc).Status.MaxHolders }, timeout, interval).Should(BeEquivalentTo(3))
	})
})

package crash

import (
	"fmt"
	"math/rand"
	"time"

	"github.com/anishathalye/porcupine"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/lincheck"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

type churnResult struct {
	grants int64
	err    error
}

func runChurn(c framework.Churn) <-chan churnResult {
	done := make(chan churnResult, 1)
	go func() {
		grants, err := c.Run(ctx, k8s)
		done <- churnResult{grants, err}
	}()
	return done
}

// killWhileChurning waits for the churn to end, and meanwhile, at random moments (minMs plus up
// to spreadMs milliseconds apart), calls kill (which returns how many managers it killed), waits
// up to 400 ms more and calls restart. It returns the churn's result and the number of kills.
func killWhileChurning(done <-chan churnResult, rng *rand.Rand, minMs, spreadMs int, kill func() int, restart func()) (churnResult, int) {
	kills := 0
	for {
		select {
		case res := <-done:
			return res, kills
		case <-time.After(time.Duration(minMs+rng.Intn(spreadMs)) * time.Millisecond):
		}
		kills += kill()
		time.Sleep(time.Duration(rng.Intn(400)) * time.Millisecond)
		restart()
	}
}

// expectLinearizable checks what the requesters observed with porcupine against a fenced lock.
func expectLinearizable(h *lincheck.History) {
	GinkgoHelper()
	res := h.Check(2 * time.Minute)
	GinkgoWriter.Printf("porcupine: %s\n", res)
	Expect(res.Verdict).To(Equal(porcupine.Ok), "the requesters' history is not that of a fenced lock:\n%s", res.Explanation)
	Expect(res.Operations).To(BeNumerically(">", 0))
}

func expectSafeAndConverged(ns string, ic *framework.InvariantChecker, grants int64) {
	GinkgoHelper()
	Eventually(func() string { return converged(ns) }, 60*time.Second, 100*time.Millisecond).Should(BeEmpty(),
		"every requester released, so no lock may stay held or queued")
	Eventually(func() int { _, g := ic.Stats(); return g }, 10*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", grants))
	Expect(ic.Violations()).To(BeEmpty(), "a key was granted to two holders at once")
	events, seen := ic.Stats()
	GinkgoWriter.Printf("invariant checker: %d events, %d grants, no key ever held by two identities\n", events, seen)
}

var _ = Describe("A manager killed with SIGKILL", func() {
	It("converges after every restart and never grants a key twice, while requesters churn", func() {
		ns := newNamespace()
		ic := framework.StartChecker(ctx, k8s, ns)
		rng := rand.New(rand.NewSource(GinkgoRandomSeed()))

		m := startManager("manager-0")
		history := lincheck.NewHistory()
		done := runChurn(framework.Churn{
			Namespace: ns, Requesters: 12, Rounds: 20, Keys: 4, MultiLock: 0.25,
			WaitLimit: 3 * time.Minute, Seed: GinkgoRandomSeed(), History: history,
		})
		// Kill at a random moment: mid-reconcile, mid-hand-off, mid-cache-sync.
		restarts := 0
		res, kills := killWhileChurning(done, rng, 200, 1800,
			func() int { m.kill(); return 1 },
			func() { restarts++; m = startManager(fmt.Sprintf("manager-%d", restarts)) })
		Expect(res.err).NotTo(HaveOccurred(), "a requester was not served across the restarts")
		GinkgoWriter.Printf("%d grants across %d SIGKILLs\n", res.grants, kills)
		Expect(kills).To(BeNumerically(">=", 3), "the churn ended before the manager was killed enough to mean anything")
		Expect(res.grants).To(BeEquivalentTo(12 * 20))
		expectSafeAndConverged(ns, ic, res.grants)
		expectLinearizable(history)
	})
})

var _ = Describe("Two managers with leader election", func() {
	It("keep granting after the leader is killed, within the leader election timings", func() {
		ns := newNamespace()
		const (
			leaseDuration = 4 * time.Second
			retryPeriod   = 500 * time.Millisecond
		)
		args := []string{
			"--leader-elect", "--leader-election-namespace=" + ns,
			"--leader-elect-lease-duration=" + leaseDuration.String(),
			"--leader-elect-renew-deadline=3s",
			"--leader-elect-retry-period=" + retryPeriod.String(),
		}
		ms := []*manager{startManager("a-0", args...), startManager("b-0", args...)}
		ic := framework.StartChecker(ctx, k8s, ns)
		history := lincheck.NewHistory()
		done := runChurn(framework.Churn{
			Namespace: ns, Requesters: 6, Rounds: 25, Keys: 3, MultiLock: 0.25,
			WaitLimit: 3 * time.Minute, Seed: GinkgoRandomSeed(), History: history,
		})

		for round := 1; round <= 3; round++ {
			var leader int
			Eventually(func() int {
				n := 0
				for i, m := range ms {
					if m.leads() {
						leader, n = i, n+1
					}
				}
				return n
			}, 30*time.Second, 50*time.Millisecond).Should(Equal(1), "exactly one manager should lead")

			ms[leader].kill()
			killed := time.Now()
			probe := fmt.Sprintf("probe-%d", round)
			Expect(k8s.Create(ctx, MakeLockRequest(probe, ns).Lock("acme/probe", probe, "default").Owner("probe", int64(round)).Obj())).To(Succeed())
			// The follower takes over once the dead leader's Lease lapses (leaseDuration after
			// its last renewal, noticed within a retryPeriod), then syncs its caches and grants.
			bound := leaseDuration + retryPeriod + 10*time.Second
			Eventually(func() locksv1.LockRequestPhase {
				var lr locksv1.LockRequest
				if err := k8s.Get(ctx, keyOf(ns, probe), &lr); err != nil {
					return ""
				}
				return lr.Status.Phase
			}, bound, 50*time.Millisecond).Should(Equal(locksv1.PhaseGranted), "no grant after the leader died")
			GinkgoWriter.Printf("failover %d: a new request was granted %s after the leader was killed (lease duration %s)\n",
				round, time.Since(killed).Round(time.Millisecond), leaseDuration)
			Expect(k8s.Delete(ctx, &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: probe}})).To(Succeed())
			ms[leader] = startManager(fmt.Sprintf("%s-%d", ms[leader].name[:1], round), args...)
		}

		var res churnResult
		Eventually(done, 3*time.Minute).Should(Receive(&res))
		Expect(res.err).NotTo(HaveOccurred())
		expectSafeAndConverged(ns, ic, res.grants)
		expectLinearizable(history)
	})
})

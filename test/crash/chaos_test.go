package crash

import (
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/lincheck"
)

// chaosRounds is each requester's rounds: TURNSTILE_CHAOS_ROUNDS, or a size `make test` can
// afford (`make chaos` runs a longer one).
func chaosRounds() int {
	if n, err := strconv.Atoi(os.Getenv("TURNSTILE_CHAOS_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 12
}

var _ = Describe("Active-active replicas killed at random", func() {
	It("never grant a key twice, leave nothing stuck, and give the requesters a fenced lock's history", func() {
		ns := newNamespace()
		args := []string{
			"--active-active", "--membership-namespace=" + ns,
			"--membership-renew-interval=500ms", "--membership-lapse=2s", "--backup-delay=300ms",
		}
		rng := rand.New(rand.NewSource(GinkgoRandomSeed()))
		started := 0
		start := func() *manager {
			started++
			name := fmt.Sprintf("replica-%d", started)
			return startManager(name, append(args, "--membership-id="+name)...)
		}
		replicas := []*manager{start(), start(), start()}
		ic := framework.StartChecker(ctx, k8s, ns)
		history := lincheck.NewHistory()
		const requesters = 8
		rounds := chaosRounds()
		done := runChurn(framework.Churn{
			Namespace: ns, Requesters: requesters, Rounds: rounds, Keys: 4, MultiLock: 0.25,
			WaitLimit: 3 * time.Minute, Seed: GinkgoRandomSeed(), History: history,
		})
		// SIGKILL a random replica: mid-reconcile, mid-hand-off, as owner or as backup. Now and
		// then two die at once, leaving one replica that owns nothing of theirs yet.
		kill := func() int {
			victims := 1
			if rng.Intn(4) == 0 {
				victims = 2
			}
			for range victims {
				i := rng.Intn(len(replicas))
				replicas[i].kill()
				replicas = append(replicas[:i], replicas[i+1:]...)
			}
			return victims
		}
		res, kills := killWhileChurning(done, rng, 300, 1500, kill, func() {
			for len(replicas) < 3 {
				replicas = append(replicas, start())
			}
		})
		Expect(res.err).NotTo(HaveOccurred(), "a requester was not served across the kills")
		GinkgoWriter.Printf("%d grants across %d SIGKILLs of %d replicas\n", res.grants, kills, started)
		Expect(kills).To(BeNumerically(">=", 3), "the churn ended before replicas were killed enough to mean anything")
		Expect(res.grants).To(BeEquivalentTo(requesters * rounds))
		expectSafeAndConverged(ns, ic, res.grants)
		expectLinearizable(history)
	})
})

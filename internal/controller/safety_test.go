package controller_test

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// churn runs framework.Churn: requesters that each loop creating a request on a random key,
// waiting for its grant, holding it briefly and releasing it (by delete or spec.release, at
// random). It returns the number of grants the requesters saw. No churn request may fail, and
// Churn stops at the first that ends without its grant: none has a wait timeout, the queue cap is
// above the number of requesters, and each names one key while its identity holds nothing else,
// so no wait-for cycle is possible and a Deadlock failure would be a false positive.
func churn(ns string, requesters, rounds, keys int, seed int64) int64 {
	GinkgoHelper()
	grants, err := framework.Churn{
		Namespace: ns, Requesters: requesters, Rounds: rounds, Keys: keys,
		WaitLimit: 180 * time.Second, Poll: 50 * time.Millisecond, Watch: true, Seed: seed,
	}.Run(ctx, k8s)
	if err != nil {
		dumpProcess()
	}
	Expect(err).NotTo(HaveOccurred(), func() string { return dump(ns) })
	return grants
}

// dumpProcess writes the goroutines and the controller-runtime metrics (work queues) of this
// process next to TURNSTILE_TEST_LOG, when it is set: what the manager was doing when a churn
// request waited too long.
func dumpProcess() {
	path := os.Getenv("TURNSTILE_TEST_LOG")
	if path == "" {
		return
	}
	if f, err := os.Create(path + ".goroutines"); err == nil {
		_ = pprof.Lookup("goroutine").WriteTo(f, 2)
		_ = f.Close()
	}
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return
	}
	if f, err := os.Create(path + ".metrics"); err == nil {
		for _, mf := range mfs {
			_, _ = expfmt.MetricFamilyToText(f, mf)
		}
		_ = f.Close()
	}
}

// startMeter starts an UndecidedMeter on ns, stopped at cleanup; with TURNSTILE_TEST_LOG set,
// it logs what it saw beside the managers' log.
func startMeter(ns string) *framework.UndecidedMeter {
	GinkgoHelper()
	var log io.Writer
	if path := os.Getenv("TURNSTILE_TEST_LOG"); path != "" {
		f, err := os.Create(path + ".watch-" + ns)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(f.Close)
		log = f
	}
	m, err := framework.StartUndecidedMeter(ctx, k8s, ns, log)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		GinkgoWriter.Println(m.Report(ns))
		m.Stop()
	})
	return m
}

// dump describes a namespace's locks and requests, for a failure message.
func dump(ns string) string {
	var pls locksv1.ProjectLockList
	_ = k8s.List(ctx, &pls, client.InNamespace(ns))
	var lrs locksv1.LockRequestList
	_ = k8s.List(ctx, &lrs, client.InNamespace(ns))
	out := ""
	for _, pl := range pls.Items {
		h := "<free>"
		if pl.Status.Holder != nil {
			h = fmt.Sprintf("%s#%d %v", pl.Status.Holder.Owner, pl.Status.Holder.Pull, pl.Status.Holder.Requests)
		}
		out += fmt.Sprintf("projectlock %s holder=%s queue=%d token=%d\n", pl.Name, h, pl.Status.QueueLength, pl.Status.FencingToken)
	}
	for _, lr := range lrs.Items {
		if lr.Status.Phase.IsFinal() {
			continue
		}
		out += fmt.Sprintf("lockrequest %s uid=%s phase=%s locks=%v release=%v\n", lr.Name, lr.UID, lr.Status.Phase, lr.Status.Locks, lr.Spec.Release)
	}
	return out
}

func expectNoViolations(ic *framework.InvariantChecker, minGrants int64) {
	GinkgoHelper()
	// Let the last events arrive before judging.
	Eventually(func() int { _, g := ic.Stats(); return g }, timeout, interval).Should(BeNumerically(">=", minGrants))
	Expect(ic.Violations()).To(BeEmpty())
	events, grants := ic.Stats()
	GinkgoWriter.Printf("invariant checker: %d events, %d grants, no key ever held by two identities\n", events, grants)
}

var _ = Describe("Safety under concurrency", func() {
	// churnSafely churns in a fresh namespace under the invariant checker: every requester is
	// served and no key is ever held by two identities.
	churnSafely := func(requesters, rounds, keys int, seed int64) {
		ns := newNamespace()
		ic := framework.StartChecker(ctx, k8s, ns)
		meter := startMeter(ns)
		grants := churn(ns, requesters, rounds, keys, seed)
		Expect(grants).To(BeEquivalentTo(requesters * rounds))
		expectNoViolations(ic, grants)
		longest, what, items := meter.Longest()
		Expect(items).To(BeNumerically(">=", requesters*rounds), "the meter should have timed every request's first status at least")
		Expect(longest).To(BeNumerically("<=", undecidedLimit), "a key with work went undecided for %s (%s)", longest, what)
	}

	// The churns are the suite's longest specs: SpecPriority is about the seconds each takes on a
	// busy 2-core machine, which RunSuiteInShards balances its shards by (and Ginkgo starts them
	// first).
	It("never grants one key to two holders with 50 requesters churning on one key", SpecPriority(45), func() {
		churnSafely(50, 4, 1, 1)
	})

	It("never grants one key to two holders with 50 requesters churning on many keys", SpecPriority(40), func() {
		churnSafely(50, 6, 10, 100)
	})

	It("never grants one key to two holders with two managers running at once", SpecPriority(60), func() {
		second, err := env.StartManager(options)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(second.Stop()).To(Succeed()) })
		churnSafely(50, 4, 3, 1000)
	})
})

var _ = Describe("Convergence after crashes", Ordered, func() {
	// These specs stop the suite's manager to build the states a crash leaves behind, then
	// start a new one and expect it to finish the job.
	restart := func(between func()) {
		Expect(mgr.Stop()).To(Succeed())
		between()
		var err error
		mgr, err = env.StartManager(options)
		Expect(err).NotTo(HaveOccurred())
	}

	It("hands the lock on when the holder was deleted while no manager ran", func() {
		ns := newNamespace()
		aliceHoldsBobWaits(ns)
		restart(func() { deleteRequest(ns, "a") })
		expectPhase(ns, "b", locksv1.PhaseGranted)
	})

	It("completes a hand-off the manager crashed in the middle of", func() {
		ns := newNamespace()
		aliceHoldsBobWaits(ns)
		restart(func() {
			// The state after steps a and b of a hand-off, before c: the old holder is
			// Released, the ProjectLock names the new holder, whose own status still says Pending.
			a := get(ns, "a")
			a.Status.Phase = locksv1.PhaseReleased
			a.Status.Locks[0].Held = false
			Expect(k8s.Status().Update(ctx, a)).To(Succeed())
			b := get(ns, "b")
			pl := projectLock(ns, vpc)
			pl.Status.Holder = &locksv1.LockHolder{Owner: "bob", Pull: 2, Since: metav1.Now(),
				Requests: []locksv1.HolderRequest{{Name: "b", UID: string(b.UID)}}}
			pl.Status.FencingToken++
			Expect(k8s.Status().Update(ctx, pl)).To(Succeed())
		})
		expectPhase(ns, "b", locksv1.PhaseGranted)
		Expect(get(ns, "b").Status.FencingToken).To(Equal(projectLock(ns, vpc).Status.FencingToken))
	})

	It("recreates a ProjectLock deleted while no manager ran and force-unlocks its holder", func() {
		ns := newNamespace()
		aliceHoldsBobWaits(ns)
		restart(func() {
			Expect(k8s.Delete(ctx, projectLock(ns, vpc))).To(Succeed())
		})
		expectPhase(ns, "a", locksv1.PhaseReleased)
		expectPhase(ns, "b", locksv1.PhaseGranted)
		Expect(projectLock(ns, vpc).Status.Holder.Owner).To(Equal("bob"))
	})
})

package controller_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/deadlock"
	"github.com/turnstile-dev/turnstile/internal/queue"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// twoCycle is the message of the classic deadlock below: alice#1 holds k1 and waits for k2,
// bob#2 holds k2 and waits for k1.
const twoCycle = "deadlock: alice#1 waits for bob#2 on acme/infra/k2/default; bob#2 waits for alice#1 on acme/infra/k1/default"

// detectionBound is how soon after the closing request starts waiting its cycle must be broken.
// The on-wait check takes milliseconds; the bound is the promise, far above that and
// below the periodic scan (2s in this suite), so a cycle left to the scan fails the spec.
const detectionBound = time.Second

var _ = Describe("Deadlock detection", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	// on is a request for the one key acme/infra/<path>/default.
	on := func(name, path string) *LockRequestWrapper {
		return MakeLockRequest(name, ns).Lock("acme/infra", path, "default")
	}

	// grantEach creates the requests and waits until each of them is granted.
	grantEach := func(reqs ...*locksv1.LockRequest) {
		GinkgoHelper()
		for _, r := range reqs {
			create(r)
		}
		for _, r := range reqs {
			expectPhase(ns, r.Name, locksv1.PhaseGranted)
		}
	}

	// holdAndWait builds the classic deadlock up to its last step: alice#1 holds k1 (a1), bob#2
	// holds k2 (b1), and alice#1 waits for k2 (a2) behind bob. The caller closes the cycle.
	holdAndWait := func() {
		GinkgoHelper()
		grantEach(on("a1", "k1").Owner("alice", 1).Obj(), on("b1", "k2").Owner("bob", 2).Obj())
		create(on("a2", "k2").Owner("alice", 1).Obj())
		Eventually(condOf(ns, "a2"), timeout, interval).Should(Equal("False/Queued: locked by pull #2 (bob); position 1 of 1"))
	}

	// expectVictim waits for name to fail with reason Deadlock and msg, and checks what a
	// victim's status must say. It returns the victim.
	expectVictim := func(name, msg string) *locksv1.LockRequest {
		GinkgoHelper()
		expectPhase(ns, name, locksv1.PhaseFailed)
		v := get(ns, name)
		Expect(condOf(ns, name)()).To(Equal("False/Deadlock: " + msg))
		Expect(meta.FindStatusCondition(v.Status.Conditions, locksv1.ConditionStalled)).To(HaveField("Status", BeEquivalentTo("True")))
		Expect(meta.FindStatusCondition(v.Status.Conditions, locksv1.ConditionStalled)).To(HaveField("Reason", locksv1.ReasonDeadlock))
		Expect(v.Status.BlockedBy).To(Equal(msg))
		Expect(v.Status.FinishedAt).NotTo(BeNil())
		Expect(v.Status.QueuedAt).NotTo(BeNil(), "the victim had started waiting")
		for _, l := range v.Status.Locks {
			Expect(l.Held).To(BeFalse())
		}
		return v
	}

	// expectDetectedWithin checks, with the operator's own timestamps, that the victim's
	// Deadlock event came within bound of the victim starting to wait.
	expectDetectedWithin := func(victim *locksv1.LockRequest, bound time.Duration) {
		GinkgoHelper()
		var ev eventsv1.Event
		Eventually(func() []eventsv1.Event {
			var out []eventsv1.Event
			for _, e := range eventsAbout(victim)() {
				if e.Reason == locksv1.ReasonDeadlock {
					out = append(out, e)
				}
			}
			if len(out) > 0 {
				ev = out[0]
			}
			return out
		}, timeout, interval).Should(HaveLen(1), "one Deadlock event on the victim")
		latency := ev.EventTime.Sub(victim.Status.QueuedAt.Time)
		GinkgoWriter.Printf("deadlock detected %s after the closing request started waiting\n", latency)
		AddReportEntry("deadlock detection latency", latency.String())
		Expect(latency).To(BeNumerically("<", bound), "detected %s after the closing request started waiting", latency)
	}

	It("detects the classic two-holder cycle within a second of the closing request and fails exactly one victim", func() {
		holdAndWait()
		consistentlyPhase(ns, "a2", locksv1.PhasePending, 300*time.Millisecond)

		By("bob#2 closes the cycle by asking for k1, which alice#1 holds")
		create(on("b2", "k1").Owner("bob", 2).Obj())
		victim := expectVictim("b2", twoCycle)
		expectDetectedWithin(victim, detectionBound)

		By("every member of the cycle is told, the victim as such")
		Eventually(eventNotes(victim), timeout, interval).Should(ContainElement(
			"Warning Deadlock: chosen as the victim (policy newest): " + twoCycle))
		Eventually(eventNotes(get(ns, "a2")), timeout, interval).Should(ContainElement(
			"Warning Deadlock: in a deadlock cycle; b2 was failed to break it: " + twoCycle))

		By("exactly one victim: the other waiter keeps waiting, through a periodic scan too")
		Consistently(func() []locksv1.LockRequestPhase {
			return []locksv1.LockRequestPhase{phaseOf(ns, "a1")(), phaseOf(ns, "b1")(), phaseOf(ns, "a2")()}
		}, options.DeadlockScan+500*time.Millisecond, interval).Should(Equal(
			[]locksv1.LockRequestPhase{locksv1.PhaseGranted, locksv1.PhaseGranted, locksv1.PhasePending}))

		By("the victim's owner releases what it held: the survivor is granted")
		release(ns, "b1")
		expectPhase(ns, "a2", locksv1.PhaseGranted)
		Expect(projectLock(ns, locksv1.LockTarget{Repo: "acme/infra", Path: "k2", Workspace: "default"}).Status.Holder.Owner).To(Equal("alice"))
	})

	It("detects a three-way cycle and names all of it", func() {
		grantEach(
			on("a1", "k1").Owner("alice", 1).Obj(),
			on("b1", "k2").Owner("bob", 2).Obj(),
			on("c1", "k3").Owner("carol", 3).Obj(),
		)
		create(on("a2", "k2").Owner("alice", 1).Obj())
		expectPhase(ns, "a2", locksv1.PhasePending)
		create(on("b2", "k3").Owner("bob", 2).Obj())
		expectPhase(ns, "b2", locksv1.PhasePending)

		By("carol#3 closes the cycle")
		create(on("c2", "k1").Owner("carol", 3).Obj())
		victim := expectVictim("c2", "deadlock: alice#1 waits for bob#2 on acme/infra/k2/default; "+
			"bob#2 waits for carol#3 on acme/infra/k3/default; carol#3 waits for alice#1 on acme/infra/k1/default")
		expectDetectedWithin(victim, detectionBound)
		for _, n := range []string{"a2", "b2"} {
			Eventually(eventNotes(get(ns, n)), timeout, interval).Should(ContainElement(HavePrefix("Warning Deadlock: in a deadlock cycle; c2 was failed to break it: ")))
		}
		consistentlyPhase(ns, "a2", locksv1.PhasePending, 500*time.Millisecond)
		Expect(phaseOf(ns, "b2")()).To(Equal(locksv1.PhasePending))

		By("carol#3 releases k3: bob#2 goes on, then alice#1")
		deleteRequest(ns, "c1")
		expectPhase(ns, "b2", locksv1.PhaseGranted)
		deleteRequest(ns, "b1")
		deleteRequest(ns, "b2")
		expectPhase(ns, "a2", locksv1.PhaseGranted)
	})

	It("detects a cycle through a queue: waiting behind someone counts as waiting for them", func() {
		// dave#4 holds k2, bob#2 queues for k2 first and alice#1 behind him. Once dave is done,
		// bob gets k2 and waits for k1 forever: the cycle exists before anyone is stuck.
		grantEach(on("a1", "k1").Owner("alice", 1).Obj(), on("d1", "k2").Owner("dave", 4).Obj())
		create(on("b-k2", "k2").Owner("bob", 2).Obj())
		expectPhase(ns, "b-k2", locksv1.PhasePending)
		create(on("a-k2", "k2").Owner("alice", 1).Obj())
		Eventually(condOf(ns, "a-k2"), timeout, interval).Should(HaveSuffix("position 2 of 2"))

		create(on("b-k1", "k1").Owner("bob", 2).Obj())
		victim := expectVictim("b-k1", twoCycle)
		expectDetectedWithin(victim, detectionBound)
		Expect(phaseOf(ns, "b-k2")()).To(Equal(locksv1.PhasePending))
		Expect(phaseOf(ns, "a-k2")()).To(Equal(locksv1.PhasePending))

		By("the queue then drains in order")
		deleteRequest(ns, "d1")
		expectPhase(ns, "b-k2", locksv1.PhaseGranted)
		deleteRequest(ns, "b-k2")
		expectPhase(ns, "a-k2", locksv1.PhaseGranted)
	})

	It("fails nobody when the waits form chains and a diamond but no cycle", func() {
		// alice#1 holds k1; bob#2 holds k2 and waits for k1; carol#3 holds k3 and waits for k2;
		// dave#4 waits for k3 and for k1. Everyone reaches alice, nobody reaches back.
		grantEach(
			on("a1", "k1").Owner("alice", 1).Obj(),
			on("b1", "k2").Owner("bob", 2).Obj(),
			on("c1", "k3").Owner("carol", 3).Obj(),
		)
		create(
			on("b2", "k1").Owner("bob", 2).Obj(),
			on("c2", "k2").Owner("carol", 3).Obj(),
			on("d3", "k3").Owner("dave", 4).Obj(),
			on("d1", "k1").Owner("dave", 4).Obj(),
		)
		waiters := []string{"b2", "c2", "d3", "d1"}
		pending := make([]locksv1.LockRequestPhase, len(waiters))
		for i := range pending {
			pending[i] = locksv1.PhasePending
		}
		phases := func() []locksv1.LockRequestPhase {
			out := make([]locksv1.LockRequestPhase, len(waiters))
			for i, n := range waiters {
				out[i] = phaseOf(ns, n)()
			}
			return out
		}
		Eventually(phases, timeout, interval).Should(Equal(pending))
		// Long enough for the on-wait checks and a periodic scan.
		Consistently(phases, options.DeadlockScan+500*time.Millisecond, interval).Should(Equal(pending))

		By("alice#1 releases: the chain unwinds")
		deleteRequest(ns, "a1")
		expectPhase(ns, "b2", locksv1.PhaseGranted)
	})

	Context("with the victim policy and metrics of a dedicated manager", func() {
		// Each entry runs a manager with the policy under test, a metrics registry, and no
		// periodic scan: the cycle must be found by the check on the closing request alone.
		DescribeTable("fails the victim the policy chooses, and counts the deadlock",
			func(policy deadlock.Policy, victim, survivor, victimsHolder string) {
				reg := withMetrics(func(o *controller.SetupOptions) {
					o.DeadlockPolicy = policy
					o.DeadlockScan = 0
					// The production aging step: a2, aged a step by a slow machine, would be High
					// beside b2, and lowest-priority would choose differently.
					o.Queue.AgingStep = queue.DefaultConfig().AgingStep
				})
				Expect(metric(reg, "turnstile_deadlocks_total")()).To(BeZero())
				holdAndWait()
				// bob#2's closing request is High priority: lowest-priority must pass it over.
				create(on("b2", "k1").Owner("bob", 2).Priority(locksv1.PriorityHigh).Obj())
				v := expectVictim(victim, twoCycle)
				expectDetectedWithin(v, detectionBound)
				Eventually(eventNotes(v), timeout, interval).Should(ContainElement(
					fmt.Sprintf("Warning Deadlock: chosen as the victim (policy %s): %s", policy, twoCycle)))
				Expect(metric(reg, "turnstile_deadlocks_total")()).To(Equal(1.0))
				Expect(metric(reg, "turnstile_requests_finished_total", "phase", "Failed", "reason", "Deadlock")()).To(Equal(1.0))
				consistentlyPhase(ns, survivor, locksv1.PhasePending, 500*time.Millisecond)

				release(ns, victimsHolder)
				expectPhase(ns, survivor, locksv1.PhaseGranted)
				Expect(metric(reg, "turnstile_deadlocks_total")()).To(Equal(1.0), "one cycle, one deadlock")
			},
			Entry("newest (the default): the closing request", deadlock.PolicyNewest, "b2", "a2", "b1"),
			Entry("oldest: the request that waited first", deadlock.PolicyOldest, "a2", "b2", "a1"),
			Entry("lowest-priority: the Normal request, not the High one", deadlock.PolicyLowestPriority, "a2", "b2", "a1"),
		)

		It("skips the check for newcomers nobody can wait for, and still checks, and breaks, a cycle", func() {
			reg := withMetrics(func(o *controller.SetupOptions) { o.DeadlockScan = 0 })
			checks := func(outcome string) func() float64 {
				return metric(reg, "turnstile_deadlock_checks_total", "outcome", outcome)
			}
			grantEach(on("a1", "k1").Owner("alice", 1).Obj(), on("b1", "k2").Owner("bob", 2).Obj())

			By("carol#3 and then dave#4 queue at the back of k1, holding nothing else: no check")
			create(on("c1", "k1").Owner("carol", 3).Obj())
			Eventually(checks("skipped"), timeout, interval).Should(Equal(1.0))
			create(on("d1", "k1").Owner("dave", 4).Obj())
			Eventually(checks("skipped"), timeout, interval).Should(Equal(2.0))
			Expect(checks("checked")()).To(BeNumerically("<=", 0), "no namespace check for them")

			By("alice#1 holds k1 and queues for k2: checked, no cycle")
			create(on("a2", "k2").Owner("alice", 1).Obj())
			Eventually(checks("checked"), timeout, interval).Should(Equal(1.0))
			expectPhase(ns, "a2", locksv1.PhasePending)

			By("bob#2 holds k2 and queues for k1, behind carol and dave: checked, and the cycle is broken")
			create(on("b2", "k1").Owner("bob", 2).Obj())
			v := expectVictim("b2", twoCycle)
			expectDetectedWithin(v, detectionBound)
			Expect(checks("checked")()).To(BeNumerically(">=", 2.0))
			Expect(checks("skipped")()).To(Equal(2.0))
			Expect(metric(reg, "turnstile_deadlocks_total")()).To(Equal(1.0))
		})
	})
})

package fleet

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

// wait is how long a spec waits for what a loaded machine may take long to do; no spec asserts
// a speed: the numbers are measured and reported (AddReportEntry).
const wait = 180 * time.Second

// Gated Jobs in two spokes of one hub, each spoke running them with the real Job controller and
// scheduler (kubelet_test.go), judged from the Jobs' own records of their runs.
var _ = Describe("Gated Jobs in a fleet", Ordered, func() {
	AfterEach(expectKubeletsFine)

	It("serializes gated Jobs on one key in two spokes: tokens rise across clusters, runs never overlap", func() {
		const lock, perSpoke = "acme/infra:jobs", 3
		var jobs []string
		for i := range perSpoke {
			for _, s := range []*member{spokeA, spokeB} {
				name := fmt.Sprintf("serial-%d", i)
				_, err := s.kubectl.Run(jobManifest(name, lock, "2s", ""), "apply", "-f", "-")
				Expect(err).NotTo(HaveOccurred())
				jobs = append(jobs, s.name+"/"+name)
			}
		}
		for _, s := range []*member{spokeA, spokeB} {
			for i := range perSpoke {
				waitComplete(s, fmt.Sprintf("serial-%d", i))
			}
		}
		runs := runsOn(lock)
		AddReportEntry("gated Jobs on one key in two spokes, as they ran", describeRuns(runs))
		Expect(runs).To(HaveLen(len(jobs)), "each Job ran once: %v", jobs)
		for _, r := range runs {
			Expect(r.stopped).To(BeFalse(), "%s was stopped", r.String())
		}
		expectSerialized(runs)
		reportHandOffs(runs)
	})

	It("holds a spoke's gated Job and LockRequest for command apply while the hub freezes apply, and lets them go when it thaws", func() {
		By("freezing apply on the hub: kubectl patch commandlock apply")
		_, err := hub.kubectl.Run(`apiVersion: locks.turnstile.dev/v1alpha1
kind: CommandLock
metadata: {name: apply}
spec: {locked: false}
`, "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		_, err = hub.kubectl.Run("", "patch", "commandlock", "apply", "--type=merge", "-p", `{"spec":{"locked":true,"reason":"fleet-wide change freeze"}}`)
		Expect(err).NotTo(HaveOccurred())
		thawed := false
		DeferCleanup(func() {
			if !thawed {
				_, _ = hub.kubectl.Run("", "patch", "commandlock", "apply", "--type=merge", "-p", `{"spec":{"locked":false}}`)
			}
		})

		_, err = spokeB.kubectl.Run(jobManifest("frozen-apply", "acme/infra:frozen-job", "1s", "apply"), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		_, err = spokeA.kubectl.Run(lockRequest("frozen-apply", "erin", "frozen-request")+"  command: apply\n", "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		jobRequest := workload.RequestName("job", "frozen-apply")
		for _, c := range []struct {
			m    *member
			name string
		}{{spokeB, jobRequest}, {spokeA, "frozen-apply"}} {
			Eventually(func(g Gomega) {
				out, err := c.m.kubectl.Run("", "-n", ns, "get", "lockrequest", c.name, "-o", "jsonpath={.status.phase}|{.status.blockedBy}")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(out).To(Equal("Pending|commandlock/apply"))
			}).WithTimeout(wait).Should(Succeed(), "%s's request %s shows the hub's freeze", c.m.name, c.name)
		}
		frozenAt := time.Now()
		Consistently(func(g Gomega) {
			out, err := spokeB.kubectl.Run("", "-n", ns, "get", "job", "frozen-apply", "-o", "jsonpath={.spec.suspend}")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).To(Equal("true"), "the frozen Job stays suspended")
			g.Expect(spokeB.kubelet.runsOf("frozen-apply")).To(BeEmpty())
			out, err = spokeA.kubectl.Run("", "-n", ns, "get", "lockrequest", "frozen-apply", "-o", "jsonpath={.status.phase}")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).To(Equal("Pending"))
		}).WithTimeout(5 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())

		By("thawing apply on the hub")
		thawAt := time.Now() // before the patch: the hub may thaw, and the Job run, before kubectl returns
		_, err = hub.kubectl.Run("", "patch", "commandlock", "apply", "--type=merge", "-p", `{"spec":{"locked":false}}`)
		Expect(err).NotTo(HaveOccurred())
		thawed = true
		_, err = spokeA.waiter().Run("", "-n", ns, "wait", "--for=condition=Granted", "lockrequest/frozen-apply", fmt.Sprintf("--timeout=%s", wait))
		Expect(err).NotTo(HaveOccurred())
		grantedA := time.Since(thawAt)
		waitComplete(spokeB, "frozen-apply")
		runs := spokeB.kubelet.runsOf("frozen-apply")
		Expect(runs).To(HaveLen(1))
		Expect(runs[0].start.After(thawAt)).To(BeTrue(), "the Job ran at %s, before the thaw at %s", runs[0].start, thawAt)
		Expect(runs[0].token).To(BeNumerically(">", 0))
		AddReportEntry("hub freeze", fmt.Sprintf("held %s after both spokes showed the freeze; after the thaw: spoke-a's LockRequest Granted in %s (as kubectl wait saw it), spoke-b's Job started in %s",
			thawAt.Sub(frozenAt).Round(time.Millisecond), grantedA.Round(time.Millisecond), runs[0].start.Sub(thawAt).Round(time.Millisecond)))
		_, err = spokeA.kubectl.Run("", "-n", ns, "patch", "lockrequest", "frozen-apply", "--type=merge", "-p", `{"spec":{"release":true}}`)
		Expect(err).NotTo(HaveOccurred())
	})

	// netcut's Blackhole between spoke-a's agent and the hub: nothing answers, as when a
	// network drops packets. spoke-a's running Job must be stopped before spoke-a's hub Lease
	// lapses and the hub hands its key to spoke-b's waiting Job; spoke-a's waiting Job stays held.
	It("stops a cut-off spoke's running Job before the hub re-grants its key to the other spoke, keeps its waiting Job held, and doubles nothing once healed", func() {
		const lock, waitLock = "acme/infra:partition", "acme/infra:partition-wait"
		By("the hub's own holder keeps the key spoke-a's second Job will wait for")
		_, err := hub.kubectl.Run(lockRequest("hub-holds", "ops", "partition-wait"), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		_, err = hub.waiter().Run("", "-n", ns, "wait", "--for=condition=Granted", "lockrequest/hub-holds", fmt.Sprintf("--timeout=%s", wait))
		Expect(err).NotTo(HaveOccurred())

		_, err = spokeA.kubectl.Run(jobManifest("cut-holder", lock, untilStopped, ""), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		holder := waitRun(spokeA, "cut-holder")
		Expect(holder.token).To(BeNumerically(">", 0))
		_, err = spokeB.kubectl.Run(jobManifest("cut-next", lock, "2s", ""), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		_, err = spokeA.kubectl.Run(jobManifest("cut-waiter", waitLock, "2s", ""), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		waitPending(spokeB, workload.RequestName("job", "cut-next"))
		waitPending(spokeA, workload.RequestName("job", "cut-waiter"))

		By("cutting the network between spoke-a's agent and the hub (blackhole)")
		spokeA.hubProxy.Blackhole()
		cutAt := time.Now()
		healed := false
		DeferCleanup(func() {
			if !healed {
				spokeA.hubProxy.Pass()
			}
		})
		By("the hub hands the key spoke-a's waiting Job waits for to it, during the cut")
		_, err = hub.kubectl.Run("", "-n", ns, "patch", "lockrequest", "hub-holds", "--type=merge", "-p", `{"spec":{"release":true}}`)
		Expect(err).NotTo(HaveOccurred())

		By("spoke-a stops its running Job: HubUnreachable, through the lost-lock path")
		var stopped run
		Eventually(func(g Gomega) {
			runs := spokeA.kubelet.runsOf("cut-holder")
			g.Expect(runs).To(HaveLen(1))
			g.Expect(runs[0].end.IsZero()).To(BeFalse(), "still running")
			stopped = runs[0]
		}).WithTimeout(wait).Should(Succeed())
		Expect(stopped.stopped).To(BeTrue(), "the holder's Pod was deleted (its Job suspended again), not finished")
		holderRequest := workload.RequestName("job", "cut-holder")
		out, err := spokeA.kubectl.Run("", "-n", ns, "get", "lockrequest", holderRequest, "-o",
			`jsonpath={.status.phase}|{.status.conditions[?(@.type=="Granted")].reason}|{.status.conditions[?(@.type=="Granted")].message}`)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(HavePrefix("Released|" + spoke.ReasonHubUnreachable + "|"))
		Expect(out).To(ContainSubstring("before the hub can hand its locks on"))
		lapse := hubLeaseLapse(spokeA.name)
		Expect(stopped.end.Before(lapse)).To(BeTrue(), "the holder ran until %s, past the hub Lease's lapse at %s", stopped.end, lapse)
		for _, obj := range []string{holderRequest, "cut-holder"} {
			Eventually(func(g Gomega) {
				out, err := spokeA.kubectl.Run("", "-n", ns, "get", "events", "--field-selector", "reason="+spoke.ReasonStoppedOnPartition+",involvedObject.name="+obj,
					"-o", "jsonpath={.items[*].message}")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(out).To(ContainSubstring("stopped: the hub has not answered"))
			}).WithTimeout(wait).Should(Succeed(), "a %s event on %s", spoke.ReasonStoppedOnPartition, obj)
		}
		By("spoke-a's agent says its stopped Job was gone before the hub could hand its key on")
		for _, obj := range []string{holderRequest, "cut-holder"} {
			Eventually(func(g Gomega) {
				out, err := spokeA.kubectl.Run("", "-n", ns, "get", "events", "--field-selector", "reason="+spoke.ReasonHolderGone+",involvedObject.name="+obj,
					"-o", "jsonpath={.items[*].message}")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(out).To(MatchRegexp(`the stopped holder was gone at \S+Z, [0-9]+\.[0-9]s before the hub can hand its locks on \(renewTime\+L at \S+Z, by the hub's clock\)`))
			}).WithTimeout(wait).Should(Succeed(), "a %s event on %s", spoke.ReasonHolderGone, obj)
		}
		out, err = spokeA.kubectl.Run("", "-n", ns, "get", "lockrequest", holderRequest, "-o", `jsonpath={.metadata.annotations.locks\.turnstile\.dev/fleet-holder-gone}`)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(HavePrefix("gone at "), "the wait's end, recorded on the request by the manager under the admission policies")

		By("the hub hands the key to spoke-b's Job once spoke-a's Lease lapsed")
		var next run
		Eventually(func(g Gomega) {
			runs := spokeB.kubelet.runsOf("cut-next")
			g.Expect(runs).NotTo(BeEmpty())
			next = runs[0]
		}).WithTimeout(wait).Should(Succeed())
		Expect(next.start.After(stopped.end)).To(BeTrue(), "overlap: %s started before %s ended", next.String(), stopped.String())
		Expect(next.token).To(BeNumerically(">", stopped.token))
		Expect(spokeA.kubelet.runsOf("cut-waiter")).To(BeEmpty(), "spoke-a let its waiting Job go while cut off from the hub")
		AddReportEntry("partition (blackhole) between spoke-a's agent and the hub", fmt.Sprintf(
			"L = %s; cut at %s; spoke-a's holder stopped %s after the cut, %s before its hub Lease lapsed (renewTime + L = %s); spoke-b's Job started %s after the lapse, %s after spoke-a's stopped",
			leaseDuration, cutAt.Format("15:04:05.000"), stopped.end.Sub(cutAt).Round(time.Millisecond), lapse.Sub(stopped.end).Round(time.Millisecond),
			lapse.Format("15:04:05.000"), next.start.Sub(lapse).Round(time.Millisecond), next.start.Sub(stopped.end).Round(time.Millisecond)))

		By("healing the network: nothing runs again on the old grant, nothing is doubled")
		spokeA.hubProxy.Pass()
		healed = true
		waitComplete(spokeB, "cut-next")
		Eventually(func(g Gomega) {
			out, err := hub.kubectl.Run("", "-n", ns, "get", "lockrequest", spokeA.name+"."+holderRequest, "-o", "jsonpath={.status.phase}")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).To(BeElementOf("Released", "Expired", "Failed"))
			// The agent hears the hub again: the hub's verdict on the waiter (lost with the
			// Lease) reaches the spoke.
			out, err = spokeA.kubectl.Run("", "-n", ns, "get", "lockrequest", workload.RequestName("job", "cut-waiter"), "-o", "jsonpath={.status.phase}")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).To(BeElementOf("Released", "Expired", "Failed"))
		}).WithTimeout(wait).Should(Succeed())
		Consistently(func(g Gomega) {
			out, err := spokeA.kubectl.Run("", "-n", ns, "get", "job", "cut-holder", "-o",
				fmt.Sprintf(`jsonpath={.spec.suspend}|{.metadata.annotations.%s}`, strings.ReplaceAll(workload.AnnotationFencingToken, ".", `\.`)))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).To(Equal("true|"), "the stopped Job stays stopped, without a token")
			out, err = spokeA.kubectl.Run("", "-n", ns, "get", "lockrequest", holderRequest, "-o", `jsonpath={.status.phase}|{.status.conditions[?(@.type=="Granted")].reason}`)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).To(Equal("Released|" + spoke.ReasonHubUnreachable))
		}).WithTimeout(5 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
		runs := runsOn(lock)
		AddReportEntry("runs on "+lock, describeRuns(runs))
		Expect(runs).To(HaveLen(2), "the stopped Job and spoke-b's, once each")
		expectSerialized(runs)
		waiterRuns := spokeA.kubelet.runsOf("cut-waiter")
		Expect(len(waiterRuns)).To(BeNumerically("<=", 1), "spoke-a's waiting Job ran twice: %v", waiterRuns)
		for _, r := range waiterRuns {
			Expect(r.start.After(cutAt)).To(BeTrue())
		}
	})

	It("passes a killed spoke's locks on to the other spoke within the hub lease", func() {
		const lock = "acme/infra:killed"
		_, err := spokeA.kubectl.Run(lockRequest("kill-holder", "frank", "killed"), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		_, err = spokeA.waiter().Run("", "-n", ns, "wait", "--for=condition=Granted", "lockrequest/kill-holder", fmt.Sprintf("--timeout=%s", wait))
		Expect(err).NotTo(HaveOccurred())
		_, err = spokeB.kubectl.Run(jobManifest("kill-next", lock, "1s", ""), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		waitPending(spokeB, workload.RequestName("job", "kill-next"))

		By("killing spoke-a's manager (SIGKILL)")
		killedAt := time.Now()
		Expect(spokeA.manager.Kill()).To(MatchError(ContainSubstring("killed")))
		var next run
		Eventually(func(g Gomega) {
			runs := spokeB.kubelet.runsOf("kill-next")
			g.Expect(runs).NotTo(BeEmpty())
			next = runs[0]
		}).WithTimeout(leaseDuration + wait).Should(Succeed())
		lapse := hubLeaseLapse(spokeA.name)
		Expect(next.start.After(lapse)).To(BeTrue(), "the hub handed the killed spoke's lock on at %s, before its Lease lapsed at %s", next.start, lapse)
		released, err := hub.kubectl.Run("", "-n", ns, "get", "lockrequest", spokeA.name+".kill-holder", "-o",
			`jsonpath={.status.phase}|{.status.conditions[?(@.type=="Granted")].reason}|{.status.finishedAt}`)
		Expect(err).NotTo(HaveOccurred())
		parts := strings.SplitN(released, "|", 3)
		Expect(parts[:2]).To(Equal([]string{"Released", "HolderLost"}), "the hub released the killed spoke's request: %s", released)
		AddReportEntry("spoke killed (SIGKILL)", fmt.Sprintf(
			"L = %s; spoke-b's Job started %s after the kill (the hub Lease's last renewal was %s before the kill, its lapse %s before spoke-b's Job started; the hub's release at %s)",
			leaseDuration, next.start.Sub(killedAt).Round(time.Millisecond), killedAt.Sub(lapse.Add(-leaseDuration)).Round(time.Millisecond),
			next.start.Sub(lapse).Round(time.Millisecond), parts[2]))

		By("restarting spoke-a's manager: its request shows what the hub did")
		spokeA.start()
		Eventually(func(g Gomega) {
			out, err := spokeA.kubectl.Run("", "-n", ns, "get", "lockrequest", "kill-holder", "-o", `jsonpath={.status.phase}|{.status.conditions[?(@.type=="Granted")].reason}`)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).To(Equal("Released|HolderLost"))
		}).WithTimeout(wait).Should(Succeed())
		waitComplete(spokeB, "kill-next")
	})
})

// waitComplete waits until m's Job name is Complete, as its Job controller says.
func waitComplete(m *member, name string) {
	GinkgoHelper()
	_, err := m.waiter().Run("", "-n", ns, "wait", "--for=condition=Complete", "job/"+name, fmt.Sprintf("--timeout=%s", wait))
	Expect(err).NotTo(HaveOccurred(), "job %s in %s did not complete", name, m.name)
}

// waitPending waits until m's LockRequest name waits (Pending, as the hub decided it).
func waitPending(m *member, name string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		out, err := m.kubectl.Run("", "-n", ns, "get", "lockrequest", name, "-o", "jsonpath={.status.phase}|{.status.blockedBy}")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(MatchRegexp(`^Pending\|.+`))
	}).WithTimeout(wait).Should(Succeed(), "lockrequest %s in %s waits", name, m.name)
}

// waitRun waits until m's Job name runs, and returns its run.
func waitRun(m *member, name string) run {
	GinkgoHelper()
	var r run
	Eventually(func(g Gomega) {
		runs := m.kubelet.runsOf(name)
		g.Expect(runs).NotTo(BeEmpty())
		r = runs[0]
	}).WithTimeout(wait).Should(Succeed(), "job %s in %s runs", name, m.name)
	return r
}

// hubLeaseLapse is when the hub may hand cluster's locks in ns on: its hub Lease's renewTime +
// leaseDurationSeconds, read from the hub.
func hubLeaseLapse(cluster string) time.Time {
	GinkgoHelper()
	out, err := hub.kubectl.Run("", "-n", ns, "get", "lease", spoke.LeaseName(cluster), "-o", "jsonpath={.spec.renewTime}|{.spec.leaseDurationSeconds}")
	Expect(err).NotTo(HaveOccurred())
	renew, secs, ok := strings.Cut(out, "|")
	Expect(ok).To(BeTrue(), out)
	at, err := time.Parse(time.RFC3339Nano, renew)
	Expect(err).NotTo(HaveOccurred())
	return at.Add(time.Duration(mustInt(secs)) * time.Second)
}

// reportHandOffs reports the gaps between one run's end and the next one's start: a hand-off
// inside a spoke and across spokes.
func reportHandOffs(runs []run) {
	var within, across []time.Duration
	for i := 1; i < len(runs); i++ {
		d := runs[i].start.Sub(runs[i-1].end)
		if runs[i].cluster == runs[i-1].cluster {
			within = append(within, d)
		} else {
			across = append(across, d)
		}
	}
	AddReportEntry("hand-offs between gated Jobs (one run's end to the next one's start, through the hub, the Job controller and the scheduler)",
		fmt.Sprintf("across spokes: %v; within a spoke: %v", roundAll(across), roundAll(within)))
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

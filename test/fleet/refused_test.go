package fleet

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// A spoke's agent started with a cluster name the hub does not allow: the hub's admission
// policies (config/fleet) refuse its writes, and the agent says so on the spoke's requests
// (Stalled, reason FleetRefused, with the hub's words), in an event and in its log, and goes on
// running; started again with its own name, it mirrors those requests as if nothing happened.
var _ = Describe("A cluster name the hub does not allow", Ordered, func() {
	It("is refused by the hub, and the spoke's agent says so on its requests rather than retry silently or crash", func() {
		By("stopping spoke-b's manager, once it runs (a manager stopped while it starts has no clean exit to give)")
		Eventually(spokeB.manager.Log).WithTimeout(wait).Should(ContainSubstring(`"msg":"Starting workers","controller":"fleet-spoke"`))
		Expect(spokeB.manager.Stop(15 * time.Second)).To(Succeed())
		restarted := false
		DeferCleanup(func() {
			if !restarted {
				spokeB.launch()
			}
		})
		cases := []struct {
			what, cluster, hubConfig, want string
		}{
			{"a cluster that is not a member", "spoke-c", serviceAccountKubeconfig("spoke-spoke-c", ""),
				"cluster spoke-c is not a member of this fleet: ask the hub's admin to run `kubectl turnstile fleet join spoke-c`"},
			// Two policies refuse spoke-b's write of spoke-a's hub Lease, turnstile-fleet-spoke
			// ("spoke spoke-b writes only its own hub Lease") and turnstile-holder-lease ("you
			// are ...spoke-spoke-b"), and the API server says the first it evaluates, in no
			// fixed order (it ranges over a map of its policies). Either names spoke-b.
			{"another spoke's name with spoke-b's ServiceAccount", "spoke-a", spokeB.hubConfig,
				`spoke spoke-b |you are system:serviceaccount:turnstile-fleet:spoke-spoke-b[;,]`},
		}
		for i, c := range cases {
			By(c.what + ": --cluster-name=" + c.cluster)
			logPath := filepath.Join(suiteDir, fmt.Sprintf("refused-%d.log", i))
			p, err := framework.StartProcessLogFile(managerBin, spokeB.kubeconfig(), logPath,
				"--metrics-bind-address=0", "--health-probe-bind-address=0", "--hub-kubeconfig="+c.hubConfig, "--cluster-name="+c.cluster)
			Expect(err).NotTo(HaveOccurred())
			name := fmt.Sprintf("refused-%d", i)
			_, err = spokeB.kubectl.Run(lockRequest(name, "gina", name), "apply", "-f", "-")
			Expect(err).NotTo(HaveOccurred())
			_, err = spokeB.waiter().Run("", "-n", ns, "wait", "--for=condition=Stalled", "lockrequest/"+name, fmt.Sprintf("--timeout=%s", wait))
			Expect(err).NotTo(HaveOccurred(), "the spoke request says it is stalled, so kubectl wait and health checks end")
			out, err := spokeB.kubectl.Run("", "-n", ns, "get", "lockrequest", name, "-o",
				`jsonpath={.status.phase}|{.status.conditions[?(@.type=="Stalled")].reason}|{.status.conditions[?(@.type=="Stalled")].message}`)
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(HavePrefix("Pending|" + spoke.ReasonFleetRefused + "|the hub refused this spoke (--cluster-name=" + c.cluster + "): "))
			Expect(out).To(MatchRegexp(c.want))
			AddReportEntry("refused: "+c.what, out)
			Eventually(func(g Gomega) {
				out, err := spokeB.kubectl.Run("", "-n", ns, "get", "events", "--field-selector", "reason="+spoke.ReasonFleetRefused+",involvedObject.name="+name,
					"-o", "jsonpath={.items[*].message}")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(out).To(MatchRegexp(c.want))
			}).WithTimeout(wait).Should(Succeed(), "a %s event on the request", spoke.ReasonFleetRefused)
			Expect(p.Log()).To(ContainSubstring("the hub refused this spoke"), "a log line says so")
			Expect(p.Running()).To(Succeed(), "the agent runs on")
			out, err = hub.kubectl.Run("", "-n", ns, "get", "lockrequests", "-l", "fleet.turnstile.dev/cluster="+c.cluster, "-o", "name")
			Expect(err).NotTo(HaveOccurred())
			Expect(out).NotTo(ContainSubstring(name), "the hub made no request of the refused spoke's")
			Expect(p.Stop(15 * time.Second)).To(Succeed())
		}

		By("starting spoke-b's manager again with its own name: the refused requests are mirrored and decided")
		spokeB.start()
		restarted = true
		for i := range cases {
			name := fmt.Sprintf("refused-%d", i)
			_, err := spokeB.waiter().Run("", "-n", ns, "wait", "--for=condition=Granted", "lockrequest/"+name, fmt.Sprintf("--timeout=%s", wait))
			Expect(err).NotTo(HaveOccurred())
			out, err := spokeB.kubectl.Run("", "-n", ns, "get", "lockrequest", name, "-o", `jsonpath={.status.conditions[?(@.type=="Stalled")].status}`)
			Expect(err).NotTo(HaveOccurred())
			Expect(strings.TrimSpace(out)).NotTo(Equal("True"))
			_, err = spokeB.kubectl.Run("", "-n", ns, "delete", "lockrequest", name)
			Expect(err).NotTo(HaveOccurred())
		}
	})
})

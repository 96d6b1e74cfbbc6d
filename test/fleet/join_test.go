package fleet

import (
	"fmt"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// A cluster admitted with kubectl turnstile fleet join and removed with fleet leave, on the
// hub, with the built plugin through the real kubectl: the cluster's manager (the built binary)
// runs as its agent with the kubeconfig join wrote, its requests are granted, and after leave the
// hub refuses it and the spoke says so on its next request. The cluster is a control plane of its
// own (a third spoke, for this spec): an agent of another name in spoke-a or spoke-b would mirror
// what the other specs left there anew.
var _ = Describe("A cluster that joins and leaves", Ordered, func() {
	It("runs with the kubeconfig fleet join writes, and is refused once fleet leave removed it", func() {
		const cluster = "spoke-d"
		By("starting the control plane of " + cluster)
		env := framework.StartEnv()
		k := framework.AdminKubectl(env, framework.KubectlBinary())
		k.Log = GinkgoWriter
		_, err := k.Run("", "create", "namespace", ns)
		Expect(err).NotTo(HaveOccurred())
		waiter := k
		waiter.Timeout = wait + time.Minute

		By("kubectl turnstile fleet join " + cluster + " on the hub, and its manager started with the kubeconfig join wrote")
		hubConfig := filepath.Join(suiteDir, "hub-"+cluster+".kubeconfig")
		_, err = hub.kubectl.Run("", "turnstile", "fleet", "join", cluster, "--label", "tier=test", "--output", hubConfig)
		Expect(err).NotTo(HaveOccurred())
		p, err := framework.StartProcessLogFile(managerBin, k.Kubeconfig, filepath.Join(suiteDir, cluster+".log"),
			"--metrics-bind-address=0", "--health-probe-bind-address=0", "--hub-kubeconfig="+hubConfig, "--cluster-name="+cluster)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = p.Stop(15 * time.Second) })

		_, err = k.Run(lockRequest("joined", "hana", "joined"), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		_, err = waiter.Run("", "-n", ns, "wait", "--for=condition=Granted", "lockrequest/joined", fmt.Sprintf("--timeout=%s", wait))
		Expect(err).NotTo(HaveOccurred(), "granted by the hub, through the agent that runs with join's kubeconfig")
		Eventually(func(g Gomega) {
			out, err := hub.kubectl.Run("", "get", "spoke", cluster, "-o", "jsonpath={.spec.labels.tier}|{.status.connection}")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).To(Equal("test|Connected"), "the hub's Spoke has the labels join gave, and the agent is connected")
		}).WithTimeout(wait).Should(Succeed())
		Eventually(func(g Gomega) {
			out, err := hub.kubectl.Run("", "get", "spoke", cluster, "-o", "wide")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).To(MatchRegexp(`(?m)^NAME\s.*\sAGENT\s`), "kubectl get spokes -o wide shows each agent's version")
			version, err := hub.kubectl.Run("", "get", "spoke", cluster, "-o", "jsonpath={.status.agentVersion}")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(spoke.IsVersion(version) && version != "").To(BeTrue(), "the built manager's version, as its agent publishes it: %q", version)
			g.Expect(out).To(ContainSubstring(" " + version + " "))
			AddReportEntry("kubectl get spoke -o wide", out)
		}).WithTimeout(wait).Should(Succeed())

		By("kubectl turnstile fleet leave " + cluster + " on the hub")
		_, err = hub.kubectl.Run("", "turnstile", "fleet", "leave", cluster)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			out, err := hub.kubectl.Run("", "get", "spokes", "-o", "name")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).NotTo(ContainSubstring("spoke/" + cluster))
		}).WithTimeout(wait).Should(Succeed(), "the hub's manager deletes the Spoke of a cluster that left")

		_, err = k.Run(lockRequest("left", "hana", "left"), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		_, err = waiter.Run("", "-n", ns, "wait", "--for=condition=Stalled", "lockrequest/left", fmt.Sprintf("--timeout=%s", wait))
		Expect(err).NotTo(HaveOccurred(), "the hub refuses the cluster that left, and the spoke says so")
		out, err := k.Run("", "-n", ns, "get", "lockrequest", "left", "-o",
			`jsonpath={.status.phase}|{.status.conditions[?(@.type=="Stalled")].reason}|{.status.conditions[?(@.type=="Stalled")].message}`)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(HavePrefix("Pending|" + spoke.ReasonFleetRefused + "|the hub refused this spoke (--cluster-name=" + cluster + "): "))
		AddReportEntry("after fleet leave", out)
		out, err = hub.kubectl.Run("", "-n", ns, "get", "lockrequests", "-o", "name")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).NotTo(ContainSubstring(cluster+".left"), "the hub made no request of the cluster that left")
	})
})

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// A cluster without Turnstile's CRDs (not installed yet, or the wrong context): the plugin and
// the manager say so and what to do, never client-go's "no matches for kind" (issue #46).
var _ = Describe("On a cluster without Turnstile", func() {
	It("the plugin and the manager say that its CRDs are not installed, and how to install them", func() {
		bare := framework.StartBareEnv()
		kc := framework.AdminKubeconfig(bare)
		const notInstalled = "turnstile's CRDs are not installed: the API server (Kubernetes v"

		By("the plugin")
		ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectlBin, "turnstile", "-n", "default", "acquire", "-l", "acme/infra:vpc", "--no-wait")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kc, "KUBECACHEDIR="+filepath.Join(GinkgoT().TempDir(), "cache"))
		out, err := cmd.CombinedOutput()
		Expect(err).To(HaveOccurred(), string(out))
		Expect(string(out)).To(ContainSubstring(notInstalled))
		Expect(string(out)).To(ContainSubstring("install Turnstile's CRDs first (helm install, or kubectl apply -k config/default; docs/install.md)"))
		Expect(string(out)).NotTo(ContainSubstring("no matches for kind"))
		Expect(string(out)).NotTo(ContainSubstring("warning:"), "the default control plane is in the support range")

		By("the manager binary: one line with the version, then an error that says what to do")
		p, err := framework.StartProcessLogFile(framework.ManagerBinary(), kc, filepath.Join(GinkgoT().TempDir(), "manager.log"), "--metrics-bind-address=0", "--health-probe-bind-address=0")
		Expect(err).NotTo(HaveOccurred())
		Eventually(p.Running).WithTimeout(30 * time.Second).Should(HaveOccurred())
		Expect(p.Log()).To(MatchRegexp(`"kubernetes".*"version":"v1\.\d+.*"supported":true.*"range":"1\.33 to 1\.37"`))
		Expect(p.Log()).To(ContainSubstring(notInstalled))
		Expect(p.Log()).NotTo(ContainSubstring("no matches for kind"))
	})
})

package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"
	"github.com/onsi/gomega/gexec"
)

// turnstile starts `kubectl turnstile ARGS` (the plugin found on PATH) in the background, in its
// own process group so the test can kill it and what it runs, as a crash would.
func turnstile(args ...string) *gexec.Session {
	GinkgoHelper()
	cmd := exec.Command(kubectlBin, append([]string{"turnstile"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "KUBECACHEDIR="+cacheDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s, err := gexec.Start(cmd, GinkgoWriter, GinkgoWriter)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); s.Wait(5 * time.Second) })
	return s
}

func exitCode(err error) int {
	var ke *KubectlError
	var ee *exec.ExitError
	if errors.As(err, &ke) && errors.As(ke.Err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

var _ = Describe("The kubectl turnstile plugin", func() {
	var ns string
	BeforeEach(func() { ns = createNamespace() })

	It("runs a command while holding the lock, passes its exit status, and releases", func() {
		out, err := kubectl("turnstile", "-n", ns, "run", "-l", "acme/infra:modules/vpc", "--owner", "alice", "--pull", "7",
			"--name", "run-1", "--", "sh", "-c", `echo "token=$TURNSTILE_FENCING_TOKEN request=$TURNSTILE_LOCKREQUEST"; exit 3`)
		Expect(exitCode(err)).To(Equal(3), "run must exit with the command's status (err: %v)", err)
		Expect(out).To(MatchRegexp(`token=[1-9][0-9]* request=` + ns + `/run-1`))
		Eventually(field(ns, "lr/run-1", "{.status.phase}/"+conditionField("Granted", "reason"))).
			WithTimeout(settle).WithPolling(poll).Should(Equal("Released/Released"))
		Expect(jsonpath(ns, "leases", "{.items[*].metadata.name}")).To(BeEmpty(), "the holder Lease is deleted on exit")
	})

	It("waits its turn, explains why, and fails at once with --wait-timeout 0s", func() {
		first := turnstile("-n", ns, "run", "-l", "acme/infra:net", "--owner", "alice", "--pull", "1", "--name", "first", "--", "sleep", "600")
		Eventually(first.Err, settle).Should(gbytes.Say("granted"))

		_, err := kubectl("turnstile", "-n", ns, "acquire", "-l", "acme/infra:net", "--owner", "bob", "--pull", "2", "--wait-timeout", "0s")
		Expect(err).To(HaveOccurred())
		Expect(stderrOf(err)).To(ContainSubstring("Busy"))
		Expect(stderrOf(err)).To(ContainSubstring("pull #1 (alice)"))

		second := turnstile("-n", ns, "acquire", "-l", "acme/infra:net", "--owner", "carol", "--pull", "3", "--name", "second")
		Eventually(second.Err, settle).Should(gbytes.Say(`lockrequest/second waiting: locked by pull #1 \(alice\); position 1 of 1`))
		why := mustKubectl("turnstile", "-n", ns, "why", "second")
		Expect(why).To(ContainSubstring("lockrequest/second for pull #3 (carol): Pending"))
		Expect(why).To(ContainSubstring("held by pull #1 (alice) via first"))
		Expect(why).To(MatchRegexp(`1\. second pull #3 \(carol\) \(Normal\)\s+<- this request`))
		locks := mustKubectl("turnstile", "-n", ns, "locks")
		Expect(locks).To(MatchRegexp(`acme/infra/net/default\s+pull #1 \(alice\)\s+[1-9][0-9]*\s+1\s`))

		By("the first run is interrupted: it stops its command and releases; the second is granted")
		Expect(first.Command.Process.Signal(syscall.SIGTERM)).To(Succeed())
		Eventually(first, settle).Should(gexec.Exit())
		Eventually(second, settle).Should(gexec.Exit(0))
		Expect(string(second.Out.Contents())).To(MatchRegexp(`lockrequest/second granted: fencing token [1-9][0-9]*`))
	})

	It("frees the lock of a killed run within its lease duration, not its ttl", SpecPriority(3), func() {
		victim := turnstile("-n", ns, "run", "-l", "acme/infra:dns", "--owner", "alice", "--name", "victim",
			"--lease-duration", "8s", "--grace", "1s", "--ttl", "1h", "--", "sleep", "600")
		Eventually(victim.Err, settle).Should(gbytes.Say("granted"))

		By("SIGKILL of run: no release, no Lease deletion (its keeper stops the command)")
		Expect(victim.Command.Process.Signal(syscall.SIGKILL)).To(Succeed())
		Eventually(victim, settle).Should(gexec.Exit())
		start := time.Now()
		out, err := kubectl("turnstile", "-n", ns, "acquire", "-l", "acme/infra:dns", "--owner", "bob", "--wait-timeout", "30s")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("granted"))
		GinkgoWriter.Printf("the next holder was granted %s after the runner was killed (lease 8s, ttl 1h)\n", time.Since(start).Round(time.Millisecond))
		Expect(jsonpath(ns, "lr/victim", "{.status.phase}/"+conditionField("Granted", "reason"))).To(Equal("Released/HolderLost"))
	})

	It("freezes a command, says so in why, and thaws", func() {
		command := "deploy-" + randSuffix()
		DeferCleanup(func() { _, _ = kubectl("delete", "commandlock", command, "--ignore-not-found") })
		out := mustKubectl("turnstile", "freeze", command, "--new-command", "--reason", "change freeze", "--wait-drained", "--timeout", "20s")
		Expect(out).To(ContainSubstring("commandlock/" + command + " frozen"))
		Expect(out).To(ContainSubstring("drained"))

		mustKubectl("turnstile", "-n", ns, "acquire", "-l", "acme/infra:app", "--command", command, "--name", "frozen", "--no-wait")
		Eventually(field(ns, "lr/frozen", conditionField("Granted", "reason"))).WithTimeout(settle).WithPolling(poll).Should(Equal("CommandLocked"))
		why := mustKubectl("turnstile", "-n", ns, "why", "frozen")
		Expect(why).To(ContainSubstring("commandlock/" + command + " freezes it: change freeze"))

		Expect(mustKubectl("turnstile", "thaw", command)).To(ContainSubstring("thawed"))
		waitGranted(ns, "frozen", 10*time.Second)
		Expect(strings.TrimSpace(mustKubectl("turnstile", "-n", ns, "release", "frozen"))).To(Equal("lockrequest/frozen released"))
		Eventually(field(ns, "lr/frozen", "{.status.phase}")).WithTimeout(settle).WithPolling(poll).Should(Equal("Released"))
	})

	It("rejects a malformed --lock with what to write", func() {
		_, err := kubectl("turnstile", "-n", ns, "acquire", "-l", "acme-infra")
		Expect(err).To(HaveOccurred())
		Expect(stderrOf(err)).To(MatchRegexp(regexp.QuoteMeta(`--lock "acme-infra": want REPO:PATH[:WORKSPACE[:PROJECT]]`)))
	})
})

var _ = Describe("The fleet view on a hub", func() {
	It("lists a member as a Spoke: kubectl get spokes and kubectl turnstile fleet say it never connected, and why", func() {
		const cluster = "e2e-fleet-view"
		mustKubectl("apply", "--server-side", "-f", filepath.Join(repoRoot, "config", "fleet", "namespace.yaml"),
			"-f", filepath.Join(repoRoot, "config", "fleet", "members.yaml"))
		mustKubectl("-n", "turnstile-fleet", "patch", "configmap", "turnstile-fleet-members", "--type=merge",
			"-p", `{"data":{"`+cluster+`":"{\"labels\":{\"region\":\"eu\"}}"}}`)
		DeferCleanup(func() {
			mustKubectl("-n", "turnstile-fleet", "patch", "configmap", "turnstile-fleet-members", "--type=merge", "-p", `{"data":{"`+cluster+`":null}}`)
			Eventually(func() (string, error) { return kubectl("get", "spokes", "-o", "name") }).WithTimeout(settle).WithPolling(poll).
				ShouldNot(ContainSubstring(cluster), "a cluster removed from the members loses its Spoke")
		})
		Eventually(func() (string, error) { return kubectl("get", "spokes") }).WithTimeout(settle).WithPolling(poll).
			Should(MatchRegexp(`(?m)^NAME\s+CONNECTION\s+SINCE\s+HEARTBEAT\s+SKEW-MS\s+HOLDERS\s+WAITERS\s+KEEP-RUNNING\s+AGE\n(.*\n)*`+cluster+`\s+Never\s+\S+$`), "a Spoke that never connected: no holders, waiters or keep-running grants (0, not printed: omitempty), its age")
		Expect(mustKubectl("get", "spoke", cluster, "-o", "jsonpath={.spec.labels.region}")).To(Equal("eu"))
		out := mustKubectl("turnstile", "fleet")
		Expect(out).To(MatchRegexp(`(?m)^` + cluster + `\s+Never\s+-\s+-\s+-\s+0\s+0\s+0\s+-\s+False$`))
		Expect(out).To(ContainSubstring(cluster + ": NeverConnected: the agent of cluster " + cluster + " has not renewed a hub Lease yet"))
	})
})

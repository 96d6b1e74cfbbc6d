package install

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/turnstile-dev/turnstile/internal/compat"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// emulated is the Kubernetes version before the support range that the API server is made to
// emulate: a real server serving that version's APIs (kube-apiserver --emulated-version, as a
// control plane upgraded in steps runs), built from binaries of the range.
const emulated = "1.32"

// A kube-apiserver emulates versions down to three minors before its own (k8s.io/apiserver,
// pkg/util/compatibility: kubeEffectiveVersionFloors), so the binaries of 1.33 to 1.35 can
// emulate 1.32; make test-versions runs this on them (the oldest of the range is in CI's
// pair), and a later binary skips it.
var serverMinor = regexp.MustCompile(`Kubernetes v1\.(\d+)\.`)

// On an API server outside the support range the manager says so at start (a log line, an
// Event on its Pod, the turnstile_cluster_info metric) and the plugin prints one warning line
// (issue #46): installed as docs/install.md tells a user of that version, run as the Deployment
// runs it, under the installed ServiceAccount.
var _ = Describe("On an API server outside the support range", func() {
	It("the manager says so in its log, an Event on its Pod and its metric, and the plugin in one warning line", func() {
		out, err := exec.Command(filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-apiserver"), "--version").Output()
		Expect(err).NotTo(HaveOccurred())
		m := serverMinor.FindStringSubmatch(string(out))
		Expect(m).NotTo(BeNil(), "kube-apiserver --version: %s", out)
		if minor, _ := strconv.Atoi(m[1]); minor > 35 {
			Skip(fmt.Sprintf("kube-apiserver 1.%d cannot emulate %s (three minors back at most): make test-versions runs this on 1.33 to 1.35", minor, emulated))
		}
		// make test-versions' "+v1beta1" row turns on MutatingAdmissionPolicy's v1beta1, which
		// 1.32 does not have: kube-apiserver 1.34.4 emulating 1.32 with it did not become ready.
		// No 1.32 cluster has it; the row without the flags runs this spec.
		if flags := os.Getenv(framework.APIServerArgsEnv); flags != "" {
			Skip(fmt.Sprintf("%s=%q turns on what %s does not serve; the run without it covers this spec", framework.APIServerArgsEnv, flags, emulated))
		}

		By("starting kube-apiserver with --emulated-version=kube=" + emulated)
		c := startCluster("--emulated-version=kube=" + emulated)
		bundle, err := framework.BundleFor(c.env.Config)
		Expect(err).NotTo(HaveOccurred())
		Expect(bundle.Cluster.Version.Supported()).To(BeFalse(), "the server emulates %s: %+v", emulated, bundle.Cluster.Version)
		Expect(bundle.Mutating).To(BeEmpty(), emulated+" serves MutatingAdmissionPolicy only as an alpha API, off")

		By("installing the bundle for it (" + filepath.Base(bundle.Dir) + ") with kubectl apply --server-side")
		manifests := run(kubectlBin, "kustomize", bundle.Dir)
		objs := parseManifests(manifests)
		c.mustKubectl(manifests, "apply", "--server-side", "-f", "-")
		c.mustKubectl("", "wait", "--for=condition=Established", "--timeout=60s",
			"crd/lockrequests.locks.turnstile.dev", "crd/projectlocks.locks.turnstile.dev", "crd/commandlocks.locks.turnstile.dev")
		dep := findObject(objs, "Deployment", "-controller-manager")
		namespace := dep.Meta("namespace")
		podSpec := dep.Path("spec", "template", "spec").(map[string]any)
		sa := podSpec["serviceAccountName"].(string)

		By("running the manager as the Deployment runs it, as the installed ServiceAccount")
		const pod = "manager-a"
		mgr := c.startManager(managerBin, pod, c.serviceAccountKubeconfig(namespace, sa), namespace, podSpec["containers"].([]any)[0].(map[string]any))
		warning := fmt.Sprintf("Kubernetes %s (emulating %s) is older than the versions Turnstile supports (%s): it serves the APIs of %s",
			bundle.Cluster.Version.String(), emulated, compat.Range(), emulated)
		Eventually(mgr.log).WithTimeout(settle).WithPolling(100*time.Millisecond).Should(ContainSubstring("WARNING: "+warning),
			"the manager's log (%v)", mgr.running())
		Expect(mgr.log()).To(MatchRegexp(`"kubernetes".*"version":"v1\.3\d\.\d+ \(emulating ` + regexp.QuoteMeta(emulated) + `\)".*"supported":false`))

		By("an Event on its Pod, reason " + compat.ReasonUnsupported)
		Eventually(func() (string, error) {
			return c.kubectl("", "-n", namespace, "get", "events.events.k8s.io", "--field-selector", "regarding.name="+pod+",reason="+compat.ReasonUnsupported,
				"-o", "jsonpath={.items[*].type}: {.items[*].note}")
		}).WithTimeout(settle).WithPolling(200 * time.Millisecond).Should(HavePrefix("Warning: " + warning))

		By("the metric turnstile_cluster_info, scraped as a scraper bound to the installed metrics-reader role")
		reader := findObject(objs, "ClusterRole", "-metrics-reader").Meta("name")
		c.mustKubectl("", "create", "namespace", "monitoring")
		c.mustKubectl("", "-n", "monitoring", "create", "serviceaccount", "prometheus")
		c.mustKubectl("", "create", "clusterrolebinding", "prometheus-turnstile-metrics", "--clusterrole="+reader, "--serviceaccount=monitoring:prometheus")
		token := c.token("monitoring", "prometheus")
		Eventually(func() (string, error) {
			code, body, err := mgr.scrape(token)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("HTTP %d", code)
			}
			return body, err
		}).WithTimeout(settle).WithPolling(200 * time.Millisecond).Should(MatchRegexp(
			`turnstile_cluster_info\{[^}]*kubernetes_version="v1\.3\d\.\d+ \(emulating ` + regexp.QuoteMeta(emulated) + `\)"[^}]*supported="false"[^}]*\} 1`))

		By("the plugin: one warning line on stderr, and the command still runs")
		framework.PutOnPath(framework.PluginBinary())
		ctx, cancel := context.WithTimeout(context.Background(), framework.KubectlTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectlBin, "turnstile", "-n", "default", "locks")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+c.admin.Kubeconfig, "KUBECACHEDIR="+filepath.Join(c.dir, "plugin-cache"))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.Output()
		Expect(err).NotTo(HaveOccurred(), "stdout: %s\nstderr: %s", stdout, stderr.String())
		Expect(stderr.String()).To(HavePrefix("warning: "+warning), "one line on stderr")
		Expect(strings.Count(stderr.String(), "\n")).To(Equal(1), "one line on stderr: %s", stderr.String())
		Expect(string(stdout)).To(HavePrefix("KEY"), "the command still runs")

		mgr.stop()
	})
})

package install

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// A fleet as docs/install.md installs it: the chart with fleet.role=hub on one control plane,
// with fleet.role=spoke on another, each manager the built binary run with its Deployment's
// args as its installed ServiceAccount; the spoke's hub kubeconfig is the Secret the values
// name, mounted where the Deployment mounts it (as the kubelet would).
var _ = Describe("A fleet installed with the Helm chart: a hub and a spoke", Ordered, func() {
	const (
		team    = "team-a"
		member  = "eu-west-1"
		release = "turnstile-system"
	)
	var (
		hub, spoke       *cluster
		hubMgr, spokeMgr *managerProcess
	)
	chart := filepath.Join(framework.Root(), "charts", "turnstile")

	// install renders the chart with values for c, applies it as the admin (into the
	// namespace turnstile-system, restricted, as README.md says), waits until a LockRequest
	// passes admission and returns the Deployment's pod spec.
	install := func(c *cluster, values ...string) map[string]any {
		GinkgoHelper()
		bundle, err := framework.BundleFor(c.env.Config)
		Expect(err).NotTo(HaveOccurred())
		args := append([]string{"template", "turnstile", chart, "--namespace", release}, capabilities(bundle)...)
		manifests := run(helmBin, append(args, values...)...)
		c.mustKubectl("", "label", "namespace", release, "pod-security.kubernetes.io/enforce=restricted")
		c.mustKubectl(manifests, "apply", "--server-side", "-f", "-")
		c.mustKubectl("", "wait", "--for=condition=Established", "--timeout=60s",
			"crd/lockrequests.locks.turnstile.dev", "crd/projectlocks.locks.turnstile.dev", "crd/commandlocks.locks.turnstile.dev")
		sample := filepath.Join(repoRoot, "config", "samples", "locks_v1alpha1_lockrequest.yaml")
		request := c.mustKubectl("", "-n", release, "create", "--dry-run=client", "-o", "yaml", "-f", sample)
		if bundle.Mutating == "" {
			self := c.mustKubectl("", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
			request = c.mustKubectl(request, "annotate", "--local", "-o", "yaml", "-f", "-", "locks.turnstile.dev/created-by="+self)
		}
		Eventually(func() error {
			_, err := c.kubectl(request, "-n", release, "create", "--dry-run=server", "-f", "-")
			return err
		}).WithTimeout(settle).WithPolling(200 * time.Millisecond).Should(Succeed())
		dep := findObject(parseManifests(manifests), "Deployment", "-controller-manager")
		return dep.Path("spec", "template", "spec").(map[string]any)
	}
	// start runs the manager as the pod spec's ServiceAccount with its container's args.
	start := func(c *cluster, name string, podSpec map[string]any, container map[string]any) *managerProcess {
		GinkgoHelper()
		kubeconfig := c.serviceAccountKubeconfig(release, podSpec["serviceAccountName"].(string))
		return c.startManager(managerBin, name, kubeconfig, release, container)
	}

	BeforeAll(func() {
		By("starting two fresh control planes, the hub's and the spoke's")
		hub, spoke = startCluster(), startCluster()
		for _, c := range []*cluster{hub, spoke} {
			c.mustKubectl("", "create", "namespace", release)
			c.mustKubectl("", "create", "namespace", team)
		}
	})

	AfterAll(func() {
		if !CurrentSpecReport().Failed() {
			return
		}
		for _, m := range []*managerProcess{hubMgr, spokeMgr} {
			if m != nil {
				GinkgoWriter.Printf("--- log of %s:\n%s", m.name, m.log())
			}
		}
	})

	It("installs the hub with fleet.role=hub, its members and fleet namespaces from values", func() {
		podSpec := install(hub, "--set", "fleet.role=hub", "--set-json", `fleet.members={"`+member+`":{"region":"eu"}}`,
			"--set", "fleet.namespaces={"+team+"}")
		Expect(hub.mustKubectl("", "-n", "turnstile-fleet", "get", "configmap", "turnstile-fleet-members", "-o", "jsonpath={.data}")).
			To(MatchJSON(`{"` + member + `":"{\"labels\":{\"region\":\"eu\"}}"}`))
		Expect(hub.mustKubectl("", "-n", team, "get", "rolebinding", "turnstile-fleet-spoke", "-o", "jsonpath={.roleRef.name}")).
			To(Equal("turnstile-fleet-spoke"))
		hubMgr = start(hub, "hub-manager", podSpec, podSpec["containers"].([]any)[0].(map[string]any))
		By("making the spoke's identity on the hub, as docs/install.md says")
		hub.mustKubectl("", "-n", "turnstile-fleet", "create", "serviceaccount", "spoke-"+member)
	})

	It("installs a spoke with fleet.role=spoke and runs its agent with the hub kubeconfig of the Secret it names", func() {
		hubConfig := hub.serviceAccountKubeconfig("turnstile-fleet", "spoke-"+member)
		spoke.mustKubectl("", "-n", release, "create", "secret", "generic", "turnstile-hub", "--from-file=kubeconfig="+hubConfig)
		podSpec := install(spoke, "--set", "fleet.role=spoke", "--set", "fleet.clusterName="+member,
			"--set", "fleet.spoke.hubKubeconfigSecret=turnstile-hub", "--set", "activeActive.enabled=false", "--set", "leaderElection.enabled=true")
		container := podSpec["containers"].([]any)[0].(map[string]any)
		Expect(container["args"]).To(ContainElements("--cluster-name="+member, "--hub-kubeconfig=/etc/turnstile/hub/kubeconfig"))
		spokeMgr = start(spoke, "spoke-manager", podSpec, mountSecrets(spoke, podSpec, container))
	})

	It("grants a requester's LockRequest in the spoke from the hub, which holds it as the spoke's", func() {
		spoke.mustKubectl("", "-n", team, "create", "rolebinding", "requesters", "--clusterrole=turnstile-requester", "--user=alice")
		sample := filepath.Join(repoRoot, "config", "samples", "locks_v1alpha1_lockrequest.yaml")
		spoke.mustKubectl("", "--as=alice", "-n", team, "apply", "-f", sample)
		spoke.mustKubectl("", "--as=alice", "-n", team, "wait", "--for=condition=Granted", "--timeout=60s", "lockrequest/plan-pr-100")
		token := spoke.mustKubectl("", "-n", team, "get", "lockrequest", "plan-pr-100", "-o", "jsonpath={.status.fencingToken}")
		Expect(hub.mustKubectl("", "-n", team, "get", "lockrequest", member+".plan-pr-100",
			"-o", "jsonpath={.status.phase} {.status.fencingToken} {.spec.holder.cluster} {.spec.holder.owner}")).
			To(Equal("Granted " + token + " " + member + " alice"))

		By("released in the spoke, released on the hub")
		spoke.mustKubectl("", "--as=alice", "-n", team, "delete", "lockrequest", "plan-pr-100")
		Eventually(func() (string, error) {
			return hub.kubectl("", "-n", team, "get", "lockrequests", "-o", "name")
		}).WithTimeout(settle).Should(BeEmpty())
	})

	It("stops cleanly, and neither manager was ever forbidden anything", func() {
		for _, m := range []*managerProcess{spokeMgr, hubMgr} {
			m.stop()
			Expect(m.forbiddenLines()).To(BeEmpty(), "manager %s lacked a permission", m.name)
		}
	})
})

// mountSecrets does for container what the kubelet does for the pod's Secret volumes: each
// Secret's items written to a directory of their own, read from the cluster, and the container's
// args that name a path under the volume's mountPath pointed at that directory. It returns the
// container with those args.
func mountSecrets(c *cluster, podSpec, container map[string]any) map[string]any {
	GinkgoHelper()
	secrets := map[string]map[string]any{} // volume name -> its secret source
	for _, v := range podSpec["volumes"].([]any) {
		v := v.(map[string]any)
		if s, ok := v["secret"].(map[string]any); ok {
			secrets[v["name"].(string)] = s
		}
	}
	out := map[string]any{}
	for k, v := range container {
		out[k] = v
	}
	args := append([]any(nil), container["args"].([]any)...)
	for _, m := range container["volumeMounts"].([]any) {
		m := m.(map[string]any)
		src, ok := secrets[m["name"].(string)]
		if !ok {
			continue
		}
		var secret corev1.Secret
		Expect(c.env.Client.Get(context.Background(), types.NamespacedName{Namespace: "turnstile-system", Name: src["secretName"].(string)}, &secret)).To(Succeed())
		dir := filepath.Join(c.dir, "volumes", m["name"].(string))
		Expect(os.MkdirAll(dir, 0o700)).To(Succeed())
		for _, it := range src["items"].([]any) {
			it := it.(map[string]any)
			data, ok := secret.Data[it["key"].(string)]
			Expect(ok).To(BeTrue(), "Secret %s has no key %s", secret.Name, it["key"])
			Expect(os.WriteFile(filepath.Join(dir, it["path"].(string)), data, 0o600)).To(Succeed())
		}
		mount := m["mountPath"].(string)
		for i, a := range args {
			if flag, path, ok := strings.Cut(a.(string), "="); ok && strings.HasPrefix(path, mount+"/") {
				args[i] = flag + "=" + dir + strings.TrimPrefix(path, mount)
			}
		}
	}
	out["args"] = args
	return out
}

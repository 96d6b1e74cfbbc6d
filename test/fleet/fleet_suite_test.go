// Package fleet runs a fleet on three local control planes (docs/fleet.md): a hub and two
// spokes, each a real kube-apiserver and etcd, each with the built manager binary as a user
// starts it — the spokes with --hub-kubeconfig, as a ServiceAccount of the hub that has only the
// RBAC of config/fleet, under its admission policies — driven with the real kubectl.
package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// ns is the fleet namespace every test uses: a namespace is one lock space fleet-wide.
const ns = "team-a"

// member is one control plane of the fleet and its manager.
type member struct {
	name    string
	env     *framework.Env
	kubectl framework.Kubectl
	manager *framework.Process
	args    []string
	logPath string
}

var (
	hub, spokeA, spokeB *member
	managerBin          string
)

func TestFleet(t *testing.T) { framework.RunSuite(t, "Turnstile fleet suite") }

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(60 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	managerBin = framework.ManagerBinary()
	kubectlBin := framework.KubectlBinary()
	start := func(name string) *member {
		By("starting the control plane of " + name)
		env := framework.StartEnv()
		k := framework.AdminKubectl(env, kubectlBin)
		k.Log = GinkgoWriter
		_, err := k.Run("", "create", "namespace", ns)
		Expect(err).NotTo(HaveOccurred())
		return &member{name: name, env: env, kubectl: k}
	}
	hub, spokeA, spokeB = start("hub"), start("spoke-a"), start("spoke-b")

	By("installing the hub's side of the fleet (config/fleet: the spoke roles and admission policies), with both spokes as members")
	_, err := hub.kubectl.Run("", "apply", "--server-side", "-k", filepath.Join(framework.Root(), "config", "fleet"))
	Expect(err).NotTo(HaveOccurred())
	_, err = hub.kubectl.Run("", "-n", "turnstile-fleet", "patch", "configmap", "turnstile-fleet-members", "--type=merge",
		"-p", `{"data":{"spoke-a":"{}","spoke-b":"{}"}}`)
	Expect(err).NotTo(HaveOccurred())
	_, err = hub.kubectl.Run("", "-n", ns, "create", "rolebinding", "turnstile-fleet-spoke", "--clusterrole=turnstile-fleet-spoke",
		"--group=system:serviceaccounts:turnstile-fleet")
	Expect(err).NotTo(HaveOccurred())
	dir := GinkgoT().TempDir()
	for _, s := range []*member{spokeA, spokeB} {
		sa := "spoke-" + s.name // the hub's identity of cluster s.name
		_, err := hub.kubectl.Run("", "-n", "turnstile-fleet", "create", "serviceaccount", sa)
		Expect(err).NotTo(HaveOccurred())
		hubConfig, err := hub.env.WriteServiceAccountKubeconfig(context.Background(), dir, "turnstile-fleet", sa)
		Expect(err).NotTo(HaveOccurred())
		s.args = []string{"--hub-kubeconfig=" + hubConfig, "--cluster-name=" + s.name}
	}
	for _, m := range []*member{hub, spokeA, spokeB} {
		m.logPath = filepath.Join(dir, m.name+".log")
		m.start()
	}
})

var _ = AfterSuite(func() {
	for _, m := range []*member{hub, spokeA, spokeB} {
		if m == nil || m.manager == nil {
			continue
		}
		Expect(m.manager.Stop(15*time.Second)).To(Succeed(), "the manager of %s did not stop cleanly", m.name)
		Expect(m.manager.ForbiddenLines()).To(BeEmpty(), "the manager of %s was refused something: its RBAC or the fleet policy refused it", m.name)
	}
})

// start runs m's manager, the built binary, as its admin (its own cluster) with m's arguments.
func (m *member) start() {
	GinkgoHelper()
	args := append([]string{"--metrics-bind-address=0", "--health-probe-bind-address=0"}, m.args...)
	p, err := framework.StartProcessLogFile(managerBin, m.kubectl.Kubeconfig, m.logPath, args...)
	Expect(err).NotTo(HaveOccurred())
	m.manager = p
	DeferCleanup(func() {
		if os.Getenv("TURNSTILE_FLEET_LOGS") != "" {
			fmt.Fprintf(GinkgoWriter, "--- %s\n%s\n", m.name, p.Log())
		}
	})
}

// lockRequest is a LockRequest's manifest, as a user applies it.
func lockRequest(name, owner, path string) string {
	return fmt.Sprintf(`apiVersion: locks.turnstile.dev/v1alpha1
kind: LockRequest
metadata: {name: %s, namespace: %s}
spec:
  locks: [{repo: acme/infra, path: %s}]
  holder: {owner: %s}
`, name, ns, path, owner)
}

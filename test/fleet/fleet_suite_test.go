// Package fleet runs a fleet on three local control planes (docs/fleet.md): a hub and two
// spokes, each a real kube-apiserver and etcd, each with the built manager binary as a user
// starts it — the spokes with --hub-kubeconfig, as a ServiceAccount of the hub that has only the
// RBAC of config/fleet, under its admission policies, admitted by kubectl turnstile fleet join —
// driven with the real kubectl.
package fleet

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/netcut"
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
	// kubelet runs the Pods of the spoke's node (spokes only).
	kubelet *kubelet
	// hubProxy is the network between the spoke's agent and the hub (spoke-a only): its hub
	// kubeconfig points at it.
	hubProxy *netcut.Proxy
	// hubConfig is the spoke's kubeconfig of the hub, as its ServiceAccount there.
	hubConfig string
	// managerConfig is the kubeconfig the manager runs with in its own cluster: its
	// ServiceAccount's, the bundle installed (installTurnstile).
	managerConfig string
}

var (
	hub, spokeA, spokeB *member
	managerBin          string
	suiteDir            string
)

// leaseDuration is the spokes' --hub-lease-duration: the default, what a user gets.
const leaseDuration = spoke.DefaultLeaseDuration

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

	dir := GinkgoT().TempDir()
	suiteDir = dir
	// The hub is a Turnstile as any (the bundle, its manager as its ServiceAccount, under its
	// policies), with the hub's side of the fleet beside it (docs/install.md).
	hub.installTurnstile(dir)
	By("installing the hub's side of the fleet (config/fleet: the spoke roles and admission policies), and binding the spokes' role in " + ns)
	_, err := hub.kubectl.Run("", "apply", "--server-side", "-k", filepath.Join(framework.Root(), "config", "fleet"))
	Expect(err).NotTo(HaveOccurred())
	_, err = hub.kubectl.Run("", "-n", ns, "create", "rolebinding", "turnstile-fleet-spoke", "--clusterrole=turnstile-fleet-spoke",
		"--group=system:serviceaccounts:turnstile-fleet")
	Expect(err).NotTo(HaveOccurred())
	By("putting a network that the tests can cut (internal/testing/netcut) between spoke-a's agent and the hub")
	host, err := url.Parse(hub.env.Config.Host)
	Expect(err).NotTo(HaveOccurred())
	spokeA.hubProxy, err = netcut.New(host.Host)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(spokeA.hubProxy.Close)
	By("admitting both spokes with the hub admin's command, kubectl turnstile fleet join (the built plugin, through kubectl): " +
		"each a member, its hub ServiceAccount, and the hub kubeconfig its agent runs with; spoke-a's reaches the hub through the cut network")
	framework.PutOnPath(framework.PluginBinary()) // where kubectl finds plugins
	for _, s := range []*member{spokeA, spokeB} {
		s.hubConfig = filepath.Join(dir, "hub-"+s.name+".kubeconfig")
		args := []string{"turnstile", "fleet", "join", s.name, "--output", s.hubConfig}
		if s.hubProxy != nil {
			args = append(args, "--hub-server", "https://"+s.hubProxy.Addr())
		}
		_, err := hub.kubectl.Run("", args...)
		Expect(err).NotTo(HaveOccurred())
		s.args = []string{"--hub-kubeconfig=" + s.hubConfig, "--cluster-name=" + s.name}
		s.startWorkloads(dir)
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

// serviceAccountKubeconfig makes the hub ServiceAccount sa in turnstile-fleet (when it is not
// there yet) and writes a kubeconfig of the hub as it, into a directory of its own (named);
// it returns the kubeconfig's path. For identities fleet join does not make: a ServiceAccount
// of a cluster that is no member.
func serviceAccountKubeconfig(sa, name string) string {
	GinkgoHelper()
	if _, err := hub.kubectl.Run("", "-n", "turnstile-fleet", "get", "serviceaccount", sa); err != nil {
		_, err := hub.kubectl.Run("", "-n", "turnstile-fleet", "create", "serviceaccount", sa)
		Expect(err).NotTo(HaveOccurred())
	}
	dir := filepath.Join(suiteDir, "hub-"+sa+name)
	Expect(os.MkdirAll(dir, 0o700)).To(Succeed())
	path, err := hub.env.WriteServiceAccountKubeconfig(context.Background(), dir, "turnstile-fleet", sa)
	Expect(err).NotTo(HaveOccurred())
	return path
}

// kubeconfig is the kubeconfig m's manager runs with.
func (m *member) kubeconfig() string {
	if m.managerConfig != "" {
		return m.managerConfig
	}
	return m.kubectl.Kubeconfig
}

// waiter is m's kubectl for kubectl wait: bounded by wait (and a minute to start), not by one
// call's usual bound.
func (m *member) waiter() framework.Kubectl {
	k := m.kubectl
	k.Timeout = wait + time.Minute
	return k
}

// start runs m's manager, the built binary, as its admin (its own cluster) with m's arguments.
func (m *member) start() {
	GinkgoHelper()
	p := m.launch()
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

// launch starts m's manager without registering a cleanup (start does): for a spec's own
// cleanup, where Ginkgo refuses another DeferCleanup.
func (m *member) launch() *framework.Process {
	GinkgoHelper()
	args := append([]string{"--metrics-bind-address=0", "--health-probe-bind-address=0"}, m.args...)
	p, err := framework.StartProcessLogFile(managerBin, m.kubeconfig(), m.logPath, args...)
	Expect(err).NotTo(HaveOccurred())
	m.manager = p
	return p
}

// Package deployed runs Turnstile as it is deployed and drives every feature through it, as the
// people who use it: on a fresh local control plane (kube-apiserver + etcd built by hack/) with
// nothing installed,
//
//   - `kubectl apply --server-side -k config/default` installs the CRDs, the RBAC, the admission
//     policies and the Deployment;
//   - the real manager binary runs with the Deployment's args (active-active membership) under the
//     installed ServiceAccount alone: a token from the TokenRequest API, no admin kubeconfig;
//   - people bound to the shipped roles (kubectl --as), a CI ServiceAccount running the real
//     plugin with its own token, and a platform admin take, hand off, renew, freeze, drain and
//     thaw, lose a holder Lease, deadlock, force-unlock, and see finished requests retained and
//     then deleted - every write of theirs judged by the admission policies;
//   - any "forbidden" in the manager's log fails the suite: a verb missing from the shipped RBAC,
//     or a policy that does not exempt the manager where it must.
//
// Run it with `make test`, or alone with:
//
//	make build k8s-bins && KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.2-linux-amd64 go test -count=1 ./test/deployed/
package deployed

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

const (
	// settle bounds an asynchronous outcome on a loaded 2-core machine; a grant or hand-off
	// takes milliseconds.
	settle = 30 * time.Second
	poll   = 50 * time.Millisecond
	// shutdownGrace is the Deployment's terminationGracePeriodSeconds.
	shutdownGrace = 10 * time.Second
	// retention is the one flag added to the Deployment's args, so retention is seen within
	// the test (the Deployment keeps finished requests 1h).
	retention = 10 * time.Second
)

var (
	repoRoot   string
	managerBin string
	pluginBin  string
	kubectlBin string
	env        *framework.Env
	dir        string // kubeconfigs and the manager's log
	kubeconfig string // the admin's: setup only (namespaces, bindings, tokens) and the install
	cacheDir   string
	// bundle is what a user of this version installs (framework.BundleFor).
	bundle framework.Bundle
)

// mutating: the bundle installs the mutating policies.
func mutating() bool { return bundle.Mutating != "" }

func TestDeployed(t *testing.T) { framework.RunSuite(t, "Turnstile deployed-as-ServiceAccount suite") }

var _ = BeforeSuite(func() {
	repoRoot, managerBin, kubectlBin = framework.Root(), framework.ManagerBinary(), framework.KubectlBinary()
	pluginBin = framework.PluginBinary()
	framework.PutOnPath(pluginBin) // where kubectl finds plugins

	By("starting a fresh kube-apiserver and etcd, with nothing installed")
	env = framework.StartBareEnv()
	admin := framework.AdminKubectl(env, kubectlBin)
	kubeconfig, cacheDir = admin.Kubeconfig, admin.CacheDir
	dir = GinkgoT().TempDir()
	var err error
	bundle, err = framework.BundleFor(env.Config)
	Expect(err).NotTo(HaveOccurred())
})

// run runs the real kubectl (or the plugin through it) with kubeconfig kc and returns stdout,
// and stderr inside the error when it fails.
func run(kc, stdin string, args ...string) (string, error) {
	k := framework.Kubectl{Bin: kubectlBin, Kubeconfig: kc, CacheDir: cacheDir, Log: GinkgoWriter}
	return k.Run(stdin, args...)
}

// admin runs kubectl as the cluster's admin: setup only, never the features under test.
func admin(args ...string) string {
	GinkgoHelper()
	out, err := run(kubeconfig, "", args...)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// serviceAccountKubeconfig writes a kubeconfig holding a ServiceAccount's token and nothing
// else: what a pod's in-cluster config amounts to.
func serviceAccountKubeconfig(namespace, serviceAccount string) string {
	GinkgoHelper()
	path, err := env.WriteServiceAccountKubeconfig(context.Background(), dir, namespace, serviceAccount)
	Expect(err).NotTo(HaveOccurred())
	return path
}

// manager is the real manager binary under the installed ServiceAccount's kubeconfig.
type manager struct {
	p *framework.Process
}

// startManager runs the binary with the Deployment's args, except the listen addresses
// (loopback ports instead of the pod's), plus extra, and the Deployment's env resolved as the
// kubelet resolves it for a pod of namespace. The caller stops it (the Ordered container's
// AfterAll).
func startManager(kc, namespace string, deploymentArgs []string, deploymentEnv []corev1.EnvVar, extra ...string) *manager {
	GinkgoHelper()
	args := append(framework.OutsideClusterArgs(deploymentArgs, framework.FreeAddr(), framework.FreeAddr()), extra...)
	env, err := framework.DownwardEnv(deploymentEnv, namespace, "turnstile-controller-manager-0")
	Expect(err).NotTo(HaveOccurred())
	fmt.Fprintf(GinkgoWriter, "starting the manager: %s %s %s\n", strings.Join(env, " "), managerBin, strings.Join(args, " "))
	p, err := framework.StartProcessLogFileEnv(managerBin, kc, filepath.Join(dir, "manager.log"), env, args...)
	Expect(err).NotTo(HaveOccurred())
	return &manager{p: p}
}

// kill ends the manager if it still runs (a failed spec left it so).
func (m *manager) kill() { _ = m.p.Kill() }

func (m *manager) log() string { return m.p.Log() }

func (m *manager) running() error {
	if err := m.p.Running(); err != nil {
		return fmt.Errorf("the manager %w", err)
	}
	return nil
}

// forbiddenLines are the lines of the manager's log that say "forbidden".
func (m *manager) forbiddenLines() []string { return m.p.ForbiddenLines() }

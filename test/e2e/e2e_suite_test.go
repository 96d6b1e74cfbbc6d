// Package e2e drives the real manager binary with the real kubectl against a local control plane
// (kube-apiserver + etcd built by hack/), exactly as a user would.
//
// Run it with:
//
//	make build && KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.2-linux-amd64 go test -count=1 ./test/e2e/ -v
//
// TURNSTILE_MANAGER overrides the manager binary (default bin/manager), TURNSTILE_PLUGIN the
// kubectl-turnstile plugin (default bin/kubectl-turnstile) and TURNSTILE_KUBECTL the
// kubectl binary (default: the one built next to the control plane binaries).
package e2e

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

const (
	// shutdownGrace is how long the manager may take to exit after SIGTERM. Clean shutdown is a
	// requirement, so exceeding it fails the suite.
	shutdownGrace = 15 * time.Second

	// settle is how long asynchronous outcomes may take. A hand-off takes milliseconds; this only
	// absorbs kubectl start-up and a loaded machine.
	settle = 5 * time.Second
	poll   = 100 * time.Millisecond
)

var (
	repoRoot   string
	env        *framework.Env
	kubeconfig string
	kubectlBin string
	cacheDir   string
	manager    *managerProcess
)

// TestE2E runs the specs in two shards side by side, each a process with its own control plane
// and manager (framework.RunSuiteInShards): most of a spec's time is kubectl starting and the
// manager's clocks. TURNSTILE_TEST_SHARDS=1 runs them all in this process. A spec that takes
// longer than most says so with SpecPriority: about its seconds ÷ 3, in ordinary specs' worth
// (the others, about 3 s each, count 1), so the shards balance.
func TestE2E(t *testing.T) { framework.RunSuiteInShards(t, "Turnstile e2e suite", 2) }

var _ = BeforeSuite(func() {
	repoRoot = framework.Root()
	managerBin := framework.ManagerBinary()
	framework.PutOnPath(framework.PluginBinary()) // where kubectl finds plugins

	By("starting kube-apiserver and etcd with the Turnstile CRDs")
	env = framework.StartEnv()
	kubectlBin = framework.KubectlBinary()
	var err error
	admin := framework.AdminKubectl(env, kubectlBin)
	kubeconfig, cacheDir = admin.Kubeconfig, admin.CacheDir

	By("starting the manager binary " + managerBin)
	manager, err = startManager(managerBin, kubeconfig,
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
	)
	Expect(err).NotTo(HaveOccurred())

	By("waiting until the manager grants a lock (its caches are synced and its workers run)")
	warmup := createNamespace()
	_, err = kubectlApply(warmup, lockRequest{Name: "warmup", Repo: "e2e/warmup", Path: ".", Owner: "e2e"}.YAML())
	Expect(err).NotTo(HaveOccurred())
	_, err = kubectl("-n", warmup, "wait", "--for=condition=Granted", "lockrequest/warmup", "--timeout=30s")
	Expect(err).NotTo(HaveOccurred(), "the manager never granted a free lock (%s)", manager.State())
	_, err = kubectl("-n", warmup, "delete", "lockrequest", "warmup", "--wait=true")
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if manager == nil {
		return
	}
	By("stopping the manager with SIGTERM: it must exit cleanly within " + shutdownGrace.String())
	start := time.Now()
	err := manager.Stop(shutdownGrace)
	took := time.Since(start)
	fmt.Fprintf(GinkgoWriter, "manager stopped in %s (err=%v)\n", took, err)
	Expect(err).NotTo(HaveOccurred(), "the manager did not shut down cleanly")
	Expect(took).To(BeNumerically("<", shutdownGrace))
})

// managerProcess is the manager binary, watched so a crash during a spec is reported as such.
type managerProcess struct {
	p *framework.Process
}

func startManager(binary, kubeconfig string, args ...string) (*managerProcess, error) {
	p, err := framework.StartProcess(binary, kubeconfig, GinkgoWriter, args...)
	if err != nil {
		return nil, err
	}
	return &managerProcess{p: p}, nil
}

// Running fails with the exit status when the manager is gone.
func (m *managerProcess) Running() error {
	if err := m.p.Running(); err != nil {
		return fmt.Errorf("the manager unexpectedly %w", err)
	}
	return nil
}

// State says whether the manager runs, for failure messages.
func (m *managerProcess) State() string {
	if err := m.Running(); err != nil {
		return err.Error()
	}
	return "the manager is running"
}

// Stop sends SIGTERM and waits up to grace for an exit with status 0; past grace it kills.
func (m *managerProcess) Stop(grace time.Duration) error {
	if err := m.Running(); err != nil {
		return fmt.Errorf("before SIGTERM: %w", err)
	}
	if err := m.p.Stop(grace); err != nil {
		return fmt.Errorf("after SIGTERM: %w", err)
	}
	return nil
}

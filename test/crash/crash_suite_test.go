// Package crash kills the real manager binary with SIGKILL, at random points, while requesters
// churn against a real kube-apiserver and etcd, and checks that Turnstile converges after every
// restart and never grants one key to two holders. A second spec runs two managers with leader
// election and kills the leader repeatedly.
//
// Run it with:
//
//	make build && KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.2-linux-amd64 go test -count=1 ./test/crash/ -v
//
// TURNSTILE_MANAGER overrides the manager binary (default bin/manager).
package crash

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

var (
	ctx        = context.Background()
	env        *framework.Env
	k8s        client.WithWatch
	kubeconfig string
	managerBin string
)

func TestCrash(t *testing.T) { framework.RunSuite(t, "Crash suite") }

var _ = BeforeSuite(func() {
	managerBin = framework.ManagerBinary()
	env = framework.StartEnv()
	k8s = env.Client
	kubeconfig = framework.AdminKubeconfig(env)
})

func newNamespace() string { return framework.CreateNamespace(ctx, k8s, "crash-") }

// manager is one run of the manager binary, its log kept so the test can tell what it did.
type manager struct {
	name string
	p    *framework.Process
	log  *framework.SyncBuffer
}

func startManager(name string, args ...string) *manager {
	GinkgoHelper()
	buf := &framework.SyncBuffer{}
	out := io.MultiWriter(buf, prefixWriter{name: name, w: GinkgoWriter})
	args = append([]string{
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--kube-api-qps=1000", "--kube-api-burst=2000",
	}, args...)
	p, err := framework.StartProcess(managerBin, kubeconfig, out, args...)
	Expect(err).NotTo(HaveOccurred())
	m := &manager{name: name, p: p, log: buf}
	DeferCleanup(func() { _ = m.p.Kill() })
	return m
}

// kill sends SIGKILL: no shutdown hook runs, no Lease is released, no write is finished.
func (m *manager) kill() {
	err := m.p.Kill()
	Expect(err).To(MatchError(ContainSubstring("killed")), "%s should have died of SIGKILL", m.name)
}

// leads says whether this manager won leader election.
func (m *manager) leads() bool {
	return strings.Contains(strings.ToLower(m.log.String()), "successfully acquired lease")
}

type prefixWriter struct {
	name string
	w    io.Writer
}

func (p prefixWriter) Write(b []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line != "" {
			fmt.Fprintf(p.w, "[%s] %s", p.name, line)
		}
	}
	return len(b), nil
}

// converged says what, if anything, is still in flight once every requester has released:
// a ProjectLock that still names a holder or a queue, or a request that is not final.
func converged(ns string) string {
	var out []string
	var pls locksv1.ProjectLockList
	if err := k8s.List(ctx, &pls, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	for _, pl := range pls.Items {
		if pl.Status.Holder != nil || pl.Status.QueueLength > 0 {
			out = append(out, fmt.Sprintf("projectlock %s: holder %+v, queue %d", pl.Name, pl.Status.Holder, pl.Status.QueueLength))
		}
	}
	var lrs locksv1.LockRequestList
	if err := k8s.List(ctx, &lrs, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	for _, lr := range lrs.Items {
		if !lr.Status.Phase.IsFinal() {
			out = append(out, fmt.Sprintf("lockrequest %s: phase %q", lr.Name, lr.Status.Phase))
		}
	}
	return strings.Join(out, "\n")
}

func keyOf(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

package framework

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The helpers in this file are for Ginkgo suites: they fail the running node (spec, BeforeSuite)
// instead of returning an error, and register their own cleanup with DeferCleanup (from a
// BeforeSuite, it runs after the AfterSuite).

// RunSuite runs the Ginkgo specs of a test package: its TestXxx function's whole body. args are
// RunSpecs's (a suite and a reporter configuration, decorators).
func RunSuite(t *testing.T, description string, args ...any) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, description, args...)
}

// StartEnv starts a control plane with the CRDs installed (Start with $KUBEBUILDER_ASSETS) and
// stops it at cleanup.
func StartEnv() *Env {
	ginkgo.GinkgoHelper()
	return stopAtCleanup(Start(""))
}

// StartBareEnv starts a control plane with nothing installed (StartBare with
// $KUBEBUILDER_ASSETS) and stops it at cleanup.
func StartBareEnv() *Env {
	ginkgo.GinkgoHelper()
	return stopAtCleanup(StartBare(""))
}

// StartBareEnvWith is StartBareEnv with kube-apiserver flags added (StartBareWith).
func StartBareEnvWith(apiserverFlags ...string) *Env {
	ginkgo.GinkgoHelper()
	return stopAtCleanup(StartBareWith("", apiserverFlags...))
}

func stopAtCleanup(env *Env, err error) *Env {
	ginkgo.GinkgoHelper()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(env.Stop)
	return env
}

// AdminKubeconfig writes an admin kubeconfig for env into a fresh temporary directory and
// returns its path: for the manager binary, or kubectl.
func AdminKubeconfig(env *Env) string {
	ginkgo.GinkgoHelper()
	path := filepath.Join(ginkgo.GinkgoT().TempDir(), "admin.kubeconfig")
	gomega.Expect(env.WriteKubeconfig(path)).To(gomega.Succeed())
	return path
}

// AdminKubectl is the real kubectl at bin as env's admin (AdminKubeconfig), with its own cache
// directory next to the kubeconfig, logging to GinkgoWriter.
func AdminKubectl(env *Env, bin string) Kubectl {
	ginkgo.GinkgoHelper()
	kubeconfig := AdminKubeconfig(env)
	return Kubectl{
		Bin:        bin,
		Kubeconfig: kubeconfig,
		CacheDir:   filepath.Join(filepath.Dir(kubeconfig), "kubectl-cache"),
		Log:        ginkgo.GinkgoWriter,
	}
}

// Root is RepoRoot, failing the node when there is none.
func Root() string {
	ginkgo.GinkgoHelper()
	root, err := RepoRoot()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return root
}

// ManagerBinary is the manager binary: $TURNSTILE_MANAGER, else bin/manager.
func ManagerBinary() string {
	ginkgo.GinkgoHelper()
	return Binary("TURNSTILE_MANAGER", "bin/manager", "run `make build`")
}

// PluginBinary is the kubectl-turnstile plugin: $TURNSTILE_PLUGIN, else bin/kubectl-turnstile.
func PluginBinary() string {
	ginkgo.GinkgoHelper()
	return Binary("TURNSTILE_PLUGIN", "bin/kubectl-turnstile", "run `make build`")
}

// KubectlBinary is the real kubectl: $TURNSTILE_KUBECTL (the Makefile exports it), else the
// one hack/ builds next to the control plane binaries in $KUBEBUILDER_ASSETS.
func KubectlBinary() string {
	ginkgo.GinkgoHelper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if os.Getenv("TURNSTILE_KUBECTL") == "" {
		gomega.Expect(assets).NotTo(gomega.BeEmpty(), "neither TURNSTILE_KUBECTL nor KUBEBUILDER_ASSETS is set: run through `make test` (it builds kube-apiserver, etcd and kubectl into bin/k8s)")
	}
	return Binary("TURNSTILE_KUBECTL", filepath.Join(assets, "kubectl"), "run `make k8s-bins`")
}

// HelmBinary is helm: $TURNSTILE_HELM (the Makefile exports it), else the pinned bin/helm.
func HelmBinary() string {
	ginkgo.GinkgoHelper()
	return Binary("TURNSTILE_HELM", "bin/helm-v3.22.0", "run `make helm`")
}

// Binary is the path of a binary a suite runs: $envVar when set, else def (relative to the
// repository root unless absolute). It fails with how to build it when the file is missing.
func Binary(envVar, def, how string) string {
	ginkgo.GinkgoHelper()
	p := os.Getenv(envVar)
	switch {
	case p != "":
	case filepath.IsAbs(def):
		p = def
	default:
		p = filepath.Join(Root(), def)
	}
	_, err := os.Stat(p)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "%s not found: %s (or set %s)", p, how, envVar)
	return p
}

// FreeAddr is a free loopback address: the machine is shared, so no fixed port is safe.
func FreeAddr() string {
	ginkgo.GinkgoHelper()
	addr, err := FreeLoopbackAddr()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return addr
}

// PutOnPath puts the directory of bin first on PATH, where kubectl finds its plugins.
func PutOnPath(bin string) {
	ginkgo.GinkgoHelper()
	gomega.Expect(os.Setenv("PATH", filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))).To(gomega.Succeed())
}

// CreateNamespace creates a fresh namespace named prefix plus a random suffix, for one spec
// (or one Ordered container), and deletes it at cleanup. envtest runs no namespace controller,
// so the deletion only marks it Terminating: nothing of the spec's is removed under a checker.
func CreateNamespace(ctx context.Context, c client.Client, prefix string) string {
	ginkgo.GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	gomega.Expect(c.Create(ctx, ns)).To(gomega.Succeed())
	ginkgo.DeferCleanup(func() { _ = c.Delete(context.Background(), ns) })
	return ns.Name
}

// StartChecker starts an InvariantChecker on namespace for the running Ginkgo spec and stops it
// when the spec ends.
func StartChecker(ctx context.Context, c client.WithWatch, namespace string) *InvariantChecker {
	ginkgo.GinkgoHelper()
	ic, err := StartInvariantChecker(ctx, c, namespace)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(ic.Stop)
	return ic
}

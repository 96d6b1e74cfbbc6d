// Package gitops_test checks that the readers GitOps tools use judge Turnstile's objects right,
// with those tools' own code: kstatus (sigs.k8s.io/cli-utils, the library of Flux's wait and
// healthChecks, kpt and Config Sync) on real objects from a real kube-apiserver, driven through
// the real controllers; Argo CD's health checks (resource_customizations/) in gopher-lua, the VM
// Argo CD runs them in; and the Flux example's objects in Flux's own API types.
package gitops_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/deadlock"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// Shared timeouts: a decision takes milliseconds; these leave room for a loaded machine.
const (
	timeout  = 15 * time.Second
	interval = 20 * time.Millisecond
)

var (
	env *framework.Env
	k8s client.Client
	mgr *framework.Manager
	ctx = context.Background()
)

func TestGitOps(t *testing.T) { framework.RunSuite(t, "GitOps readers suite") }

var _ = BeforeSuite(func() {
	env = framework.StartEnv()
	k8s = env.Client
})

var _ = AfterSuite(func() {
	if mgr != nil {
		Expect(mgr.Stop()).To(Succeed())
	}
})

// startManager runs the controllers, once: the first spec looks at a request before any
// controller has seen it.
func startManager() {
	GinkgoHelper()
	if mgr != nil {
		return
	}
	var err error
	mgr, err = env.StartManager(controller.SetupOptions{
		Queue:          queue.DefaultConfig(),
		Workers:        4,
		DeadlockPolicy: deadlock.PolicyNewest,
		DeadlockScan:   2 * time.Second,
	})
	Expect(err).NotTo(HaveOccurred())
}

func newNamespace() string { return framework.CreateNamespace(ctx, k8s, "gitops-") }

// phaseOf polls a request's phase.
func phaseOf(ns, name string) func() locksv1.LockRequestPhase {
	return framework.PhaseOf(ctx, k8s, ns, name)
}

func create(objs ...client.Object) {
	GinkgoHelper()
	for _, o := range objs {
		Expect(k8s.Create(ctx, o)).To(Succeed())
	}
}

var (
	lockRequestGVK = locksv1.GroupVersion.WithKind("LockRequest")
	projectLockGVK = locksv1.GroupVersion.WithKind("ProjectLock")
	commandLockGVK = locksv1.GroupVersion.WithKind("CommandLock")
)

// read GETs an object as a GitOps tool does: unstructured, the API server's JSON as it is
// (a typed round trip would drop the defaulted observedGeneration: 0 that kstatus reads).
func read(gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u)
}

// verdict is kstatus's judgement of an object: its status and message.
type verdict struct {
	Status  status.Status
	Message string
}

// kstatusOf polls kstatus's verdict on an object read from the API server.
func kstatusOf(gvk schema.GroupVersionKind, ns, name string) func() verdict {
	return func() verdict {
		u, err := read(gvk, ns, name)
		if err != nil {
			return verdict{Status: "GetError", Message: err.Error()}
		}
		return compute(u)
	}
}

func compute(u *unstructured.Unstructured) verdict {
	res, err := status.Compute(u)
	if err != nil {
		return verdict{Status: "ComputeError", Message: err.Error()}
	}
	return verdict{Status: res.Status, Message: res.Message}
}

// expectKstatus waits until kstatus reads the object as want with a message containing msg,
// then records the object as Argo CD test data (see dump).
func expectKstatus(gvk schema.GroupVersionKind, ns, name string, want status.Status, msg, testdata string) {
	GinkgoHelper()
	Eventually(kstatusOf(gvk, ns, name), timeout, interval).Should(And(
		HaveField("Status", want), HaveField("Message", ContainSubstring(msg))), "kstatus of %s %s/%s", gvk.Kind, ns, name)
	if testdata != "" {
		u, err := read(gvk, ns, name)
		Expect(err).NotTo(HaveOccurred())
		dump(u, testdata)
	}
}

// dump writes the object to resource_customizations/locks.turnstile.dev/<Kind>/testdata/<file>.yaml
// when TURNSTILE_ARGO_TESTDATA is set and that file does not exist yet: the Argo CD health checks
// are tested on objects this suite drove through the real controllers. Existing files are kept,
// as health_test.yaml quotes their messages (tokens, times, namespaces); delete one to capture it
// anew. Only managedFields, the server's bookkeeping, is left out.
func dump(u *unstructured.Unstructured, file string) {
	GinkgoHelper()
	if os.Getenv("TURNSTILE_ARGO_TESTDATA") == "" {
		return
	}
	o := u.DeepCopy()
	o.SetManagedFields(nil)
	root, err := framework.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	data, err := yaml.Marshal(o.Object)
	Expect(err).NotTo(HaveOccurred())
	dir := filepath.Join(root, "resource_customizations", locksv1.GroupVersion.Group, o.GetKind(), "testdata")
	Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	path := filepath.Join(dir, strings.TrimSuffix(file, ".yaml")+".yaml")
	if _, err := os.Stat(path); err == nil {
		return
	}
	Expect(os.WriteFile(path, data, 0o644)).To(Succeed())
}

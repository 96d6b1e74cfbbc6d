package gitopsfreeze_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

const (
	// settle bounds how long the API server may take to enforce a policy or a param it was just
	// given (both load asynchronously) on a loaded machine.
	settle = 60 * time.Second
	poll   = 100 * time.Millisecond

	// fluxSystem is where Flux runs its controllers, each as a ServiceAccount of its own name
	// that Flux's install binds to cluster-admin (ClusterRoleBinding cluster-reconciler-flux-system).
	fluxSystem = "flux-system"
)

var (
	ctx   = context.Background()
	env   *framework.Env
	admin client.Client
	// kubeconfigs of the Flux controllers' ServiceAccounts: a token of each and nothing else,
	// as their pods run.
	kustomizeController, helmController string
)

func TestGitOpsFreeze(t *testing.T) {
	framework.RunSuite(t, "Write freezes with Flux's and Helm's own code suite")
}

var _ = BeforeSuite(func() {
	env = framework.StartEnv()
	admin = env.Client

	By("installing the write freeze policies (config/admission/freeze.yaml)")
	out, err := framework.AdminKubectl(env, framework.KubectlBinary()).Combined("apply", "--server-side", "-f",
		filepath.Join(framework.Root(), "config", "admission", "freeze.yaml"))
	Expect(err).NotTo(HaveOccurred(), out)

	By("the manager judges the CommandLocks (status.admission, the Locked condition)")
	mgr, err := env.StartManager(controller.SetupOptions{Queue: queue.DefaultConfig(), Workers: 2})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(mgr.Stop)

	By("Flux's controllers, as Flux installs them: ServiceAccounts bound to cluster-admin")
	Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fluxSystem}})).To(Succeed())
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-reconciler-" + fluxSystem},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
	}
	dir := GinkgoT().TempDir()
	for _, sa := range []string{"kustomize-controller", "helm-controller"} {
		Expect(admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: fluxSystem, Name: sa}})).To(Succeed())
		crb.Subjects = append(crb.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: fluxSystem, Name: sa})
	}
	Expect(admin.Create(ctx, crb)).To(Succeed())
	kustomizeController, err = env.WriteServiceAccountKubeconfig(ctx, dir, fluxSystem, "kustomize-controller")
	Expect(err).NotTo(HaveOccurred())
	helmController, err = env.WriteServiceAccountKubeconfig(ctx, dir, fluxSystem, "helm-controller")
	Expect(err).NotTo(HaveOccurred())
	for _, kc := range []string{kustomizeController, helmController} {
		c := clientFor(kc)
		Eventually(func() error {
			return c.List(ctx, &corev1.ConfigMapList{}, client.InNamespace("default"))
		}).WithTimeout(settle).WithPolling(poll).Should(Succeed(), "RBAC never let %s in", kc)
	}
})

// clientFor is a client that authenticates with the kubeconfig's ServiceAccount token.
func clientFor(kubeconfig string) client.Client {
	GinkgoHelper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	c, err := client.New(cfg, client.Options{Scheme: framework.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// prodNamespace is a fresh namespace labelled as the weekend freeze selects it.
func prodNamespace(label string) string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "shop-", Labels: map[string]string{label: "prod"}}}
	Expect(admin.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func() { _ = admin.Delete(ctx, ns) })
	return ns.Name
}

// weekendFreeze is docs/freeze-admission.md's weekend freeze, frozen by hand now (a window is
// the same freeze by the clock: test/admission runs windows): the namespaces labelled
// label=prod, for Flux's and Argo CD's controllers, with kinds when given.
func weekendFreeze(name, label string, resources ...locksv1.AdmissionResources) *locksv1.CommandLock {
	GinkgoHelper()
	cl := wrappers.MakeCommandLock(name).Locked("no production changes at the weekend").Admission(locksv1.AdmissionFreeze{
		Resources:         resources,
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{label: "prod"}},
		Subjects: &locksv1.AdmissionSubjects{ServiceAccounts: []string{
			fluxSystem + "/kustomize-controller", fluxSystem + "/helm-controller", "argocd/argocd-application-controller"}},
	}).Obj()
	cl.Generation = 0
	Expect(admin.Create(ctx, cl)).To(Succeed())
	DeferCleanup(func() { _ = admin.Delete(ctx, cl) })
	return cl
}

// awaitFrozen waits until the API server enforces cl (the policy's params load asynchronously)
// and the manager has written when the freeze began: c's create of probe (a fresh object with a
// generated name) is refused with the whole message.
func awaitFrozen(c client.Client, cl *locksv1.CommandLock, probe func() client.Object) {
	GinkgoHelper()
	Eventually(func() error {
		obj := probe()
		err := c.Create(ctx, obj)
		if err == nil {
			_ = admin.Delete(ctx, obj)
			return fmt.Errorf("probe admitted")
		}
		return err
	}).WithTimeout(settle).WithPolling(poll).Should(MatchError(ContainSubstring("writes are frozen by commandlock " + cl.Name + " (no production changes at the weekend) since ")))
}

// configMapProbe is a probe for awaitFrozen: a ConfigMap in ns.
func configMapProbe(ns string) func() client.Object {
	return func() client.Object {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "probe-"}}
	}
}

// thaw ends cl's manual freeze, as kubectl turnstile thaw does.
func thaw(cl *locksv1.CommandLock) {
	GinkgoHelper()
	Expect(admin.Patch(ctx, cl.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"locked":false}}`)))).To(Succeed())
}

// since is the time the manager recorded the freeze began, as the message gives it.
func since(cl *locksv1.CommandLock) string {
	GinkgoHelper()
	var got locksv1.CommandLock
	Expect(admin.Get(ctx, client.ObjectKeyFromObject(cl), &got)).To(Succeed())
	for _, c := range got.Status.Conditions {
		if c.Type == locksv1.ConditionLocked {
			return c.LastTransitionTime.UTC().Format(time.RFC3339)
		}
	}
	Fail("no Locked condition on commandlock " + cl.Name)
	return ""
}

// refusal is the policy's message for op of resource name in ns by the ServiceAccount sa of
// flux-system, during the weekend freeze cl.
func refusal(cl *locksv1.CommandLock, op, resource, name, ns, sa string) string {
	GinkgoHelper()
	return fmt.Sprintf("ValidatingAdmissionPolicy 'turnstile-freeze' with binding 'turnstile-freeze' denied request: "+
		"writes are frozen by commandlock %s (no production changes at the weekend) since %s until it is thawed: "+
		"%s of %s %s in namespace %s by system:serviceaccount:%s:%s is refused; "+
		"to get past it, a turnstile-admin of namespace %s can break glass (kubectl turnstile break-glass %s -n %s --reason ...), "+
		"or a platform admin can thaw it (kubectl turnstile thaw %s); kubectl turnstile why explains this message",
		cl.Name, since(cl), op, resource, name, ns, fluxSystem, sa, ns, cl.Name, ns, cl.Name)
}

func randSuffix() string { return fmt.Sprintf("%d", time.Now().UnixNano()%1e9) }

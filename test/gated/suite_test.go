// Package gated proves gated workloads (docs/gated-workloads.md) against a real kube-apiserver
// and etcd: `kubectl apply -k config/default` installs the shipped admission policies and
// roles, a manager runs in this process as its ServiceAccount (so only what config/rbac and the
// policies let the real manager do, it does), and alice, bound to the built-in edit role as a
// team member would be, creates Pods and Jobs carrying the annotation locks.turnstile.dev/lock.
//
// There is no kube-scheduler, kube-controller-manager or kubelet: a test marks a Pod Succeeded
// as the kubelet would, and a Job Complete as the Job controller would, each said where it is
// done; what is asserted is what the API server stores (gates, suspend, annotations, requests).
//
// Run it with `make test`, or alone with:
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.2-linux-amd64 go test -count=1 ./test/gated/
package gated

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/turnstile-dev/turnstile/internal/cache"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

const (
	settle = 60 * time.Second
	poll   = 100 * time.Millisecond

	managerNS = "turnstile-system"
	managerSA = "turnstile-controller-manager"
)

var (
	ctx   = context.Background()
	env   *framework.Env
	admin client.Client
	// mutating: the bundle installs the mutating policies (the API server serves
	// MutatingAdmissionPolicy); without them people write what they fill in by hand
	// (framework.FillAsUser) and the suite runs the same specs on the validating-only install.
	mutating bool
)

func TestGated(t *testing.T) { framework.RunSuite(t, "Turnstile gated workloads suite") }

var _ = BeforeSuite(func() {
	env = framework.StartEnv()
	admin = env.Client
	bundle, err := framework.BundleFor(env.Config)
	Expect(err).NotTo(HaveOccurred())
	mutating = bundle.Mutating != ""

	By("installing Turnstile as the docs say: kubectl apply -k " + bundle.String())
	out, err := framework.AdminKubectl(env, env.Kubectl()).Combined("apply", "--server-side", "-k", bundle.Dir)
	Expect(err).NotTo(HaveOccurred(), out)

	if !mutating {
		// The admin writes by hand what is not filled in (a request for bob records its creator).
		filled, err := framework.FillAsSelf(ctx, env.Client)
		Expect(err).NotTo(HaveOccurred())
		admin = filled
	}

	By("waiting until the API server enforces the workload policies (they load asynchronously)")
	ns := newNamespace()
	Eventually(func(g Gomega) {
		p := pod(ns, "probe", "acme/infra:probe")
		if mutating {
			g.Expect(admin.Create(ctx, p, client.DryRunAll)).To(Succeed())
			g.Expect(p.Spec.SchedulingGates).To(ContainElement(corev1.PodSchedulingGate{Name: workload.SchedulingGate}))
			j := job(ns, "probe", "acme/infra:probe")
			g.Expect(admin.Create(ctx, j, client.DryRunAll)).To(Succeed())
			g.Expect(j.Spec.Suspend).To(Equal(ptr.To(true)))
		} else {
			g.Expect(env.Client.Create(ctx, p, client.DryRunAll)).To(MatchError(ContainSubstring("turnstile-workload-held")))
		}
		g.Expect(admin.Create(ctx, pod(ns, "bad", "acme"), client.DryRunAll)).To(MatchError(ContainSubstring("turnstile-workload-annotations")))
		// The apply re-applied the CRDs: a client may not map LockRequest for a moment.
		lr := wrappers.MakeLockRequest("probe", ns).Lock("acme/infra", "probe", "default").Owner("bob", 0).Obj()
		g.Expect(admin.Create(ctx, lr, client.DryRunAll)).To(Succeed())
	}).WithTimeout(settle).WithPolling(poll).Should(Succeed())

	By("starting a manager that acts as its ServiceAccount")
	startManager()
})

// startManager runs the lock controllers and the workload controllers in this process, as the
// manager's ServiceAccount (impersonated by the admin), until the suite ends.
func startManager() {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: fmt.Sprintf("system:serviceaccount:%s:%s", managerNS, managerSA),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + managerNS},
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 framework.Scheme,
		Cache:                  cache.Options(),
		NewCache:               cache.New,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	mctx, cancel := context.WithCancel(context.Background())
	DeferCleanup(cancel)
	Expect(controller.Setup(mctx, mgr, controller.SetupOptions{Queue: queue.DefaultConfig()})).To(Succeed())
	Expect(workload.SetupWithManager(mgr)).To(Succeed())
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(mctx)).To(Succeed())
	}()
	Expect(mgr.GetCache().WaitForCacheSync(mctx)).To(BeTrue())
}

// newNamespace is a fresh namespace where alice may create and change Pods and Jobs and has the
// shipped turnstile-requester role: what a team member has.
func newNamespace() string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "team-"}}
	Expect(admin.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func() { _ = admin.Delete(ctx, ns) })
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "workloads"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		},
	}
	Expect(admin.Create(ctx, role)).To(Succeed())
	alice := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "alice"}}
	for _, rb := range []*rbacv1.RoleBinding{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "alice-workloads"}, Subjects: alice,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "workloads"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "alice-requester"}, Subjects: alice,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "turnstile-requester"}},
	} {
		Expect(admin.Create(ctx, rb)).To(Succeed())
	}
	Eventually(func(g Gomega) {
		for _, attrs := range []authorizationv1.ResourceAttributes{
			{Namespace: ns.Name, Verb: "create", Resource: "pods"},
			{Namespace: ns.Name, Verb: "create", Group: "batch", Resource: "jobs"},
			{Namespace: ns.Name, Verb: "create", Group: "locks.turnstile.dev", Resource: "lockrequests"},
		} {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: "alice", Groups: []string{"system:authenticated"}, ResourceAttributes: &attrs,
			}}
			g.Expect(admin.Create(ctx, review)).To(Succeed())
			g.Expect(review.Status.Allowed).To(BeTrue(), "%s %s: %s", attrs.Verb, attrs.Resource, review.Status.Reason)
		}
	}).WithTimeout(settle).WithPolling(poll).Should(Succeed(), "RBAC never gave alice her roles in %s", ns.Name)
	return ns.Name
}

// as is a client the API server authenticates as user.
func as(user string) client.Client {
	GinkgoHelper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: framework.Scheme})
	Expect(err).NotTo(HaveOccurred())
	if !mutating {
		return framework.FillAsUser(c, user)
	}
	return c
}

// pod is a Pod carrying the lock annotation value locks (nothing else of Turnstile's).
func pod(ns, name, locks string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{workload.AnnotationLock: locks}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "migrate", Image: "busybox", Command: []string{"sh", "-c", "echo migrating"}}},
		},
	}
}

// job is a Job whose Pod template carries the lock annotation value locks, as a Helm chart's
// Job would.
func job(ns, name, locks string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{workload.AnnotationLock: locks}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "apply", Image: "busybox", Command: []string{"sh", "-c", "echo applying"}}},
				},
			},
		},
	}
}

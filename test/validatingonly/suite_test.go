// Package validatingonly proves Turnstile's install for clusters that serve no
// MutatingAdmissionPolicy (Kubernetes 1.33, and 1.34 and 1.35 as they ship): `kubectl apply
// --server-side -k config/overlays/validating-only`, config/default without its mutating
// policies, on a real kube-apiserver and etcd. Nothing is filled in there, and nothing may go
// unprotected instead: what the mutating policies would have written (a request's owner, a
// delegate's creator, a holder Lease's creator, a workload's gate) is required by the
// validating policies, and each refusal shows the lines to add. Turnstile's own clients
// (pkg/client, pkg/workdir, the manager's workload requests) write those themselves, so they
// work as they do with the mutating policies; the manager's probe says which mode it found.
//
// It installs the overlay whatever the API server serves (an admin may choose it on 1.36 too,
// as the chart's admissionPolicies.mutating=off), so `make test` runs it on the default
// version; make test-versions runs it on every version of the range.
//
// Run it with `make test`, or alone with:
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.2-linux-amd64 go test -count=1 ./test/validatingonly/
package validatingonly

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/cache"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

const (
	settle = 60 * time.Second
	wait   = 30 * time.Second
	poll   = 100 * time.Millisecond

	managerNS = "turnstile-system"
	managerSA = "turnstile-controller-manager"
	createdBy = "locks.turnstile.dev/created-by"
)

var (
	ctx          = context.Background()
	env          *framework.Env
	admin        client.Client
	adminKubectl framework.Kubectl
	managerUser  = fmt.Sprintf("system:serviceaccount:%s:%s", managerNS, managerSA)
)

func TestValidatingOnly(t *testing.T) {
	framework.RunSuite(t, "Turnstile without MutatingAdmissionPolicy (config/overlays/validating-only) suite")
}

var _ = BeforeSuite(func() {
	root, err := framework.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	env = framework.StartEnv()
	admin = env.Client
	adminKubectl = framework.AdminKubectl(env, env.Kubectl())

	By("installing as docs/install.md says for a cluster without MutatingAdmissionPolicy")
	out, err := adminKubectl.Combined("apply", "--server-side", "-k", filepath.Join(root, "config", "overlays", "validating-only"))
	Expect(err).NotTo(HaveOccurred(), out)
	Expect(out).NotTo(ContainSubstring("mutatingadmissionpolicy"), "the overlay installs no mutating policy")

	By("waiting until the API server enforces the validating policies (they load asynchronously)")
	// Each probe is refused by a rule that no mutant of hack/mutants/versions.go takes out, so
	// a mutant is judged by the specs, not by this wait.
	ns := newNamespace()
	Eventually(func(g Gomega) {
		err := as("bob").Create(ctx, request(ns, "probe", "alice"), client.DryRunAll)
		g.Expect(err).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy 'turnstile-lockrequest-owner'")))
		unlabelled := gatedPod(ns, "probe")
		unlabelled.Annotations[createdBy] = "alice"
		unlabelled.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: workload.SchedulingGate}}
		err = as("alice").Create(ctx, unlabelled, client.DryRunAll)
		g.Expect(err).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy 'turnstile-workload-held'")))
		err = as("alice").Create(ctx, holderLease(ns, "probe", "bob"), client.DryRunAll)
		g.Expect(err).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy 'turnstile-holder-lease-creator'")))
	}).WithTimeout(settle).WithPolling(poll).Should(Succeed())

	By("starting a manager that acts as its ServiceAccount")
	startManager()
})

// startManager runs the lock and workload controllers in this process as the manager's
// ServiceAccount (impersonated), until the suite ends.
func startManager() {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	cfg.Impersonate = rest.ImpersonationConfig{UserName: managerUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + managerNS}}
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

// newNamespace is a fresh namespace where alice and bob are requesters and may create Pods and
// Jobs, atlantis (a user here) is a delegate, and dana is the turnstile-admin.
func newNamespace() string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "team-"}}
	Expect(admin.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func() { _ = admin.Delete(ctx, ns) })
	Expect(admin.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "workloads"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		},
	})).To(Succeed())
	bindings := map[string][]string{
		"Role/workloads":                  {"alice", "bob"},
		"ClusterRole/turnstile-requester": {"alice", "bob"},
		"ClusterRole/turnstile-delegate":  {"atlantis"},
		"ClusterRole/turnstile-admin":     {"dana"},
	}
	for ref, users := range bindings {
		kind, name, _ := cut(ref)
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, GenerateName: "binding-"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: name},
		}
		for _, u := range users {
			rb.Subjects = append(rb.Subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: u})
		}
		Expect(admin.Create(ctx, rb)).To(Succeed())
	}
	Eventually(func(g Gomega) {
		for user, attrs := range map[string]authorizationv1.ResourceAttributes{
			"alice":    {Namespace: ns.Name, Verb: "create", Resource: "pods"},
			"bob":      {Namespace: ns.Name, Verb: "create", Group: "locks.turnstile.dev", Resource: "lockrequests"},
			"atlantis": {Namespace: ns.Name, Verb: "delegate", Group: "locks.turnstile.dev", Resource: "lockrequests"},
			"dana":     {Namespace: ns.Name, Verb: "override", Group: "locks.turnstile.dev", Resource: "lockrequests"},
		} {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: []string{"system:authenticated"}, ResourceAttributes: &attrs,
			}}
			g.Expect(admin.Create(ctx, review)).To(Succeed())
			g.Expect(review.Status.Allowed).To(BeTrue(), "%s %s %s: %s", user, attrs.Verb, attrs.Resource, review.Status.Reason)
		}
	}).WithTimeout(settle).WithPolling(poll).Should(Succeed(), "RBAC never gave the team its roles in %s", ns.Name)
	return ns.Name
}

func cut(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// as is a client the API server authenticates as user (in system:authenticated).
func as(user string) client.WithWatch {
	GinkgoHelper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: framework.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// denial is the API server's message for a ValidatingAdmissionPolicy's denial.
func denial(object, policy, message string) string {
	return fmt.Sprintf("%s is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", object, policy, policy, message)
}

// expectDenied checks that err is the API server's Forbidden with exactly message.
func expectDenied(err error, message string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "want denied: %s", message)
	Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
	Expect(err.Error()).To(Equal(message))
}

// request is a LockRequest on one key, for owner (empty: unset).
func request(ns, name, owner string) *locksv1.LockRequest {
	return wrappers.MakeLockRequest(name, ns).Lock("acme/infra", "modules/"+name, "default").Owner(owner, 0).Obj()
}

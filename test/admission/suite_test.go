// Package admission proves the admission policies and roles Turnstile ships (config/admission,
// config/rbac) against a real kube-apiserver and etcd: `kubectl apply -k config/default`
// installs them, then people bound to the shipped roles - each an impersonating rest.Config,
// and the real kubectl with --as where the README shows a command - try every rule both ways.
// Each denial is checked word for word: it names the rule and says how to get the permission.
//
// No manager runs, except in the specs of #26's holes E and F (holes_test.go), which run the
// controllers in this process as the manager's ServiceAccount: every other case is decided by
// the API server alone (test/deployed drives the operator itself under the same policies).
//
// Run it with `make test`, or alone with:
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.2-linux-amd64 go test -count=1 ./test/admission/
package admission

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
	"github.com/turnstile-dev/turnstile/pkg/workdir"
)

const (
	// settle bounds how long the API server may take to start enforcing a policy it was just
	// given (policies load asynchronously) on a loaded machine.
	settle = 60 * time.Second
	poll   = 100 * time.Millisecond

	// The manager's ServiceAccount as config/rbac names it.
	managerSA = "system:serviceaccount:turnstile-system:turnstile-controller-manager"
	// createdBy is the annotation the policies stamp with a request's or Lease's creator.
	createdBy = "locks.turnstile.dev/created-by"
)

var (
	ctx          = context.Background()
	env          *framework.Env
	admin        client.Client
	adminKubectl framework.Kubectl
	// mutating: the API server serves MutatingAdmissionPolicy and the bundle installs the
	// mutating policies; without them, people write what they would fill in
	// (framework.FillAsUser), and the specs about filling in say what is refused instead.
	mutating bool
)

func TestAdmission(t *testing.T) { framework.RunSuite(t, "Turnstile admission policies suite") }

var _ = BeforeSuite(func() {
	env = framework.StartEnv()
	admin = env.Client
	adminKubectl = framework.AdminKubectl(env, env.Kubectl())

	bundle, err := framework.BundleFor(env.Config)
	Expect(err).NotTo(HaveOccurred())
	mutating = bundle.Mutating != ""
	if !mutating {
		filled, err := framework.FillAsSelf(ctx, env.Client)
		Expect(err).NotTo(HaveOccurred())
		admin = filled
	}

	By("installing Turnstile as README.md and docs/install.md say: kubectl apply -k " + bundle.String())
	out, err := kubectl("apply", "--server-side", "-k", bundle.Dir)
	Expect(err).NotTo(HaveOccurred(), out)

	By("waiting until the API server enforces every policy (they load asynchronously)")
	waitForPolicies()
})

// kubectl runs the real kubectl as the envtest admin (add --as to be someone else) and returns
// its combined output.
func kubectl(args ...string) (string, error) { return adminKubectl.Combined(args...) }

// as is a client that the API server authenticates as user, in groups (system:authenticated is
// added by the API server, as for any user): the admin impersonates them.
func as(user string, groups ...string) client.Client {
	GinkgoHelper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: framework.Scheme})
	Expect(err).NotTo(HaveOccurred())
	if !mutating {
		return framework.FillAsUser(c, user)
	}
	return c
}

// rawAs is as without framework.FillAsUser: the client writes only what it is given.
func rawAs(user string, groups ...string) client.Client {
	GinkgoHelper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c, err := client.New(cfg, client.Options{Scheme: framework.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// serviceAccount is the user name and groups the API server gives a ServiceAccount's token.
func serviceAccount(namespace, name string) (string, []string) {
	return fmt.Sprintf("system:serviceaccount:%s:%s", namespace, name),
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + namespace}
}

// team is a fresh namespace with people bound to the shipped roles there and nowhere else:
// alice and bob requesters, carol a viewer, the ServiceAccount atlantis a delegate, and dana
// the namespace's admin (turnstile-admin, as the built-in admin role aggregates it).
type team struct {
	ns                      string
	alice, bob, carol, dana client.Client
	atlantis                client.Client
	atlantisName            string
}

func newTeam() *team {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "team-"}}
	Expect(admin.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func() { _ = admin.Delete(ctx, ns) })
	t := &team{ns: ns.Name}
	bind(t.ns, "turnstile-requester", rbacv1.Subject{Kind: rbacv1.UserKind, Name: "alice"}, rbacv1.Subject{Kind: rbacv1.UserKind, Name: "bob"})
	bind(t.ns, "turnstile-viewer", rbacv1.Subject{Kind: rbacv1.UserKind, Name: "carol"})
	bind(t.ns, "turnstile-delegate", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "atlantis", Namespace: t.ns})
	bind(t.ns, "turnstile-admin", rbacv1.Subject{Kind: rbacv1.UserKind, Name: "dana"})
	t.alice, t.bob, t.carol, t.dana = as("alice"), as("bob"), as("carol"), as("dana")
	var groups []string
	t.atlantisName, groups = serviceAccount(t.ns, "atlantis")
	t.atlantis = as(t.atlantisName, groups...)
	return t
}

// bind binds a shipped ClusterRole to subjects in namespace ns with a RoleBinding.
func bind(ns, clusterRole string, subjects ...rbacv1.Subject) {
	GinkgoHelper()
	for i := range subjects {
		if subjects[i].Kind != rbacv1.ServiceAccountKind {
			subjects[i].APIGroup = rbacv1.GroupName
		}
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: clusterRole + "-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   subjects,
	}
	Expect(admin.Create(ctx, rb)).To(Succeed())
	for _, subj := range subjects {
		waitAuthorized(ns, clusterRole, subj)
	}
}

// waitAuthorized waits until RBAC grants subj, in namespace ns, a rule of clusterRole. The
// authorizer learns of a new RoleBinding from its watch a moment after the create; until then
// the subject's requests are denied by RBAC, before any admission policy is asked.
func waitAuthorized(ns, clusterRole string, subj rbacv1.Subject) {
	GinkgoHelper()
	var role rbacv1.ClusterRole
	Expect(admin.Get(ctx, client.ObjectKey{Name: clusterRole}, &role)).To(Succeed())
	var attrs *authorizationv1.ResourceAttributes
	for _, r := range role.Rules {
		if len(r.ResourceNames) == 0 && len(r.APIGroups) > 0 && len(r.Resources) > 0 && len(r.Verbs) > 0 {
			attrs = &authorizationv1.ResourceAttributes{Namespace: ns, Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: r.Resources[0]}
			break
		}
	}
	Expect(attrs).NotTo(BeNil(), "clusterrole %s has no rule to check a binding by", clusterRole)
	spec := authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: attrs}
	switch subj.Kind {
	case rbacv1.ServiceAccountKind:
		spec.User = fmt.Sprintf("system:serviceaccount:%s:%s", subj.Namespace, subj.Name)
		spec.Groups = []string{"system:serviceaccounts", "system:serviceaccounts:" + subj.Namespace, "system:authenticated"}
	case rbacv1.GroupKind:
		spec.User, spec.Groups = "member-of-"+subj.Name, []string{subj.Name, "system:authenticated"}
	default:
		spec.User, spec.Groups = subj.Name, []string{"system:authenticated"}
	}
	Eventually(func(g Gomega) {
		review := &authorizationv1.SubjectAccessReview{Spec: spec}
		g.Expect(admin.Create(ctx, review)).To(Succeed())
		g.Expect(review.Status.Allowed).To(BeTrue(), "%s", review.Status.Reason)
	}).WithTimeout(settle).WithPolling(poll).Should(Succeed(), "RBAC never granted %s %s the role %s in %s", subj.Kind, subj.Name, clusterRole, ns)
}

// request is a LockRequest on one key of namespace ns, for owner (empty: unset).
func request(ns, name, owner string) *locksv1.LockRequest {
	return wrappers.MakeLockRequest(name, ns).Lock("acme/infra", "modules/"+name, "default").Owner(owner, 0).Obj()
}

// holderLease is a runner's holder Lease as pkg/workdir's heartbeat makes it: labelled
// locks.turnstile.dev/role=workdir-guard.
func holderLease(ns, name string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{workdir.LabelRole: workdir.RoleWorkdirGuard}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("runner-1/4242"),
			LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime:            ptr.To(metav1.NewMicroTime(time.Now())),
		},
	}
}

// denial is the message the API server gives for a ValidatingAdmissionPolicy's denial of an
// operation on object ("lockrequests.locks.turnstile.dev \"x\""), as kubectl and the Go client
// show it.
func denial(object, policy, message string) string {
	return fmt.Sprintf("%s is forbidden: ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", object, policy, policy, message)
}

func lockRequestRef(name string) string {
	return fmt.Sprintf("lockrequests.locks.turnstile.dev %q", name)
}

// expectDenied checks that err is the API server's Forbidden with exactly message.
func expectDenied(err error, message string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "want denied: %s", message)
	Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
	Expect(err.Error()).To(Equal(message))
}

// expectDeniedByOneOf is expectDenied for a write two policies refuse: the API server names the
// first that denies in an order of its own (a map's: k8s.io/apiserver's policy source), so
// either message is the answer.
func expectDeniedByOneOf(err error, messages ...string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "want denied: one of %q", messages)
	Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
	Expect(err.Error()).To(BeElementOf(messages))
}

// waitForPolicies polls, for each shipped policy, a dry-run that it must deny or change until
// it does: policies and bindings take effect asynchronously after they are created.
func waitForPolicies() {
	GinkgoHelper()
	t := newTeam()
	mine := request(t.ns, "warmup", "")
	Eventually(func() error { return t.alice.Create(ctx, mine) }).WithTimeout(settle).WithPolling(poll).Should(Succeed(),
		"the mutating policy never filled in the owner")
	Expect(mine.Spec.Holder.Owner).To(Equal("alice"))
	Eventually(func() string {
		_ = admin.Get(ctx, client.ObjectKeyFromObject(mine), mine)
		return mine.Annotations[createdBy]
	}).
		WithTimeout(settle).WithPolling(poll).Should(Equal("alice"))
	if !mutating {
		waitForValidatingPolicies(t, mine)
		return
	}
	checks := map[string]func() error{
		"turnstile-lockrequest-owner": func() error {
			return t.bob.Create(ctx, request(t.ns, "not-mine", "alice"), client.DryRunAll)
		},
		"turnstile-lockrequest-changes": func() error {
			return t.bob.Delete(ctx, mine.DeepCopy(), client.DryRunAll)
		},
		"turnstile-lockrequest-bypass-freeze": func() error {
			lr := request(t.ns, "bypass", "alice")
			lr.Spec.BypassFreeze = &locksv1.FreezeBypass{Reason: "warmup"}
			return t.alice.Create(ctx, lr, client.DryRunAll)
		},
		"turnstile-lockrequest-priority": func() error {
			lr := request(t.ns, "critical", "alice")
			lr.Spec.Priority = locksv1.PriorityCritical
			return t.alice.Create(ctx, lr, client.DryRunAll)
		},
	}
	for policy, check := range checks {
		Eventually(check).WithTimeout(settle).WithPolling(poll).Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy '"+policy+"'")),
			"policy %s never took effect", policy)
	}
	lease := holderLease(t.ns, "warmup")
	Expect(t.alice.Create(ctx, lease)).To(Succeed())
	Eventually(func() error {
		l := holderLease(t.ns, "warmup-probe")
		if err := t.alice.Create(ctx, l, client.DryRunAll); err != nil {
			return err
		}
		if l.Annotations[createdBy] != "alice" {
			return fmt.Errorf("lease not stamped yet: %v", l.Annotations)
		}
		return nil
	}).WithTimeout(settle).WithPolling(poll).Should(Succeed(), "the mutating Lease policy never took effect")
	Eventually(func() error {
		var l = holderLease(t.ns, "warmup")
		_ = t.alice.Get(ctx, client.ObjectKeyFromObject(l), l)
		if l.Annotations[createdBy] != "alice" {
			// Created before the mutating policy ran: recreate.
			Expect(admin.Delete(ctx, l)).To(Succeed())
			Expect(t.alice.Create(ctx, holderLease(t.ns, "warmup"))).To(Succeed())
			return fmt.Errorf("recreated the lease")
		}
		return t.bob.Delete(ctx, l, client.DryRunAll)
	}).WithTimeout(settle).WithPolling(poll).Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy 'turnstile-holder-lease'")),
		"policy turnstile-holder-lease never took effect")
}

// waitForValidatingPolicies is waitForPolicies where no mutating policy is installed: each
// validating policy's dry-run denial, with what would be filled in written by hand
// (framework.FillAsUser), and the check of what would be filled in.
func waitForValidatingPolicies(t *team, mine *locksv1.LockRequest) {
	GinkgoHelper()
	checks := map[string]func() error{
		"turnstile-lockrequest-owner":   func() error { return t.bob.Create(ctx, request(t.ns, "not-mine", "alice"), client.DryRunAll) },
		"turnstile-lockrequest-changes": func() error { return t.bob.Delete(ctx, mine.DeepCopy(), client.DryRunAll) },
		"turnstile-lockrequest-bypass-freeze": func() error {
			lr := request(t.ns, "bypass", "alice")
			lr.Spec.BypassFreeze = &locksv1.FreezeBypass{Reason: "warmup"}
			return t.alice.Create(ctx, lr, client.DryRunAll)
		},
		"turnstile-lockrequest-priority": func() error {
			lr := request(t.ns, "critical", "alice")
			lr.Spec.Priority = locksv1.PriorityCritical
			return t.alice.Create(ctx, lr, client.DryRunAll)
		},
		"turnstile-holder-lease-creator": func() error {
			l := holderLease(t.ns, "forged")
			l.Annotations = map[string]string{createdBy: "bob"}
			return t.alice.Create(ctx, l, client.DryRunAll)
		},
	}
	for policy, check := range checks {
		Eventually(check).WithTimeout(settle).WithPolling(poll).Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy '"+policy+"'")),
			"policy %s never took effect", policy)
	}
	lease := holderLease(t.ns, "warmup")
	Expect(t.alice.Create(ctx, lease)).To(Succeed())
	Eventually(func() error { return t.bob.Delete(ctx, lease.DeepCopy(), client.DryRunAll) }).WithTimeout(settle).WithPolling(poll).
		Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy 'turnstile-holder-lease'")), "policy turnstile-holder-lease never took effect")
}

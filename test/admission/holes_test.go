package admission

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
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
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// The specs of #26's holes E and F run the manager too: in this process, as its ServiceAccount
// (the API server authenticates every request of the manager's as that account, so the shipped
// RBAC and the admission policies judge it as they judge the deployed manager).

// startManagerAsServiceAccount runs the Turnstile controllers until the spec ends, as
// system:serviceaccount:turnstile-system:turnstile-controller-manager.
func startManagerAsServiceAccount() {
	GinkgoHelper()
	DeferCleanup(runManagerAsServiceAccount())
}

// runManagerAsServiceAccount runs the Turnstile controllers as the manager's ServiceAccount
// until the returned stop is called (a spec that stops and starts the manager on its way).
func runManagerAsServiceAccount() (stop func()) {
	GinkgoHelper()
	user, groups := serviceAccount("turnstile-system", "turnstile-controller-manager")
	Expect(user).To(Equal(managerSA))
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	cfg.QPS, cfg.Burst = 1000, 2000
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 framework.Scheme,
		Cache:                  cache.Options(),
		NewCache:               cache.New,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	mctx, cancel := context.WithCancel(ctx)
	Expect(controller.Setup(mctx, mgr, controller.SetupOptions{Workers: 2, Queue: queue.DefaultConfig()})).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	stopped := false
	return func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		Eventually(done, settle).Should(Receive(BeNil()))
	}
}

// outcome is a request's phase and its Granted condition's reason and message.
func outcome(ns, name string) func() string {
	return func() string {
		var lr locksv1.LockRequest
		if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &lr); err != nil {
			return err.Error()
		}
		c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
		if c == nil {
			return string(lr.Status.Phase)
		}
		return fmt.Sprintf("%s %s %s", lr.Status.Phase, c.Reason, c.Message)
	}
}

const stripFinalizers = `{"metadata":{"finalizers":null}}`

// finalizerDenial is the finalizer policy's refusal of user for ProjectLock name in ns, as
// kubectl prints it.
func finalizerDenial(ns, name, user string) string {
	return "Error from server (Forbidden): " + denial(fmt.Sprintf("projectlocks.locks.turnstile.dev %q", name), "turnstile-projectlock-finalizer",
		fmt.Sprintf("the finalizer locks.turnstile.dev/release-holders of projectlock %s is removed only by the Turnstile manager (%s), once every holder of the lock has been told it lost it; you are %s. "+
			"To force-unlock, delete the ProjectLock (kubectl delete projectlock %s -n %s, or the dashboard force-unlock button) and let the manager finish: "+
			"removing the finalizer by hand would hand the lock on while its holder may still be at work", name, managerSA, user, name, ns))
}

var _ = Describe("Hole E: a ProjectLock's finalizer", func() {
	target := locksv1.LockTarget{Repo: "acme/infra", Path: "modules/vpc", Workspace: "default"}
	withFinalizer := func(ns string) *locksv1.ProjectLock {
		GinkgoHelper()
		pl := wrappers.MakeProjectLock(ns, target, lockkey.Name(target)).Obj()
		pl.Finalizers = []string{locksv1.ReleaseHoldersFinalizer}
		Expect(admin.Create(ctx, pl)).To(Succeed())
		return pl
	}
	finalizers := func(ns, name string) func() []string {
		return func() []string {
			var pl locksv1.ProjectLock
			if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pl); err != nil {
				return []string{err.Error()}
			}
			return pl.Finalizers
		}
	}

	It("is removed only by the manager's ServiceAccount: kubectl patch as a cluster admin is denied, as the manager allowed, and anyone's in a namespace being deleted", func() {
		t := newTeam()
		pl := withFinalizer(t.ns)
		By("a cluster admin strips the finalizer as a stuck one is stripped: kubectl patch ... finalizers:null")
		// The policy loads asynchronously: wait with a server-side dry run, which admission judges
		// but which changes nothing.
		Eventually(func() string {
			out, _ := kubectl("patch", "projectlock", pl.Name, "-n", t.ns, "--type=merge", "-p", stripFinalizers, "--dry-run=server")
			return out
		}).WithTimeout(settle).WithPolling(poll).Should(ContainSubstring("ValidatingAdmissionPolicy 'turnstile-projectlock-finalizer'"))
		out, err := kubectl("patch", "projectlock", pl.Name, "-n", t.ns, "--type=merge", "-p", stripFinalizers)
		Expect(err).To(HaveOccurred())
		Expect(out).To(Equal(finalizerDenial(t.ns, pl.Name, "turnstile-admin") + "\n"))
		Expect(finalizers(t.ns, pl.Name)()).To(Equal([]string{locksv1.ReleaseHoldersFinalizer}))

		By("the namespace's turnstile-admin cannot either")
		err = patch(t.dana, pl.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(stripFinalizers)))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)

		By("the manager's ServiceAccount removes it")
		_, groups := serviceAccount("turnstile-system", "turnstile-controller-manager")
		args := []string{"--as", managerSA}
		for _, g := range groups {
			args = append(args, "--as-group", g)
		}
		out, err = kubectl(append(args, "patch", "projectlock", pl.Name, "-n", t.ns, "--type=merge", "-p", stripFinalizers)...)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(finalizers(t.ns, pl.Name)()).To(BeEmpty())

		By("in a namespace being deleted anyone may: Kubernetes' cleanup is never stuck on a lock")
		gone := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "going-"}}
		Expect(admin.Create(ctx, gone)).To(Succeed())
		pl = withFinalizer(gone.Name)
		Expect(admin.Delete(ctx, gone)).To(Succeed())
		out, err = kubectl("patch", "projectlock", pl.Name, "-n", gone.Name, "--type=merge", "-p", stripFinalizers)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(finalizers(gone.Name, pl.Name)()).To(Or(BeEmpty(), ContainElement(ContainSubstring("not found"))))
	})

	It("still lets a force-unlock finish: the manager, as its ServiceAccount, tells the holder and removes it", func() {
		t := newTeam()
		startManagerAsServiceAccount()
		lr := wrappers.MakeLockRequest("vpc", t.ns).Lock(target.Repo, target.Path, target.Workspace).Owner("", 0).Obj()
		Expect(t.alice.Create(ctx, lr)).To(Succeed())
		Eventually(framework.PhaseOf(ctx, admin, t.ns, "vpc")).WithTimeout(settle).WithPolling(poll).Should(Equal(locksv1.PhaseGranted))
		Expect(finalizers(t.ns, lockkey.Name(target))()).To(Equal([]string{locksv1.ReleaseHoldersFinalizer}))

		By("dana, the namespace's admin, force-unlocks: she deletes the ProjectLock")
		pl := &locksv1.ProjectLock{}
		pl.Namespace, pl.Name = t.ns, lockkey.Name(target)
		Expect(t.dana.Delete(ctx, pl)).To(Succeed())
		Eventually(outcome(t.ns, "vpc")).WithTimeout(settle).WithPolling(poll).Should(HavePrefix("Released ForceUnlocked "))
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(pl), &locksv1.ProjectLock{}))
		}).WithTimeout(settle).WithPolling(poll).Should(BeTrue(), "the manager removed the finalizer and the ProjectLock went")
	})
})

var _ = Describe("Hole F: a holder Lease", func() {
	// lease is a holder Lease that does not lapse while the spec runs.
	lease := func(ns, name string, labelled bool) *coordinationv1.Lease {
		l := holderLease(ns, name)
		l.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
		if !labelled {
			l.Labels = nil
		}
		return l
	}
	onLease := func(ns, name, path, leaseName string) *locksv1.LockRequest {
		return wrappers.MakeLockRequest(name, ns).Lock("acme/infra", path, "default").Owner("", 0).Lease(leaseName).Obj()
	}
	fix := func(user string) string {
		return "create a holder Lease as " + user + " with the label locks.turnstile.dev/role (for example locks.turnstile.dev/role=workdir-guard, " +
			"as kubectl turnstile run and pkg/workdir's heartbeat do) and name it in a new request"
	}

	It("protects a request only when the policies protect it: bob's hand-made Lease is refused, alice's too, his own labelled one holds", func() {
		t := newTeam()
		startManagerAsServiceAccount()

		By("bob makes a Lease by hand, without the label, and names it: he is not granted")
		Expect(t.bob.Create(ctx, lease(t.ns, "bobs-laptop", false))).To(Succeed())
		Expect(t.bob.Create(ctx, onLease(t.ns, "bob-vpc", "modules/vpc", "bobs-laptop"))).To(Succeed())
		Eventually(outcome(t.ns, "bob-vpc")).WithTimeout(settle).WithPolling(poll).Should(Equal(fmt.Sprintf(
			"Failed HolderLeaseUnprotected holder Lease %s/bobs-laptop is not protected: it has no label locks.turnstile.dev/role, "+
				"so anyone who may delete Leases in %s could release this request's locks; %s", t.ns, t.ns, fix("bob"))))

		By("which is right: alice, another requester, may delete that Lease")
		Expect(t.alice.Delete(ctx, lease(t.ns, "bobs-laptop", false))).To(Succeed())

		By("alice's labelled Lease is hers: bob naming it is not granted either")
		Expect(t.alice.Create(ctx, lease(t.ns, "alices-runner", true))).To(Succeed())
		Expect(t.bob.Create(ctx, onLease(t.ns, "bob-dns", "modules/dns", "alices-runner"))).To(Succeed())
		Eventually(outcome(t.ns, "bob-dns")).WithTimeout(settle).WithPolling(poll).Should(Equal(fmt.Sprintf(
			"Failed HolderLeaseUnprotected holder Lease %s/alices-runner was created by alice, not by this request's owner bob: "+
				"it is not this holder's to renew, and its creator could release this request's locks; %s", t.ns, fix("bob"))))

		By("bob's own labelled Lease: granted, and alice can neither delete it nor so release him")
		Expect(t.bob.Create(ctx, lease(t.ns, "bobs-runner", true))).To(Succeed())
		Expect(t.bob.Create(ctx, onLease(t.ns, "bob-net", "modules/net", "bobs-runner"))).To(Succeed())
		Eventually(framework.PhaseOf(ctx, admin, t.ns, "bob-net")).WithTimeout(settle).WithPolling(poll).Should(Equal(locksv1.PhaseGranted))
		err := t.alice.Delete(ctx, lease(t.ns, "bobs-runner", true))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(framework.PhaseOf(ctx, admin, t.ns, "bob-net")()).To(Equal(locksv1.PhaseGranted))

		By("a delegate's Lease holds for the requests it creates for others")
		Expect(t.atlantis.Create(ctx, lease(t.ns, "atlantis-runner", true))).To(Succeed())
		forAlice := onLease(t.ns, "alice-db", "modules/db", "atlantis-runner")
		forAlice.Spec.Holder.Owner = "alice"
		Expect(t.atlantis.Create(ctx, forAlice)).To(Succeed())
		Eventually(framework.PhaseOf(ctx, admin, t.ns, "alice-db")).WithTimeout(settle).WithPolling(poll).Should(Equal(locksv1.PhaseGranted))
	})
})

package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
	"github.com/turnstile-dev/turnstile/pkg/workdir"
)

// Hole F of #26 (test/admission shows it with the shipped policies and roles): a request the
// admission policies admitted (they stamp locks.turnstile.dev/created-by on it) holds only on a
// holder Lease they protect. This suite installs no policies, so it stamps the annotations as
// they would.
const createdBy = "locks.turnstile.dev/created-by"

// protectedLease is a holder Lease as the policies leave it when creator creates it with the
// label. labelled false is one made without the label, which the policies neither record nor
// protect, annotated by hand as if creator had made it: only the label makes the record real.
func protectedLease(ns, name, creator string, labelled bool) {
	GinkgoHelper()
	lease := holderLease(ns, name, time.Hour)
	patch := client.MergeFrom(lease.DeepCopy())
	lease.Annotations = map[string]string{createdBy: creator}
	if labelled {
		lease.Labels = map[string]string{workdir.LabelRole: workdir.RoleWorkdirGuard}
	}
	Expect(k8s.Patch(ctx, lease, patch)).To(Succeed())
}

func grantedCondition(ns, name string) func() string {
	return func() string {
		lr := get(ns, name)
		c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
		if c == nil {
			return string(lr.Status.Phase)
		}
		return string(lr.Status.Phase) + " " + c.Reason + " " + c.Message
	}
}

var _ = Describe("Holder Lease protection", func() {
	It("fails a request admitted under the policies whose Lease they do not protect, and nothing where they are not installed (the protection check)", func() {
		ns := newNamespace()
		protectedLease(ns, "by-hand", "bob", false)
		protectedLease(ns, "alices", "alice", true)
		protectedLease(ns, "bobs", "bob", true)
		on := func(name, path, lease string, stamped bool) *locksv1.LockRequest {
			lr := MakeLockRequest(name, ns).Lock(vpc.Repo, path, vpc.Workspace).Owner("bob", 0).Lease(lease).Obj()
			if stamped {
				lr.Annotations = map[string]string{createdBy: "bob"}
			}
			return lr
		}
		create(on("unlabelled", "modules/a", "by-hand", true), on("not-his", "modules/b", "alices", true),
			on("his", "modules/c", "bobs", true), on("no-policies", "modules/d", "by-hand", false))
		fix := "create a holder Lease as bob with the label locks.turnstile.dev/role (for example locks.turnstile.dev/role=workdir-guard, " +
			"as kubectl turnstile run and pkg/workdir's heartbeat do) and name it in a new request"
		Eventually(grantedCondition(ns, "unlabelled"), timeout, interval).Should(Equal("Failed HolderLeaseUnprotected holder Lease " + ns +
			"/by-hand is not protected: it has no label locks.turnstile.dev/role, so anyone who may delete Leases in " + ns + " could release this request's locks; " + fix))
		Eventually(grantedCondition(ns, "not-his"), timeout, interval).Should(Equal("Failed HolderLeaseUnprotected holder Lease " + ns +
			"/alices was created by alice, not by this request's owner bob: it is not this holder's to renew, and its creator could release this request's locks; " + fix))
		expectPhase(ns, "his", locksv1.PhaseGranted)
		expectPhase(ns, "no-policies", locksv1.PhaseGranted)
	})

	It("reads a holder Lease the cache shows unprotected live before it fails the request (the live protection read)", func() {
		ns := newNamespace()
		protectedLease(ns, "runner", "bob", true)
		create(req("h", ns).Owner("alice", 1).Obj())
		expectPhase(ns, "h", locksv1.PhaseGranted)
		w := req("w", ns).Owner("bob", 2).Lease("runner").Obj()
		w.Annotations = map[string]string{createdBy: "bob"}
		create(w)
		expectPhase(ns, "w", locksv1.PhasePending)

		// A reconciler whose cache shows the Lease as an unlabelled one it replaced.
		var live = holderLeaseGet(ns, "runner")
		stale := live.DeepCopy()
		stale.Labels, stale.Annotations = nil, nil
		r := controller.NewLockReconciler(laggingCache{Client: k8s, stale: []client.Object{stale}}, k8s, nopRecorder{})
		_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: lockkey.Name(vpc)}})
		Expect(err).NotTo(HaveOccurred())
		Expect(get(ns, "w").Status.Phase).To(Equal(locksv1.PhasePending), "a request was failed on a stale view of its Lease")
	})
})

func holderLeaseGet(ns, name string) *coordinationv1.Lease {
	GinkgoHelper()
	var l coordinationv1.Lease
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &l)).To(Succeed())
	return &l
}

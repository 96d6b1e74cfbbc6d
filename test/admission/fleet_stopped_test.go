package admission

import (
	"fmt"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// A spoke's grant ends on the hub only once its spoke has stopped it: the agent writes
// fleet.turnstile.dev/stopped: "<token>" on its hub request, and the hub's lock controller holds
// a released spoke grant until then. A DELETE cannot be held back (no finalizer), so
// turnstile-fleet-stopped (config/fleet) refuses it until the spoke has confirmed. The test
// plays the hub's manager: it writes the status as the admin, through the status subresource.
var _ = Describe("A spoke's grant on the hub, deleted before its spoke confirmed the stop", Ordered, func() {
	const (
		policy    = "turnstile-fleet-stopped"
		stoppedAt = "fleet.turnstile.dev/stopped"
		token     = int64(1700000000042)
	)
	var (
		t           *team
		eu, certEU  client.Client
		spokeGroups = []string{"system:serviceaccounts", "system:serviceaccounts:turnstile-fleet"}
		mirrored    func(name string) *locksv1.LockRequest
		setPhase    func(lr *locksv1.LockRequest, phase locksv1.LockRequestPhase)
		annotate    func(c client.Client, lr *locksv1.LockRequest, stopped string) error
		unconfirmed func(name, stopped string) string
	)

	BeforeAll(func() {
		installFleet()
		var cm corev1.ConfigMap
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: "turnstile-fleet", Name: "turnstile-fleet-members"}, &cm)).To(Succeed())
		cm.Data = map[string]string{"eu-west-1": `{"labels":{"region":"eu"}}`, "us-east-1": `{"labels":{"region":"us"}}`}
		Expect(admin.Update(ctx, &cm)).To(Succeed())

		t = newTeam()
		bind(t.ns, "turnstile-fleet-spoke",
			rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "system:serviceaccounts:turnstile-fleet"},
			rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "turnstile:spokes"})
		eu = as("system:serviceaccount:turnstile-fleet:spoke-eu-west-1", spokeGroups...)
		certEU = as("eu-west-1", "turnstile:spokes")

		mirrored = func(name string) *locksv1.LockRequest {
			lr := wrappers.MakeLockRequest("eu-west-1."+name, t.ns).Lock("acme/infra", "modules/"+name, "default").
				Owner("alice", 0).Session("job/" + name).Cluster("eu-west-1").Lease("spoke-eu-west-1").Obj()
			lr.Labels = map[string]string{"fleet.turnstile.dev/cluster": "eu-west-1"}
			lr.Annotations = map[string]string{locksv1.AnnotationConfirmsStops: "true"}
			return lr
		}
		// setPhase writes the status as the hub's manager would: the phase, and the token of a grant.
		setPhase = func(lr *locksv1.LockRequest, phase locksv1.LockRequestPhase) {
			GinkgoHelper()
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(lr), lr)).To(Succeed())
			lr.Status.Phase, lr.Status.FencingToken = phase, token
			Expect(admin.Status().Update(ctx, lr)).To(Succeed())
		}
		annotate = func(c client.Client, lr *locksv1.LockRequest, stopped string) error {
			p := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, stoppedAt, stopped)
			return c.Patch(ctx, lr.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(p)))
		}
		unconfirmed = func(name, stopped string) string {
			stale := ""
			if stopped != "" {
				stale = fmt.Sprintf(` (its fleet.turnstile.dev/stopped %q is not this grant's token %d)`, stopped, token)
			}
			return denial(lockRequestRef(name), policy, fmt.Sprintf("lockrequest %[1]s/%[2]s is held by a holder in cluster eu-west-1: "+
				"the hub hands it on only once that spoke has stopped its holder%[3]s. "+
				`Release it instead (kubectl -n %[1]s patch lockrequest %[2]s --type merge -p '{"spec":{"release":true}}'): `+
				"it is handed on when cluster eu-west-1 confirms the stop, or within its hub Lease's duration if eu-west-1 is unreachable; "+
				"to end it at once, delete that spoke's hub Lease %[1]s/spoke-eu-west-1", t.ns, name, stale))
		}

		By("waiting until the API server enforces " + policy)
		warmupTarget := mirrored("warmup")
		Expect(eu.Create(ctx, warmupTarget)).To(Succeed())
		setPhase(warmupTarget, locksv1.PhaseGranted)
		Eventually(func() error { return eu.Delete(ctx, warmupTarget.DeepCopy(), client.DryRunAll) }).
			WithTimeout(settle).WithPolling(poll).Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy '"+policy+"'")),
			"policy %s never took effect", policy)
	})

	It("refuses deleting a spoke's Granted hub request until its stopped annotation is the grant's token", func() {
		held := mirrored("held")
		Expect(eu.Create(ctx, held)).To(Succeed())
		setPhase(held, locksv1.PhaseGranted)

		By("without the annotation: the spoke itself, and the namespace's admin, are refused")
		expectDenied(eu.Delete(ctx, held.DeepCopy()), unconfirmed(held.Name, ""))
		expectDenied(t.dana.Delete(ctx, held.DeepCopy()), unconfirmed(held.Name, ""))

		By("with a stale token (an earlier grant's stop): refused, and the message says so")
		Expect(annotate(eu, held, strconv.FormatInt(token-1, 10))).To(Succeed())
		expectDenied(eu.Delete(ctx, held.DeepCopy()), unconfirmed(held.Name, strconv.FormatInt(token-1, 10)))
		expectDenied(t.dana.Delete(ctx, held.DeepCopy()), unconfirmed(held.Name, strconv.FormatInt(token-1, 10)))

		By("the message's way out is admitted: the admin releases it")
		Expect(patch(t.dana, held.DeepCopy(), release)).To(Succeed())

		By("with the grant's token: deleted")
		Expect(annotate(eu, held, strconv.FormatInt(token, 10))).To(Succeed())
		Expect(eu.Delete(ctx, held.DeepCopy())).To(Succeed())

		By("a spoke by client certificate (created-by is the cluster's name) is held to the same")
		byCert := mirrored("by-cert")
		Expect(certEU.Create(ctx, byCert)).To(Succeed())
		setPhase(byCert, locksv1.PhaseGranted)
		expectDenied(certEU.Delete(ctx, byCert.DeepCopy()), unconfirmed(byCert.Name, ""))
		Expect(annotate(certEU, byCert, strconv.FormatInt(token, 10))).To(Succeed())
		Expect(certEU.Delete(ctx, byCert.DeepCopy())).To(Succeed())
	})

	It("lets everything else be deleted: a waiter, a final request, a keep-running grant, an older agent's grant, a hub user's own grant", func() {
		By("a spoke's waiter (Pending: nothing to stop)")
		pending := mirrored("pending")
		Expect(eu.Create(ctx, pending)).To(Succeed())
		setPhase(pending, locksv1.PhasePending)
		Expect(eu.Delete(ctx, pending.DeepCopy())).To(Succeed())

		By("a spoke's final request (Released)")
		final := mirrored("final")
		Expect(eu.Create(ctx, final)).To(Succeed())
		setPhase(final, locksv1.PhaseReleased)
		Expect(eu.Delete(ctx, final.DeepCopy())).To(Succeed())

		By("a spoke's keep-running grant (no hub Lease: its spoke does not stop it)")
		keep := mirrored("keep")
		keep.Spec.Holder.Lease = ""
		keep.Annotations = map[string]string{"fleet.turnstile.dev/on-partition": "keep-running"}
		Expect(eu.Create(ctx, keep)).To(Succeed())
		setPhase(keep, locksv1.PhaseGranted)
		Expect(eu.Delete(ctx, keep.DeepCopy())).To(Succeed())

		By("a spoke's grant made by an older agent, which says no stops (the hub hands it on when it is released)")
		older := mirrored("older")
		delete(older.Annotations, locksv1.AnnotationConfirmsStops)
		Expect(eu.Create(ctx, older)).To(Succeed())
		setPhase(older, locksv1.PhaseGranted)
		Expect(eu.Delete(ctx, older.DeepCopy())).To(Succeed())

		By("a hub user's own grant for a holder in eu-west-1 on its Lease (a delegate made it: no spoke created it)")
		hubs := request(t.ns, "hubs", "alice")
		hubs.Spec.Holder.Cluster, hubs.Spec.Holder.Lease = "eu-west-1", "spoke-eu-west-1"
		Expect(t.atlantis.Create(ctx, hubs)).To(Succeed())
		setPhase(hubs, locksv1.PhaseGranted)
		Expect(t.atlantis.Delete(ctx, hubs.DeepCopy())).To(Succeed())
	})
})

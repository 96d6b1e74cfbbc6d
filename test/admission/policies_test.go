package admission

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/compat"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// Each It is a row of README.md's "Who may do what" table, named there.

var (
	release = client.RawPatch(types.MergePatchType, []byte(`{"spec":{"release":true}}`))
	renew   = client.RawPatch(types.MergePatchType, []byte(`{"spec":{"ttl":"1h"}}`))
)

func patch(c client.Client, obj client.Object, p client.Patch) error { return c.Patch(ctx, obj, p) }

var _ = Describe("Who may do what", func() {
	It("a viewer bound only in a namespace runs kubectl get locks, and can change nothing", func() {
		t := newTeam()
		freeze := wrappers.MakeCommandLock(t.ns).Locked("maintenance").Obj()
		Expect(admin.Create(ctx, freeze)).To(Succeed())
		DeferCleanup(func() { _ = admin.Delete(ctx, freeze) })
		Expect(t.alice.Create(ctx, request(t.ns, "vpc", ""))).To(Succeed())

		By("README.md's command, as carol, who is bound to turnstile-viewer in this namespace only")
		out, err := kubectl("--as=carol", "-n", t.ns, "get", "locks")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("lockrequest.locks.turnstile.dev/vpc"))
		Expect(out).To(ContainSubstring("commandlock.locks.turnstile.dev/" + t.ns))

		By("every authenticated user reads CommandLocks, even one bound to nothing")
		var freezes locksv1.CommandLockList
		Expect(as("erin").List(ctx, &freezes)).To(Succeed())
		Expect(freezes.Items).To(ContainElement(HaveField("Name", t.ns)))
		err = as("erin").List(ctx, &locksv1.LockRequestList{}, client.InNamespace(t.ns))
		Expect(err).To(MatchError(fmt.Sprintf(`lockrequests.locks.turnstile.dev is forbidden: User "erin" cannot list resource "lockrequests" in API group "locks.turnstile.dev" in the namespace "%s"`, t.ns)))

		By("the viewer cannot take or release a lock")
		err = t.carol.Create(ctx, request(t.ns, "carols", "carol"))
		Expect(err).To(MatchError(fmt.Sprintf(`lockrequests.locks.turnstile.dev is forbidden: User "carol" cannot create resource "lockrequests" in API group "locks.turnstile.dev" in the namespace "%s"`, t.ns)))
		err = patch(t.carol, request(t.ns, "vpc", ""), release)
		Expect(err).To(MatchError(fmt.Sprintf(`lockrequests.locks.turnstile.dev "vpc" is forbidden: User "carol" cannot patch resource "lockrequests" in API group "locks.turnstile.dev" in the namespace "%s"`, t.ns)))
	})

	It("a requester's requests are their own: the owner is filled in when unset, and naming someone else is denied", func() {
		if !mutating {
			Skip("no MutatingAdmissionPolicy here: nothing is filled in; test/validatingonly proves what is required instead")
		}
		t := newTeam()
		By("owner unset: the API server fills in alice, and records her as the creator")
		lr := request(t.ns, "unset", "")
		Expect(t.alice.Create(ctx, lr)).To(Succeed())
		Expect(lr.Spec.Holder.Owner).To(Equal("alice"))
		Expect(lr.Annotations).To(HaveKeyWithValue(createdBy, "alice"))

		By("a manifest without an owner, applied server-side twice and then replaced: the owner stays alice")
		unowned := filepath.Join(GinkgoT().TempDir(), "unowned.yaml")
		Expect(os.WriteFile(unowned, []byte("apiVersion: locks.turnstile.dev/v1alpha1\nkind: LockRequest\nmetadata:\n  name: applied\nspec:\n  locks:\n  - repo: acme/infra\n    path: modules/applied\n  holder:\n    pull: 3\n"), 0o600)).To(Succeed())
		for _, verb := range [][]string{{"apply", "--server-side"}, {"apply", "--server-side"}, {"replace"}} {
			out, err := kubectl(append(append([]string{"--as=alice", "-n", t.ns}, verb...), "-f", unowned)...)
			Expect(err).NotTo(HaveOccurred(), out)
		}
		applied := &locksv1.LockRequest{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: t.ns, Name: "applied"}, applied)).To(Succeed())
		Expect(applied.Spec.Holder.Owner).To(Equal("alice"))
		Expect(applied.Annotations).To(HaveKeyWithValue(createdBy, "alice"))

		By("owner alice, by alice")
		Expect(t.alice.Create(ctx, request(t.ns, "named", "alice"))).To(Succeed())

		By("a forged creator is overwritten")
		forged := request(t.ns, "forged", "")
		forged.Annotations = map[string]string{createdBy: "bob"}
		Expect(t.alice.Create(ctx, forged)).To(Succeed())
		Expect(forged.Annotations).To(HaveKeyWithValue(createdBy, "alice"))

		By("owner bob, by alice: denied, saying which rule and how to get the permission")
		const why = "spec.holder.owner must be your user name (alice), not bob, or you need the turnstile-delegate role in namespace %s to take locks for others; leave spec.holder.owner unset and it is filled in for you"
		err := t.alice.Create(ctx, request(t.ns, "for-bob", "bob"))
		expectDenied(err, denial(lockRequestRef("for-bob"), "turnstile-lockrequest-owner", fmt.Sprintf(why, t.ns)))

		By("as a person sees it in kubectl")
		manifest := filepath.Join(GinkgoT().TempDir(), "for-bob.yaml")
		Expect(os.WriteFile(manifest, []byte(`apiVersion: locks.turnstile.dev/v1alpha1
kind: LockRequest
metadata:
  name: for-bob
spec:
  locks:
  - repo: acme/infra
    path: modules/vpc
  holder:
    owner: bob
`), 0o600)).To(Succeed())
		out, err := kubectl("--as=alice", "-n", t.ns, "create", "-f", manifest)
		Expect(err).To(HaveOccurred())
		Expect(out).To(Equal(fmt.Sprintf("Error from server (Forbidden): error when creating %q: %s\n",
			manifest, denial(lockRequestRef("for-bob"), "turnstile-lockrequest-owner", fmt.Sprintf(why, t.ns)))))
	})

	It("a delegate takes locks for others; its requests say who created them, and it may release them", func() {
		t := newTeam()
		lr := request(t.ns, "pr-100", "alice")
		Expect(t.atlantis.Create(ctx, lr)).To(Succeed())
		Expect(lr.Spec.Holder.Owner).To(Equal("alice"))
		Expect(lr.Annotations).To(HaveKeyWithValue(createdBy, t.atlantisName))

		By("README.md's command tells the delegate's requests apart")
		out, err := kubectl("--as=carol", "-n", t.ns, "get", "lr", "-o",
			`custom-columns=NAME:.metadata.name,OWNER:.spec.holder.owner,CREATED-BY:.metadata.annotations.locks\.turnstile\.dev/created-by`)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(strings.Fields(out)).To(Equal([]string{"NAME", "OWNER", "CREATED-BY", "pr-100", "alice", t.atlantisName}))

		By("the owner renews it, the delegate releases it")
		Expect(patch(t.alice, lr.DeepCopy(), renew)).To(Succeed())
		Expect(patch(t.atlantis, lr.DeepCopy(), release)).To(Succeed())

		By("another requester may not delete it")
		expectDenied(t.bob.Delete(ctx, lr.DeepCopy()), denial(lockRequestRef("pr-100"), "turnstile-lockrequest-changes",
			fmt.Sprintf("lockrequest pr-100 is held for alice and was created by %s: only its owner, the delegate that created it, or a turnstile-admin in namespace %s may delete it, and you are bob", t.atlantisName, t.ns)))

		By("the delegate role is per namespace: in another one atlantis is nobody's delegate")
		other := newTeam()
		bind(other.ns, "turnstile-requester", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "atlantis", Namespace: t.ns})
		expectDenied(t.atlantis.Create(ctx, request(other.ns, "pr-101", "alice")), denial(lockRequestRef("pr-101"), "turnstile-lockrequest-owner",
			fmt.Sprintf("spec.holder.owner must be your user name (%s), not alice, or you need the turnstile-delegate role in namespace %s to take locks for others; leave spec.holder.owner unset and it is filled in for you", t.atlantisName, other.ns)))
	})

	It("only the owner, the delegate that created it, or an admin releases, renews or deletes a request; the manager deletes finished ones", func() {
		t := newTeam()
		mine := func(name string) *locksv1.LockRequest {
			lr := request(t.ns, name, "")
			Expect(t.alice.Create(ctx, lr)).To(Succeed())
			return lr
		}
		lr := mine("alices")
		why := func(verb string) string {
			return denial(lockRequestRef("alices"), "turnstile-lockrequest-changes",
				fmt.Sprintf("lockrequest alices is held for alice: only its owner, the delegate that created it, or a turnstile-admin in namespace %s may %s it, and you are bob", t.ns, verb))
		}
		By("bob may not release, renew, reprioritize or delete alice's request")
		expectDenied(patch(t.bob, lr.DeepCopy(), release), why("change or release"))
		expectDenied(patch(t.bob, lr.DeepCopy(), renew), why("change or release"))
		expectDenied(patch(t.bob, lr.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"priority":"Low"}}`))), why("change or release"))
		expectDenied(t.bob.Delete(ctx, lr.DeepCopy()), why("delete"))

		By("alice renews and releases it; nobody can rewrite who created it")
		Expect(patch(t.alice, lr.DeepCopy(), renew)).To(Succeed())
		Expect(patch(t.alice, lr.DeepCopy(), release)).To(Succeed())
		rewrite := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"locks.turnstile.dev/created-by":"bob"}}}`))
		remove := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"locks.turnstile.dev/created-by":null}}}`))
		if mutating {
			Expect(patch(t.alice, lr, rewrite)).To(Succeed())
			Expect(lr.Annotations).To(HaveKeyWithValue(createdBy, "alice"), "the mutating policy puts the creator back")
			Expect(patch(t.alice, lr, remove)).To(Succeed())
			Expect(lr.Annotations).To(HaveKeyWithValue(createdBy, "alice"))
		} else {
			const fixed = "metadata.annotations[locks.turnstile.dev/created-by] records who created the request and cannot be changed or removed; create a new LockRequest instead"
			expectDenied(patch(t.alice, lr.DeepCopy(), rewrite), denial(lockRequestRef("alices"), "turnstile-lockrequest-changes", fixed))
			expectDenied(patch(t.alice, lr.DeepCopy(), remove), denial(lockRequestRef("alices"), "turnstile-lockrequest-changes", fixed))
		}
		Expect(t.alice.Delete(ctx, lr)).To(Succeed())

		By("dana, the namespace's admin, releases and deletes anyone's request")
		other := mine("for-dana")
		Expect(patch(t.dana, other.DeepCopy(), release)).To(Succeed())
		Expect(t.dana.Delete(ctx, other)).To(Succeed())

		By("the manager's ServiceAccount deletes a finished request (retention), with the shipped RBAC only")
		finished := mine("finished")
		Expect(patch(t.alice, finished.DeepCopy(), release)).To(Succeed())
		user, groups := serviceAccount("turnstile-system", "turnstile-controller-manager")
		Expect(user).To(Equal(managerSA))
		Expect(as(user, groups...).Delete(ctx, finished)).To(Succeed())
	})

	It("priorities above maxPriority need the prioritize permission; an admin sets maxPriority", func() {
		t := newTeam()
		withPriority := func(name string, p locksv1.Priority) *locksv1.LockRequest {
			lr := request(t.ns, name, "")
			lr.Spec.Priority = p
			return lr
		}
		why := func(name, asked, max string) string {
			return denial(lockRequestRef(name), "turnstile-lockrequest-priority",
				fmt.Sprintf("priority %s is above %s, the most anyone may ask for: it needs the prioritize permission for %s on lockrequests in namespace %s (the turnstile-admin role, or a Role with verbs [prioritize], resources [lockrequests], resourceNames [%s]); or ask for %s or lower", asked, max, asked, t.ns, asked, max))
		}
		By("maxPriority is High as shipped: alice asks for High, not Critical")
		high := withPriority("high", locksv1.PriorityHigh)
		Expect(t.alice.Create(ctx, high)).To(Succeed())
		expectDenied(t.alice.Create(ctx, withPriority("critical", locksv1.PriorityCritical)), why("critical", "Critical", "High"))
		expectDenied(patch(t.alice, high.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"priority":"Critical"}}`))), why("high", "Critical", "High"))

		By("a Role granting prioritize for Critical alone lets bob ask for it; dana (admin) may too")
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: t.ns, Name: "critical-locks"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{locksv1.GroupVersion.Group}, Resources: []string{"lockrequests"},
				Verbs: []string{"prioritize"}, ResourceNames: []string{"Critical"}}},
		}
		Expect(admin.Create(ctx, role)).To(Succeed())
		Expect(admin.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: t.ns, Name: "bob-critical"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "critical-locks"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "bob"}},
		})).To(Succeed())
		// The policy asks the authorizer, which learns of the binding from its watch.
		Eventually(func() error {
			return t.bob.Create(ctx, withPriority("bobs-critical", locksv1.PriorityCritical), client.DryRunAll)
		}).WithTimeout(settle).WithPolling(poll).Should(Succeed(), "RBAC never granted bob the Critical permission")
		Expect(t.bob.Create(ctx, withPriority("bobs-critical", locksv1.PriorityCritical))).To(Succeed())
		Expect(t.dana.Create(ctx, withPriority("danas-critical", locksv1.PriorityCritical))).To(Succeed())

		By("an admin lowers maxPriority to Normal: High now needs the permission, but what is held keeps its priority")
		setMaxPriority("Normal")
		DeferCleanup(setMaxPriority, "High")
		Eventually(func() error {
			return t.alice.Create(ctx, withPriority("high-2", locksv1.PriorityHigh), client.DryRunAll)
		}).
			WithTimeout(settle).WithPolling(poll).Should(HaveOccurred(), "the new maxPriority never took effect")
		expectDenied(t.alice.Create(ctx, withPriority("high-2", locksv1.PriorityHigh)), why("high-2", "High", "Normal"))
		Expect(patch(t.alice, high.DeepCopy(), renew)).To(Succeed(), "an update that keeps the priority is not checked")
		Expect(t.alice.Create(ctx, withPriority("normal", locksv1.PriorityNormal))).To(Succeed())

		By("a maxPriority that is not a priority is reported as such")
		setMaxPriority("Urgent")
		Eventually(func() error { return t.alice.Create(ctx, withPriority("low", locksv1.PriorityLow), client.DryRunAll) }).
			WithTimeout(settle).WithPolling(poll).Should(MatchError(ContainSubstring(`ConfigMap turnstile-system/turnstile-admission: maxPriority must be Low, Normal, High or Critical, not "Urgent"; ask a cluster admin to fix it`)))
	})

	It("only an admin sets spec.bypassFreeze, on create or on a waiting request; the owner may still release it", func() {
		t := newTeam()
		withBypass := func(name string) *locksv1.LockRequest {
			lr := request(t.ns, name, "")
			lr.Spec.BypassFreeze = &locksv1.FreezeBypass{Reason: "incident 4711"}
			return lr
		}
		why := func(name string) string {
			return denial(lockRequestRef(name), "turnstile-lockrequest-bypass-freeze",
				"spec.bypassFreeze lets a request past every freeze: it needs the bypassfreeze permission on lockrequests in namespace "+t.ns+
					" (the turnstile-admin role, or a Role with verbs [bypassfreeze], resources [lockrequests]); ask an admin")
		}
		bypass := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"bypassFreeze":{"reason":"incident 4711"}}}`))

		By("alice, a requester, may not ask for it, on create or by a patch")
		expectDenied(t.alice.Create(ctx, withBypass("hotfix")), why("hotfix"))
		mine := request(t.ns, "mine", "")
		Expect(t.alice.Create(ctx, mine)).To(Succeed())
		expectDenied(patch(t.alice, mine.DeepCopy(), bypass), why("mine"))

		By("dana, the namespace's admin, may: on her own request and on alice's waiting one")
		Expect(t.dana.Create(ctx, withBypass("hotfix"))).To(Succeed())
		Expect(patch(t.dana, mine.DeepCopy(), bypass)).To(Succeed())

		By("alice still releases her request: an update that keeps the bypass is not checked")
		Expect(patch(t.alice, mine.DeepCopy(), release)).To(Succeed())
	})

	It("a requester cannot join the managers' membership: no Lease in the manager's namespace, and a member-labelled one in her own is only hers", func() {
		t := newTeam()
		member := func(ns string) *coordinationv1.Lease {
			return &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "turnstile-member-intruder", Labels: map[string]string{"locks.turnstile.dev/role": "member"}},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("intruder"), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))},
			}
		}
		err := t.alice.Create(ctx, member("turnstile-system"))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "RBAC: %v", err)
		err = t.dana.Create(ctx, member("turnstile-system"))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a namespace admin elsewhere either: %v", err)
		By("in her own namespace she may make one (any requester may create Leases there): the membership reads only the manager's namespace (internal/sharding TestObserveOnlyTheManagersNamespace), and it is hers alone to change")
		mine := member(t.ns)
		Expect(t.alice.Create(ctx, mine)).To(Succeed())
		Expect(mine.Annotations).To(HaveKeyWithValue(createdBy, "alice"))
		Expect(apierrors.IsForbidden(t.bob.Delete(ctx, mine.DeepCopy()))).To(BeTrue())
	})

	It("a holder Lease is kept by whoever created it: another requester can neither delete nor take it over", func() {
		t := newTeam()
		lease := holderLease(t.ns, "runner")
		lease.Annotations = map[string]string{createdBy: "bob"}
		if mutating {
			Expect(t.alice.Create(ctx, lease)).To(Succeed())
			Expect(lease.Annotations).To(HaveKeyWithValue(createdBy, "alice"), "the creator is stamped, whatever the request said")
		} else {
			Expect(t.alice.Create(ctx, lease)).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy 'turnstile-holder-lease-creator'")),
				"a forged creator is refused where it is not stamped")
			lease = holderLease(t.ns, "runner")
			Expect(t.alice.Create(ctx, lease)).To(Succeed())
			Expect(lease.Annotations).To(HaveKeyWithValue(createdBy, "alice"))
		}

		why := func(verb string) string {
			return denial(`leases.coordination.k8s.io "runner"`, "turnstile-holder-lease",
				fmt.Sprintf("lease runner is the holder Lease of alice (label locks.turnstile.dev/role): only alice or a turnstile-admin in namespace %s may %s it, and you are bob; to take its locks, wait for them or ask an admin to force-unlock", t.ns, verb))
		}
		By("bob may not delete it, nor renew it as his own")
		expectDenied(t.bob.Delete(ctx, lease.DeepCopy()), why("delete"))
		takeover := lease.DeepCopy()
		takeover.Spec.HolderIdentity = ptr.To("bobs-runner/1")
		expectDenied(t.bob.Update(ctx, takeover), why("update"))

		By("alice renews it; nobody removes the label that protects it")
		renewed := lease.DeepCopy()
		renewed.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		Expect(t.alice.Update(ctx, renewed)).To(Succeed())
		const frozen = "the label locks.turnstile.dev/role and the annotation locks.turnstile.dev/created-by of a Lease are set when it is created and cannot be added, changed or removed; create a new Lease instead"
		unlabelled := renewed.DeepCopy()
		unlabelled.Labels = nil
		expectDenied(t.alice.Update(ctx, unlabelled), denial(`leases.coordination.k8s.io "runner"`, "turnstile-holder-lease", frozen))

		By("a Lease created without the label is not protected, and cannot be labelled later")
		plain := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: t.ns, Name: "plain"}}
		Expect(t.alice.Create(ctx, plain)).To(Succeed())
		labelled := plain.DeepCopy()
		labelled.Labels = map[string]string{"locks.turnstile.dev/role": "workdir-guard"}
		expectDenied(t.alice.Update(ctx, labelled), denial(`leases.coordination.k8s.io "plain"`, "turnstile-holder-lease", frozen))
		Expect(t.bob.Delete(ctx, plain)).To(Succeed())

		By("dana, the namespace's admin, deletes it")
		Expect(t.dana.Delete(ctx, renewed)).To(Succeed())
	})

	It("Kubernetes' own cleanup is never stuck on a lock: its namespace and garbage collectors delete, and anyone may in a namespace being deleted", func() {
		t := newTeam()
		for _, name := range []string{"by-namespace-controller", "by-garbage-collector", "in-deleted-namespace"} {
			Expect(t.alice.Create(ctx, request(t.ns, name, ""))).To(Succeed())
			Expect(t.alice.Create(ctx, holderLease(t.ns, name))).To(Succeed())
		}
		By("the controllers, with their bootstrap RBAC (system:controller:*)")
		for name, controller := range map[string]string{"by-namespace-controller": "namespace-controller", "by-garbage-collector": "generic-garbage-collector"} {
			user, groups := serviceAccount("kube-system", controller)
			Expect(as(user, groups...).Delete(ctx, request(t.ns, name, ""))).To(Succeed())
			Expect(as(user, groups...).Delete(ctx, holderLease(t.ns, name))).To(Succeed())
		}
		By("bob, once the namespace is being deleted (not before)")
		expectDenied(t.bob.Delete(ctx, request(t.ns, "in-deleted-namespace", "")), denial(lockRequestRef("in-deleted-namespace"), "turnstile-lockrequest-changes",
			fmt.Sprintf("lockrequest in-deleted-namespace is held for alice: only its owner, the delegate that created it, or a turnstile-admin in namespace %s may delete it, and you are bob", t.ns)))
		Expect(admin.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: t.ns}})).To(Succeed())
		// The policy reads namespaceObject from the API server's namespace informer, which sees
		// the deletion a moment after the write (under load, more than one try).
		Eventually(func() error { return t.bob.Delete(ctx, request(t.ns, "in-deleted-namespace", "")) }).Should(Succeed())
		Eventually(func() error { return t.bob.Delete(ctx, holderLease(t.ns, "in-deleted-namespace")) }).Should(Succeed())
	})

	It("only an admin force-unlocks (delete projectlock); only a cluster-wide admin freezes (commandlock)", func() {
		t := newTeam()
		target := locksv1.LockTarget{Repo: "acme/infra", Path: "modules/vpc", Workspace: "default"}
		pl := wrappers.MakeProjectLock(t.ns, target, "acme-infra-vpc").Obj()
		Expect(admin.Create(ctx, pl)).To(Succeed())
		err := t.alice.Delete(ctx, pl.DeepCopy())
		Expect(err).To(MatchError(fmt.Sprintf(`projectlocks.locks.turnstile.dev "acme-infra-vpc" is forbidden: User "alice" cannot delete resource "projectlocks" in API group "locks.turnstile.dev" in the namespace "%s"`, t.ns)))
		Expect(t.dana.Delete(ctx, pl)).To(Succeed())

		freeze := wrappers.MakeCommandLock(t.ns).Obj()
		Expect(admin.Create(ctx, freeze)).To(Succeed())
		DeferCleanup(func() { _ = admin.Delete(ctx, freeze) })
		lock := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"locked":true,"reason":"maintenance"}}`))
		err = patch(t.dana, freeze.DeepCopy(), lock)
		Expect(err).To(MatchError(fmt.Sprintf(`commandlocks.locks.turnstile.dev %q is forbidden: User "dana" cannot patch resource "commandlocks" in API group "locks.turnstile.dev" at the cluster scope`, t.ns)),
			"a namespace's admin does not freeze the whole cluster")
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "platform-locks-"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "turnstile-admin"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "platform-team"}},
		}
		Expect(admin.Create(ctx, crb)).To(Succeed())
		DeferCleanup(func() { _ = admin.Delete(ctx, crb) })
		Expect(patch(as("frank", "platform-team"), freeze, lock)).To(Succeed())
		Expect(freeze.Spec.Locked).To(BeTrue())
	})
})

var _ = Describe("The manager's admission probe", func() {
	It("finds the mutating policies where they are installed, and only the validating ones where they are not", func() {
		t := newTeam()
		user, groups := serviceAccount("turnstile-system", "turnstile-controller-manager")
		mode, err := compat.Probe(ctx, rawAs(user, groups...), t.ns)
		Expect(err).NotTo(HaveOccurred())
		want := compat.AdmissionValidatingOnly
		if mutating {
			want = compat.AdmissionMutating
		}
		Expect(mode).To(Equal(want))
	})
})

// setMaxPriority is the admin editing the policies' params (config/admission/params.yaml).
func setMaxPriority(p string) {
	GinkgoHelper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "turnstile-system", Name: "turnstile-admission"}}
	Expect(admin.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"data":{"maxPriority":%q}}`, p))))).To(Succeed())
}

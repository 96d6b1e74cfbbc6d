package admission

import (
	"fmt"
	"path/filepath"

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
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
	"github.com/turnstile-dev/turnstile/pkg/workdir"
)

// The hub's side of a fleet (config/fleet, docs/fleet.md "Least privilege of a spoke on the
// hub"): each spoke is its ServiceAccount spoke-<cluster> in turnstile-fleet, bound to the
// shipped turnstile-fleet-spoke role in a fleet namespace, and attacks every rule as another
// spoke would.
var _ = Describe("A fleet's spokes on the hub", Ordered, func() {
	const (
		spokePolicy    = "turnstile-fleet-spoke"
		membersPolicy  = "turnstile-fleet-members"
		hubUsersPolicy = "turnstile-fleet-hub-users"
		namesPolicy    = "turnstile-fleet-names"
	)
	var (
		t                 *team
		eu, us, stranger  client.Client // spokes eu-west-1, us-east-1 (members) and eu-west-9 (not)
		notASpoke, certEU client.Client // turnstile-fleet's default ServiceAccount; eu-west-1 by certificate
		euName, usName    string
		spokeGroups       = []string{"system:serviceaccounts", "system:serviceaccounts:turnstile-fleet"}
		leaseRef          = func(name string) string { return fmt.Sprintf("leases.coordination.k8s.io %q", name) }
		members           = map[string]string{"eu-west-1": `{"labels":{"region":"eu"}}`, "us-east-1": `{"labels":{"region":"us"}}`}
		spokeSA           = func(cluster string) string { return "system:serviceaccount:turnstile-fleet:spoke-" + cluster }
		mirrored          func(cluster, name string) *locksv1.LockRequest
		hubLease          func(cluster string) *coordinationv1.Lease
		installedOut      string
	)

	BeforeAll(func() {
		By("installing the hub's fleet policy and roles: kubectl apply --server-side -k config/fleet")
		installedOut = installFleet()
		var cm corev1.ConfigMap
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: "turnstile-fleet", Name: "turnstile-fleet-members"}, &cm)).To(Succeed())
		cm.Data = members
		Expect(admin.Update(ctx, &cm)).To(Succeed())

		t = newTeam()
		bind(t.ns, "turnstile-fleet-spoke",
			rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "system:serviceaccounts:turnstile-fleet"},
			rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "turnstile:spokes"})
		euName, usName = spokeSA("eu-west-1"), spokeSA("us-east-1")
		eu, us = as(euName, spokeGroups...), as(usName, spokeGroups...)
		stranger = as(spokeSA("eu-west-9"), spokeGroups...)
		notASpoke = as("system:serviceaccount:turnstile-fleet:default", spokeGroups...)
		certEU = as("eu-west-1", "turnstile:spokes")

		mirrored = func(cluster, name string) *locksv1.LockRequest {
			lr := wrappers.MakeLockRequest(cluster+"."+name, t.ns).Lock("acme/infra", "modules/"+name, "default").
				Owner("alice", 0).Session("job/" + name).Cluster(cluster).Lease("spoke-" + cluster).Obj()
			lr.Labels = map[string]string{"fleet.turnstile.dev/cluster": cluster}
			return lr
		}
		hubLease = func(cluster string) *coordinationv1.Lease {
			return &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: t.ns, Name: "spoke-" + cluster, Labels: map[string]string{workdir.LabelRole: "spoke"}},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity:       ptr.To("spoke " + cluster),
					LeaseDurationSeconds: ptr.To[int32](40),
					RenewTime:            ptr.To(metav1.NewMicroTime(metav1.Now().Time)),
				},
			}
		}

		By("waiting until the API server enforces the fleet's policies")
		for policy, check := range map[string]func() error{
			spokePolicy:   func() error { return us.Create(ctx, mirrored("eu-west-1", "warmup"), client.DryRunAll) },
			membersPolicy: func() error { return stranger.Create(ctx, mirrored("eu-west-9", "warmup"), client.DryRunAll) },
			hubUsersPolicy: func() error {
				// Unlabelled and named otherwise: a labelled one is refused by
				// turnstile-fleet-reserved as well, one named eu-west-1.* by turnstile-fleet-names,
				// and the API server names either.
				lr := mirrored("eu-west-1", "warmup")
				lr.Labels, lr.Name = nil, "warmup"
				return t.alice.Create(ctx, lr, client.DryRunAll)
			},
			namesPolicy: func() error { return t.alice.Create(ctx, request(t.ns, "eu-west-1.warmup", "alice"), client.DryRunAll) },
		} {
			Eventually(check).WithTimeout(settle).WithPolling(poll).Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy '"+policy+"'")),
				"policy %s never took effect", policy)
		}
	})

	It("lets a spoke write its own cluster's requests and hub Lease, and nothing of another's", func() {
		Expect(installedOut).To(ContainSubstring("validatingadmissionpolicy.admissionregistration.k8s.io/turnstile-fleet-spoke"))

		By("eu-west-1's own request and Lease, as its agent makes them")
		mine := mirrored("eu-west-1", "apply")
		Expect(eu.Create(ctx, mine)).To(Succeed())
		Expect(eu.Create(ctx, hubLease("eu-west-1"))).To(Succeed())
		Expect(patch(eu, mine.DeepCopy(), renew)).To(Succeed())

		By("another cluster's label")
		lr := mirrored("eu-west-1", "label")
		lr.Labels["fleet.turnstile.dev/cluster"] = "us-east-1"
		expectDenied(eu.Create(ctx, lr), denial(lockRequestRef(lr.Name), spokePolicy,
			`spoke eu-west-1 labels its requests fleet.turnstile.dev/cluster=eu-west-1, not "us-east-1"`))
		delete(lr.Labels, "fleet.turnstile.dev/cluster")
		expectDenied(eu.Create(ctx, lr), denial(lockRequestRef(lr.Name), spokePolicy,
			`spoke eu-west-1 labels its requests fleet.turnstile.dev/cluster=eu-west-1, not ""`))

		By("another cluster's name")
		lr = mirrored("eu-west-1", "name")
		lr.Name = "us-east-1.name"
		expectDenied(eu.Create(ctx, lr), denial(lockRequestRef(lr.Name), spokePolicy,
			"spoke eu-west-1 names its requests eu-west-1.<name>, not us-east-1.name"))

		By("another cluster's identity, or none")
		lr = mirrored("eu-west-1", "identity")
		lr.Spec.Holder.Cluster = "us-east-1"
		expectDenied(eu.Create(ctx, lr), denial(lockRequestRef(lr.Name), spokePolicy,
			`spoke eu-west-1 makes requests for holders in its own cluster: spec.holder.cluster must be eu-west-1, not "us-east-1"`))
		lr.Spec.Holder.Cluster = ""
		expectDenied(eu.Create(ctx, lr), denial(lockRequestRef(lr.Name), spokePolicy,
			`spoke eu-west-1 makes requests for holders in its own cluster: spec.holder.cluster must be eu-west-1, not ""`))

		By("another spoke's Lease as its holder Lease")
		lr = mirrored("eu-west-1", "lease")
		lr.Spec.Holder.Lease = "spoke-us-east-1"
		expectDenied(eu.Create(ctx, lr), denial(lockRequestRef(lr.Name), spokePolicy,
			"spoke eu-west-1 ties its requests to its own hub Lease: spec.holder.lease must be spoke-eu-west-1, not spoke-us-east-1"))

		By("no Lease: only for a workload that opted out of the partition rule")
		lr = mirrored("eu-west-1", "keep")
		lr.Spec.Holder.Lease = ""
		expectDenied(eu.Create(ctx, lr.DeepCopy()), denial(lockRequestRef(lr.Name), spokePolicy,
			"spoke eu-west-1 ties its requests to its own hub Lease: spec.holder.lease must be spoke-eu-west-1 (or none, for a workload annotated fleet.turnstile.dev/on-partition: keep-running)"))
		lr.Annotations = map[string]string{"fleet.turnstile.dev/on-partition": "keep-running"}
		Expect(eu.Create(ctx, lr)).To(Succeed())

		By("another spoke's request: released, renewed or deleted by us-east-1 (neither its owner nor its creator)")
		for _, err := range []error{patch(us, mine.DeepCopy(), release), patch(us, mine.DeepCopy(), renew), us.Delete(ctx, mine.DeepCopy())} {
			expectForbidden(err)
		}
		By("another spoke's request whose owner is us-east-1's name: the owner rule would let it, the fleet's does not")
		named := mirrored("eu-west-1", "named")
		named.Spec.Holder.Owner = usName
		Expect(eu.Create(ctx, named)).To(Succeed())
		theirs := "lockrequest eu-west-1.named belongs to cluster eu-west-1: spoke us-east-1 may update, release or delete only the requests of its own cluster (label fleet.turnstile.dev/cluster=us-east-1)"
		expectDenied(patch(us, named.DeepCopy(), release), denial(lockRequestRef(named.Name), spokePolicy, theirs))
		expectDenied(us.Delete(ctx, named.DeepCopy()), denial(lockRequestRef(named.Name), spokePolicy, theirs))
		var got locksv1.LockRequest
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(named), &got)).To(Succeed())
		Expect(got.Spec.Release).To(BeFalse())

		By("a hub request (a delegate made it for eu-west-1's name), released by that spoke")
		hubs := request(t.ns, "hubs", euName)
		Expect(t.atlantis.Create(ctx, hubs)).To(Succeed())
		expectDenied(patch(eu, hubs.DeepCopy(), release), denial(lockRequestRef("hubs"), spokePolicy,
			"lockrequest hubs belongs to no spoke: spoke eu-west-1 may update, release or delete only the requests of its own cluster (label fleet.turnstile.dev/cluster=eu-west-1)"))

		By("a spoke's request released on the hub by the hub's user of its owner's name")
		expectDenied(patch(t.alice, mine.DeepCopy(), release), denial(lockRequestRef(mine.Name), hubUsersPolicy,
			fmt.Sprintf("lockrequest eu-west-1.apply is cluster eu-west-1's, mirrored by its spoke: only that spoke or a turnstile-admin in namespace %s may update it (kubectl turnstile release --cluster, or in the spoke)", t.ns)))
		expectDenied(t.alice.Delete(ctx, mine.DeepCopy()), denial(lockRequestRef(mine.Name), hubUsersPolicy,
			fmt.Sprintf("lockrequest eu-west-1.apply is cluster eu-west-1's, mirrored by its spoke: only that spoke or a turnstile-admin in namespace %s may delete it (kubectl turnstile release --cluster, or in the spoke)", t.ns)))
		Expect(patch(t.dana, named.DeepCopy(), release)).To(Succeed(), "the namespace's admin releases it")

		By("a spoke's stop said by someone else: the hub's user of its owner's name, another spoke")
		stopped := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"fleet.turnstile.dev/stopped":"1","fleet.turnstile.dev/confirms-stops":null}}}`))
		expectDenied(patch(t.alice, mine.DeepCopy(), stopped), denial(lockRequestRef(mine.Name), hubUsersPolicy,
			fmt.Sprintf("lockrequest eu-west-1.apply is cluster eu-west-1's, mirrored by its spoke: only that spoke or a turnstile-admin in namespace %s may update it (kubectl turnstile release --cluster, or in the spoke)", t.ns)))
		expectForbidden(patch(us, mine.DeepCopy(), stopped))

		By("its own request moved to another cluster by relabelling")
		moved := mine.DeepCopy()
		Expect(eu.Get(ctx, client.ObjectKeyFromObject(moved), moved)).To(Succeed())
		moved.Labels["fleet.turnstile.dev/cluster"] = "us-east-1"
		expectDenied(eu.Update(ctx, moved), denial(lockRequestRef(mine.Name), spokePolicy,
			`spoke eu-west-1 labels its requests fleet.turnstile.dev/cluster=eu-west-1, not "us-east-1"`))

		By("another spoke's hub Lease: created, renewed or deleted by eu-west-1")
		expectDenied(eu.Create(ctx, hubLease("us-east-1")), denial(leaseRef("spoke-us-east-1"), spokePolicy,
			"spoke eu-west-1 writes only its own hub Lease spoke-eu-west-1, not spoke-us-east-1"))
		Expect(us.Create(ctx, hubLease("us-east-1"))).To(Succeed())
		var theirLease coordinationv1.Lease
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: t.ns, Name: "spoke-us-east-1"}, &theirLease)).To(Succeed())
		theirLease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(metav1.Now().Time))
		// The holder-Lease protection refuses these too (us-east-1 created the Lease): either
		// policy's answer is the API server's.
		for op, write := range map[string]error{"update": eu.Update(ctx, theirLease.DeepCopy()), "delete": eu.Delete(ctx, theirLease.DeepCopy())} {
			expectDeniedByOneOf(write,
				denial(leaseRef("spoke-us-east-1"), spokePolicy, "spoke eu-west-1 writes only its own hub Lease spoke-eu-west-1, not spoke-us-east-1"),
				denial(leaseRef("spoke-us-east-1"), "turnstile-holder-lease", fmt.Sprintf("lease spoke-us-east-1 is the holder Lease of %[1]s (label locks.turnstile.dev/role): "+
					"only %[1]s or a turnstile-admin in namespace %[2]s may %[3]s it, and you are %[4]s; to take its locks, wait for them or ask an admin to force-unlock", usName, t.ns, op, euName)))
		}
		expectDenied(eu.Create(ctx, holderLease(t.ns, "runner")), denial(leaseRef("runner"), spokePolicy,
			"spoke eu-west-1 writes only its own hub Lease spoke-eu-west-1, not runner"))

		By("its own Lease without the role label the holder-Lease protection keys on")
		unlabelled := hubLease("eu-west-1")
		unlabelled.Labels = nil
		Expect(eu.Delete(ctx, hubLease("eu-west-1"))).To(Succeed())
		expectDenied(eu.Create(ctx, unlabelled), denial(leaseRef("spoke-eu-west-1"), spokePolicy,
			"hub Lease spoke-eu-west-1 must be labelled locks.turnstile.dev/role=spoke (the holder-Lease protection then keeps it to its creator)"))

		By("eu-west-1 by client certificate (group turnstile:spokes) is held to the same rules")
		Expect(certEU.Create(ctx, mirrored("eu-west-1", "by-cert"))).To(Succeed())
		expectDenied(certEU.Create(ctx, mirrored("us-east-1", "by-cert")), denial(lockRequestRef("us-east-1.by-cert"), spokePolicy,
			`spoke eu-west-1 labels its requests fleet.turnstile.dev/cluster=eu-west-1, not "us-east-1"`))
	})

	It("lets a spoke read the hub's ProjectLocks and CommandLocks for its mirrors, and write none", func() {
		for _, list := range []client.ObjectList{&locksv1.ProjectLockList{}, &locksv1.CommandLockList{}} {
			Expect(eu.List(ctx, list)).To(Succeed(), "a spoke mirrors every hub %T", list)
		}
		cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "mirror-probe"}, Spec: locksv1.CommandLockSpec{Locked: true}}
		Expect(eu.Create(ctx, cl, client.DryRunAll)).To(MatchError(ContainSubstring("forbidden")), "a spoke writes no CommandLock on the hub")
		pl := &locksv1.ProjectLock{ObjectMeta: metav1.ObjectMeta{Namespace: t.ns, Name: "mirror-probe"}}
		Expect(eu.Create(ctx, pl, client.DryRunAll)).To(MatchError(ContainSubstring("forbidden")), "a spoke writes no ProjectLock on the hub")
		Expect(eu.Delete(ctx, pl)).To(MatchError(ContainSubstring("forbidden")))
	})

	It("lets a spoke renew its heartbeat Lease in turnstile-fleet with its clock skew in seconds, and nothing else there", func() {
		heartbeat := func(cluster, skew string) *coordinationv1.Lease {
			l := hubLease(cluster)
			l.Namespace = "turnstile-fleet"
			l.Labels["fleet.turnstile.dev/cluster"] = cluster
			// The agent records itself as the creator (a hub without MutatingAdmissionPolicy
			// requires it of a holder Lease; one with it stamps the same value).
			l.Annotations = map[string]string{"locks.turnstile.dev/created-by": map[string]string{"eu-west-1": euName, "us-east-1": usName}[cluster]}
			if skew != "" {
				l.Annotations["fleet.turnstile.dev/clock-skew"] = skew
			}
			return l
		}
		By("its own heartbeat, created and renewed as its agent does (keeping the Lease's other annotations), with the skew it measured")
		mine := heartbeat("eu-west-1", "")
		Expect(eu.Create(ctx, mine)).To(Succeed())
		Expect(eu.Get(ctx, client.ObjectKeyFromObject(mine), mine)).To(Succeed())
		mine.Annotations["fleet.turnstile.dev/clock-skew"] = "0.042"
		Expect(eu.Update(ctx, mine)).To(Succeed())
		Expect(mine.Annotations).To(HaveKeyWithValue("locks.turnstile.dev/created-by", euName), "the hub's fleet view trusts it by this stamp")

		By("a skew in any other form")
		for _, bad := range []string{"42ms", "-0.042", "0.04", "1e3", "10000.000"} {
			mine.Annotations["fleet.turnstile.dev/clock-skew"] = bad
			expectDenied(eu.Update(ctx, mine.DeepCopy()), denial(leaseRef("spoke-eu-west-1"), spokePolicy,
				`hub Lease spoke-eu-west-1: annotation fleet.turnstile.dev/clock-skew is the measured clock skew in seconds to the millisecond (e.g. 0.042), not "`+bad+`"`))
		}
		expectDenied(eu.Create(ctx, heartbeat("eu-west-1", "soon")), denial(leaseRef("spoke-eu-west-1"), spokePolicy,
			`hub Lease spoke-eu-west-1: annotation fleet.turnstile.dev/clock-skew is the measured clock skew in seconds to the millisecond (e.g. 0.042), not "soon"`))

		By("another spoke's heartbeat, or another Lease there")
		Expect(us.Create(ctx, heartbeat("us-east-1", "0.001"))).To(Succeed())
		theirs := heartbeat("us-east-1", "")
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(theirs), theirs)).To(Succeed())
		theirs.Annotations["fleet.turnstile.dev/clock-skew"] = "0.000"
		expectDeniedByOneOf(eu.Update(ctx, theirs.DeepCopy()),
			denial(leaseRef("spoke-us-east-1"), spokePolicy, "spoke eu-west-1 writes only its own hub Lease spoke-eu-west-1, not spoke-us-east-1"),
			denial(leaseRef("spoke-us-east-1"), "turnstile-holder-lease", fmt.Sprintf("lease spoke-us-east-1 is the holder Lease of %[1]s (label locks.turnstile.dev/role): "+
				"only %[1]s or a turnstile-admin in namespace turnstile-fleet may update it, and you are %[2]s; to take its locks, wait for them or ask an admin to force-unlock", usName, euName)))
		other := heartbeat("eu-west-1", "")
		other.Name = "turnstile-fleet-members"
		expectDenied(eu.Create(ctx, other), denial(leaseRef("turnstile-fleet-members"), spokePolicy,
			"spoke eu-west-1 writes only its own hub Lease spoke-eu-west-1, not turnstile-fleet-members"))
		err := eu.Delete(ctx, mine.DeepCopy())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "its heartbeat lapses, it is not deleted (RBAC: no delete there): %v", err)
	})

	It("refuses a cluster that is not a member, and a ServiceAccount that is not a spoke", func() {
		expectDenied(stranger.Create(ctx, mirrored("eu-west-9", "apply")), denial(lockRequestRef("eu-west-9.apply"), membersPolicy,
			"cluster eu-west-9 is not a member of this fleet: ask the hub's admin to run `kubectl turnstile fleet join eu-west-9`"))

		By("a member removed from the params is refused from then on")
		Expect(us.Create(ctx, mirrored("us-east-1", "before"))).To(Succeed())
		var cm corev1.ConfigMap
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: "turnstile-fleet", Name: "turnstile-fleet-members"}, &cm)).To(Succeed())
		delete(cm.Data, "us-east-1")
		Expect(admin.Update(ctx, &cm)).To(Succeed())
		DeferCleanup(func() {
			Expect(admin.Get(ctx, client.ObjectKeyFromObject(&cm), &cm)).To(Succeed())
			cm.Data = members
			Expect(admin.Update(ctx, &cm)).To(Succeed())
		})
		Eventually(func() error { return us.Create(ctx, mirrored("us-east-1", "after"), client.DryRunAll) }).
			WithTimeout(settle).WithPolling(poll).Should(MatchError(denial(lockRequestRef("us-east-1.after"), membersPolicy,
			"cluster us-east-1 is not a member of this fleet: ask the hub's admin to run `kubectl turnstile fleet join us-east-1`")))
		expectDenied(patch(us, mirrored("us-east-1", "before"), release), denial(lockRequestRef("us-east-1.before"), membersPolicy,
			"cluster us-east-1 is not a member of this fleet: ask the hub's admin to run `kubectl turnstile fleet join us-east-1`"))

		By("turnstile-fleet's other ServiceAccounts have the spokes' groups, not a spoke's rights")
		expectDenied(notASpoke.Create(ctx, mirrored("eu-west-1", "default")), denial(lockRequestRef("eu-west-1.default"), spokePolicy,
			"system:serviceaccount:turnstile-fleet:default is not a spoke of this fleet: a spoke acts on the hub as the ServiceAccount spoke-<cluster> in namespace turnstile-fleet, or as a user of group turnstile:spokes named after its cluster (a DNS-1123 label)"))
	})

	It("lets only a spoke or a delegate make a request for a holder in another cluster", func() {
		// alice is a requester: she may not name another owner nor another cluster.
		lr := request(t.ns, "reenter", "alice")
		lr.Spec.Holder.Cluster = "eu-west-1"
		expectDenied(t.alice.Create(ctx, lr.DeepCopy()), denial(lockRequestRef("reenter"), hubUsersPolicy,
			fmt.Sprintf("spec.holder.cluster eu-west-1 names a fleet member: only its spoke, or a user with the delegate permission on lockrequests in namespace %s, makes a request for a holder in another cluster; leave it unset", t.ns)))
		Expect(t.atlantis.Create(ctx, lr)).To(Succeed())
	})

	// Issue 45: the agent mirrors a spoke request NAME to the hub request <cluster>.NAME; a hub
	// user who took that name first would stall it (HubNameTaken). So it is a spoke's to create.
	It("keeps a member's hub names <cluster>.<name> to its spoke: no hub user creates one, while the members are listed", func() {
		By("a requester, a delegate and the namespace's admin, under a member's name")
		Eventually(func() error { return t.alice.Create(ctx, request(t.ns, "us-east-1.probe", "alice"), client.DryRunAll) }).
			WithTimeout(settle).WithPolling(poll).Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy '"+namesPolicy+"'")),
			"us-east-1 is a member again (the last spec removed it for a while)")
		for who, c := range map[string]client.Client{"alice": t.alice, "dana": t.dana} {
			for _, cluster := range []string{"eu-west-1", "us-east-1"} {
				name := cluster + ".squat-" + who
				expectDenied(c.Create(ctx, request(t.ns, name, who)), denial(lockRequestRef(name), namesPolicy, namesTaken(name, cluster)))
			}
		}
		delegated := request(t.ns, "eu-west-1.squat-atlantis", "alice")
		expectDenied(t.atlantis.Create(ctx, delegated), denial(lockRequestRef(delegated.Name), namesPolicy, namesTaken(delegated.Name, "eu-west-1")))
		generated := request(t.ns, "generated", "alice")
		generated.Name, generated.GenerateName = "", "eu-west-1.squat-"
		Expect(t.alice.Create(ctx, generated)).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy '"+namesPolicy+"'")),
			"a generated name is judged as the name it gets")

		By("a name with a dot whose prefix is no member's, or a member's name without the dot")
		for _, name := range []string{"eu-west-9.apply", "v1.2-release", "eu-west-1", "eu-west-1-apply", "x.eu-west-1.apply"} {
			Expect(t.alice.Create(ctx, request(t.ns, name, "alice"))).To(Succeed(), name)
		}

		By("the spoke itself, by ServiceAccount and by certificate")
		Expect(eu.Create(ctx, mirrored("eu-west-1", "own"))).To(Succeed())
		Expect(certEU.Create(ctx, mirrored("eu-west-1", "own-by-cert"))).To(Succeed())
		Expect(us.Create(ctx, mirrored("us-east-1", "own"))).To(Succeed())

		By("no members (the ConfigMap without data): no member names to keep")
		cm := &corev1.ConfigMap{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: "turnstile-fleet", Name: "turnstile-fleet-members"}, cm)).To(Succeed())
		cm.Data = nil
		Expect(admin.Update(ctx, cm)).To(Succeed())
		restore := func() {
			restored := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name}, Data: members}
			err := admin.Create(ctx, restored)
			if apierrors.IsAlreadyExists(err) {
				Expect(admin.Get(ctx, client.ObjectKeyFromObject(restored), restored)).To(Succeed())
				restored.Data = members
				err = admin.Update(ctx, restored)
			}
			Expect(err).NotTo(HaveOccurred())
		}
		DeferCleanup(restore)
		Eventually(func() error { return t.alice.Create(ctx, request(t.ns, "eu-west-1.no-members", "alice")) }).
			WithTimeout(settle).WithPolling(poll).Should(Succeed())

		By("no members ConfigMap: this policy keeps no names, but turnstile-fleet-members refuses every LockRequest write for its missing params")
		Expect(admin.Delete(ctx, cm)).To(Succeed())
		missing := "ValidatingAdmissionPolicy '" + membersPolicy + "' with binding '" + membersPolicy + "' denied request: failed to configure binding: " +
			"no params found for policy binding with `Deny` parameterNotFoundAction"
		Eventually(func() error { return t.alice.Create(ctx, request(t.ns, "absent", "alice"), client.DryRunAll) }).
			WithTimeout(settle).WithPolling(poll).Should(MatchError(ContainSubstring(missing)), "a hub without its members refuses every LockRequest write")

		By("the members back: refused again")
		restore()
		Eventually(func() error { return t.alice.Create(ctx, request(t.ns, "eu-west-1.back", "alice"), client.DryRunAll) }).
			WithTimeout(settle).WithPolling(poll).Should(MatchError(denial(lockRequestRef("eu-west-1.back"), namesPolicy, namesTaken("eu-west-1.back", "eu-west-1"))))
		Eventually(func() error { return eu.Create(ctx, mirrored("eu-west-1", "back"), client.DryRunAll) }).
			WithTimeout(settle).WithPolling(poll).Should(Succeed(), "the spoke is a member again")
	})
})

// namesTaken is turnstile-fleet-names' refusal of name, which begins with member cluster's name
// and a dot.
func namesTaken(name, cluster string) string {
	return fmt.Sprintf("lockrequest %s: cluster %s is a member of this fleet, and the names %[2]s.<name> are its spoke's mirrors of its requests"+
		" (its agent creates them): pick a name that does not begin with %[2]s.", name, cluster)
}

// expectForbidden checks that err is the API server's Forbidden from an admission policy
// (which of the policies that all deny it answers first is the API server's choice).
func expectForbidden(err error) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred())
	Expect(err.Error()).To(ContainSubstring("denied request"))
}

// installFleet installs config/fleet on the suite's API server (kubectl apply --server-side
// -k), for every Describe that needs it, and returns kubectl's output. It is
// not uninstalled: envtest runs no namespace controller, so turnstile-fleet would stay
// Terminating and refuse the next install; the suite's API server goes at its end.
func installFleet() string {
	GinkgoHelper()
	root, err := framework.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	out, err := kubectl("apply", "--server-side", "-k", filepath.Join(root, "config", "fleet"))
	Expect(err).NotTo(HaveOccurred(), out)
	return out
}

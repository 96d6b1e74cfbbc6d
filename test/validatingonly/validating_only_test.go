package validatingonly

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/compat"
	"github.com/turnstile-dev/turnstile/internal/workload"
	turnstile "github.com/turnstile-dev/turnstile/pkg/client"
	"github.com/turnstile-dev/turnstile/pkg/workdir"
)

var release = client.RawPatch(types.MergePatchType, []byte(`{"spec":{"release":true}}`))

// gatedPod is a Pod carrying the lock annotation and nothing else of Turnstile's.
func gatedPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{workload.AnnotationLock: "acme/infra:" + name}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "migrate", Image: "busybox", Command: []string{"sh", "-c", "echo migrating"}}},
		},
	}
}

// gatedJob is a Job whose Pod template carries the lock annotation.
func gatedJob(ns, name string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{workload.AnnotationLock: "acme/infra:" + name}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers:    []corev1.Container{{Name: "apply", Image: "busybox", Command: []string{"sh", "-c", "echo applying"}}},
				},
			},
		},
	}
}

// holderLease is a runner's holder Lease (label locks.turnstile.dev/role), recording creator
// when it is not empty.
func holderLease(ns, name, creator string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{workdir.LabelRole: workdir.RoleWorkdirGuard}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("runner-1/4242"), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: ptr.To(metav1.NewMicroTime(time.Now())),
		},
	}
	if creator != "" {
		l.Annotations = map[string]string{createdBy: creator}
	}
	return l
}

func podRef(name string) string   { return fmt.Sprintf("pods %q", name) }
func jobRef(name string) string   { return fmt.Sprintf("jobs.batch %q", name) }
func leaseRef(name string) string { return fmt.Sprintf("leases.coordination.k8s.io %q", name) }
func lrRef(name string) string    { return fmt.Sprintf("lockrequests.locks.turnstile.dev %q", name) }

const unheld = "%s %s carries the annotation locks.turnstile.dev/lock but is not held for its lock, and this cluster does not hold it for you " +
	"(Turnstile runs without MutatingAdmissionPolicy here; see docs/install.md, \"Supported Kubernetes versions\"): add to the %s %s"

var _ = Describe("Without MutatingAdmissionPolicy", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("a request must name its owner; a requester's own is recorded as nothing more, and only she or an admin changes it", func() {
		By("no owner: the CRD refuses it, naming the field (a Go client sends it empty)")
		err := as("alice").Create(ctx, request(ns, "unowned", ""))
		// 1.33's API server writes the CEL rule's value as "string", later ones as "".
		Expect(err).To(MatchError(MatchRegexp(`spec\.holder\.owner: Invalid value: "(string)?": owner must not be blank`)))

		By("as a person sees it with kubectl")
		manifest := filepath.Join(GinkgoT().TempDir(), "unowned.yaml")
		Expect(os.WriteFile(manifest, []byte("apiVersion: locks.turnstile.dev/v1alpha1\nkind: LockRequest\nmetadata:\n  name: unowned\nspec:\n  locks:\n  - repo: acme/infra\n    path: modules/vpc\n  holder:\n    pull: 3\n"), 0o600)).To(Succeed())
		out, err := adminKubectl.Combined("--as=alice", "-n", ns, "create", "-f", manifest)
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring("spec.holder.owner: Required value"))

		By("owner alice, by alice, without the creator annotation: accepted")
		mine := request(ns, "mine", "alice")
		Expect(as("alice").Create(ctx, mine)).To(Succeed())
		Expect(mine.Annotations).NotTo(HaveKey(createdBy))

		By("someone else's name is still refused, as with the mutating policies")
		err = as("alice").Create(ctx, request(ns, "for-bob", "bob"))
		expectDenied(err, denial(lrRef("for-bob"), "turnstile-lockrequest-owner", fmt.Sprintf(
			"spec.holder.owner must be your user name (alice), not bob, or you need the turnstile-delegate role in namespace %s to take locks for others; leave spec.holder.owner unset and it is filled in for you", ns)))

		By("bob may not release it; alice may")
		expectDenied(as("bob").Patch(ctx, mine.DeepCopy(), release), denial(lrRef("mine"), "turnstile-lockrequest-changes", fmt.Sprintf(
			"lockrequest mine is held for alice: only its owner, the delegate that created it, or a turnstile-admin in namespace %s may change or release it, and you are bob", ns)))
		Expect(as("alice").Patch(ctx, mine.DeepCopy(), release)).To(Succeed())

		By("a creator cannot be added later")
		err = as("alice").Patch(ctx, mine.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"locks.turnstile.dev/created-by":"alice"}}}`)))
		expectDenied(err, denial(lrRef("mine"), "turnstile-lockrequest-changes",
			"metadata.annotations[locks.turnstile.dev/created-by] records who created the request and cannot be changed or removed; create a new LockRequest instead"))
	})

	It("a delegate's request must record its creator, itself; then the delegate releases it", func() {
		atlantis := as("atlantis")
		By("without it: refused, showing the line to add")
		expectDenied(atlantis.Create(ctx, request(ns, "pr-100", "alice")), denial(lrRef("pr-100"), "turnstile-lockrequest-owner",
			"you take this lock for alice, and this cluster does not record who created the request (Turnstile runs without MutatingAdmissionPolicy here; "+
				`see docs/install.md, "Supported Kubernetes versions"): add to the lockrequest metadata: {annotations: {locks.turnstile.dev/created-by: "atlantis"}} (your user name as the API server knows it)`))

		By("with someone else as creator: refused")
		forged := request(ns, "pr-100", "alice")
		forged.Annotations = map[string]string{createdBy: "bob"}
		expectDenied(atlantis.Create(ctx, forged), denial(lrRef("pr-100"), "turnstile-lockrequest-owner",
			"metadata.annotations[locks.turnstile.dev/created-by] must be your user name (atlantis): it records who created the request; leave it unset and it is filled in for you"))

		By("with itself: accepted, and it may release it; bob may not")
		lr := request(ns, "pr-100", "alice")
		lr.Annotations = map[string]string{createdBy: "atlantis"}
		Expect(atlantis.Create(ctx, lr)).To(Succeed())
		expectDenied(as("bob").Delete(ctx, lr.DeepCopy()), denial(lrRef("pr-100"), "turnstile-lockrequest-changes", fmt.Sprintf(
			"lockrequest pr-100 is held for alice and was created by atlantis: only its owner, the delegate that created it, or a turnstile-admin in namespace %s may delete it, and you are bob", ns)))
		Expect(atlantis.Patch(ctx, lr.DeepCopy(), release)).To(Succeed())
	})

	It("a holder Lease must record its creator, and is then kept from others", func() {
		alice := as("alice")
		By("without it: refused, showing the line to add")
		expectDenied(alice.Create(ctx, holderLease(ns, "runner", "")), denial(leaseRef("runner"), "turnstile-holder-lease-creator",
			`lease runner is a holder Lease (label locks.turnstile.dev/role) and must record who created it, and this cluster does not record it for you `+
				`(Turnstile runs without MutatingAdmissionPolicy here; see docs/install.md, "Supported Kubernetes versions"): `+
				`add to the lease metadata: {annotations: {locks.turnstile.dev/created-by: "alice"}} (your user name as the API server knows it)`))
		By("with someone else: refused")
		expectDenied(alice.Create(ctx, holderLease(ns, "runner", "bob")), denial(leaseRef("runner"), "turnstile-holder-lease-creator",
			`lease runner is a holder Lease (label locks.turnstile.dev/role) and must record who created it, not bob: `+
				`add to the lease metadata: {annotations: {locks.turnstile.dev/created-by: "alice"}} (your user name as the API server knows it)`))
		By("with herself: accepted, and bob may not delete it")
		lease := holderLease(ns, "runner", "alice")
		Expect(alice.Create(ctx, lease)).To(Succeed())
		expectDenied(as("bob").Delete(ctx, lease.DeepCopy()), denial(leaseRef("runner"), "turnstile-holder-lease", fmt.Sprintf(
			"lease runner is the holder Lease of alice (label locks.turnstile.dev/role): only alice or a turnstile-admin in namespace %s may delete it, and you are bob; to take its locks, wait for them or ask an admin to force-unlock", ns)))
		By("a Lease without the label is not a holder Lease, and is not checked")
		Expect(alice.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}})).To(Succeed())
	})

	It("an annotated Pod must carry its gate, label and creator; carrying them, it is held until its lock is granted", func() {
		alice := as("alice")
		By("bare: refused, with the three lines to add")
		expectDenied(alice.Create(ctx, gatedPod(ns, "migrate")), denial(podRef("migrate"), "turnstile-workload-held",
			fmt.Sprintf(unheld, "pod", "migrate", "pod", `metadata: {labels: {locks.turnstile.dev/gated: "true"}}; metadata: {annotations: {locks.turnstile.dev/created-by: "alice"}}; `+
				`spec: {schedulingGates: [{name: locks.turnstile.dev/lock}]} (locks.turnstile.dev/created-by is your user name as the API server knows it)`)))

		By("labelled and stamped, but not gated: refused, with the one line missing")
		p := gatedPod(ns, "migrate")
		p.Labels = map[string]string{workload.LabelGated: "true"}
		p.Annotations[createdBy] = "alice"
		expectDenied(alice.Create(ctx, p.DeepCopy()), denial(podRef("migrate"), "turnstile-workload-held",
			fmt.Sprintf(unheld, "pod", "migrate", "pod", `spec: {schedulingGates: [{name: locks.turnstile.dev/lock}]}`)))

		By("gated and labelled, but recording bob as its creator: refused")
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: workload.SchedulingGate}}
		forged := p.DeepCopy()
		forged.Annotations[createdBy] = "bob"
		expectDenied(alice.Create(ctx, forged), denial(podRef("migrate"), "turnstile-workload-held",
			fmt.Sprintf(unheld, "pod", "migrate", "pod", `metadata: {annotations: {locks.turnstile.dev/created-by: "alice"}} (locks.turnstile.dev/created-by is your user name as the API server knows it)`)))

		By("all three: accepted; the manager requests the lock for alice, then removes the gate with the token")
		Expect(alice.Create(ctx, p)).To(Succeed())
		lr := &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: workload.RequestName("pod", "migrate")}}
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(lr), lr)).To(Succeed())
			g.Expect(lr.Status.Phase).To(Equal(locksv1.PhaseGranted))
		}).WithTimeout(wait).Should(Succeed())
		Expect(lr.Spec.Holder.Owner).To(Equal("alice"))
		Expect(lr.Annotations).To(HaveKeyWithValue(createdBy, managerUser), "the manager records itself as the delegate that created it")
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			g.Expect(p.Spec.SchedulingGates).To(BeEmpty())
			g.Expect(p.Annotations).To(HaveKeyWithValue(workload.AnnotationFencingToken, strconv.FormatInt(lr.Status.FencingToken, 10)))
		}).WithTimeout(wait).Should(Succeed())

		By("a Job's own Pods are not checked: the Job holds the lock for them")
		ownPod := gatedPod(ns, "own-pod")
		ownPod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "x", UID: "1234", Controller: ptr.To(true)}}
		Expect(admin.Create(ctx, ownPod, client.DryRunAll)).To(Succeed())
	})

	It("an annotated Job must be suspended, labelled and stamped; carrying them, it is held until its lock is granted", func() {
		alice := as("alice")
		expectDenied(alice.Create(ctx, gatedJob(ns, "apply")), denial(jobRef("apply"), "turnstile-workload-held",
			fmt.Sprintf(unheld, "job", "apply", "job", `metadata: {labels: {locks.turnstile.dev/gated: "true"}}; metadata: {annotations: {locks.turnstile.dev/created-by: "alice"}}; `+
				`spec: {suspend: true} (locks.turnstile.dev/created-by is your user name as the API server knows it)`)))
		j := gatedJob(ns, "apply")
		j.Labels = map[string]string{workload.LabelGated: "true"}
		j.Annotations = map[string]string{createdBy: "alice"}
		j.Spec.Suspend = ptr.To(true)
		Expect(alice.Create(ctx, j)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(j), j)).To(Succeed())
			g.Expect(j.Spec.Suspend).To(Equal(ptr.To(false)))
			g.Expect(j.Annotations).To(HaveKey(workload.AnnotationFencingToken))
		}).WithTimeout(wait).Should(Succeed())
	})

	It("Turnstile's own clients write what is not filled in: pkg/client takes a lock, pkg/workdir's heartbeat creates its Lease", func() {
		By("pkg/client, as alice: owner and creator filled in by the client")
		c := turnstile.New(as("alice"), ns)
		lock, err := c.Acquire(ctx, turnstile.Request{Name: "by-client", Locks: []locksv1.LockTarget{{Repo: "acme/infra", Path: "modules/client"}}})
		Expect(err).NotTo(HaveOccurred())
		lr := &locksv1.LockRequest{}
		Expect(admin.Get(ctx, lock.Key(), lr)).To(Succeed())
		Expect(lr.Spec.Holder.Owner).To(Equal("alice"))
		Expect(lr.Annotations).To(HaveKeyWithValue(createdBy, "alice"))

		By("pkg/client, as the delegate atlantis for alice")
		lock, err = turnstile.New(as("atlantis"), ns).Acquire(ctx, turnstile.Request{Name: "pr-7", Holder: locksv1.Holder{Owner: "alice", Pull: 7},
			Locks: []locksv1.LockTarget{{Repo: "acme/infra", Path: "modules/pr-7"}}})
		Expect(err).NotTo(HaveOccurred())
		Expect(admin.Get(ctx, lock.Key(), lr)).To(Succeed())
		Expect(lr.Annotations).To(HaveKeyWithValue(createdBy, "atlantis"))

		By("pkg/workdir's heartbeat, as alice")
		hb, err := workdir.NewHeartbeat(as("alice"), workdir.NewGuards(), workdir.WithNamespace(ns), workdir.WithLeaseName("runner-a"), workdir.WithIdentity("runner-a/1"))
		Expect(err).NotTo(HaveOccurred())
		hctx, cancel := context.WithCancel(ctx)
		DeferCleanup(cancel)
		go func() { _ = hb.Run(hctx) }()
		lease := &coordinationv1.Lease{}
		Eventually(func() error { return admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "runner-a"}, lease) }).WithTimeout(wait).Should(Succeed())
		Expect(lease.Annotations).To(HaveKeyWithValue(createdBy, "alice"))
	})

	It("the manager's probe finds only the validating policies running", func() {
		mode, err := compat.Probe(ctx, as(managerUser), ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(mode).To(Equal(compat.AdmissionValidatingOnly))
	})
})

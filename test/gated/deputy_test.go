package gated

import (
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
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
	"github.com/turnstile-dev/turnstile/internal/workload"
)

// The manager as a deputy (docs/threat-model.md): it creates, lets go, renews, releases,
// deletes and stops with its own rights, deciding from what users write. Each spec attacks one
// such place as alice, a team member bound to the shipped roles, on the API server with the
// shipped policies, and checks that acting for her never does more than she could do herself.
var _ = Describe("Gated workloads: the manager acts only on what it made", func() {
	var (
		ns    string
		alice client.Client
	)
	BeforeEach(func() {
		ns = newNamespace()
		alice = as("alice")
	})
	// notLetGo checks, for a while, that p stays gated without a token (the right outcome is
	// that nothing happens, so the spec watches: a manager that acted on the attack lets the
	// Pod go within milliseconds).
	notLetGo := func(p *corev1.Pod) {
		GinkgoHelper()
		Consistently(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			g.Expect(isGated(p)).To(BeTrue())
			g.Expect(p.Annotations).NotTo(HaveKey(workload.AnnotationFencingToken))
		}).WithTimeout(3 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	}
	// forbidden checks that err is the API server's refusal by policy, saying want.
	forbidden := func(err error, policy, want string) {
		GinkgoHelper()
		Expect(err).To(HaveOccurred(), "want refused: %s", want)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("ValidatingAdmissionPolicy '" + policy + "'"))
		Expect(err.Error()).To(ContainSubstring(want))
	}
	// ownedBy is a request of alice's own, ownerReference and all, as she may write it.
	ownedBy := func(name, path string, owner client.Object, kind, apiVersion string) *locksv1.LockRequest {
		lr := wrappers.MakeLockRequest(name, ns).Lock("acme/infra", path, "default").Owner("", 0).Session(strings.ToLower(kind) + "/" + owner.GetName()).Obj()
		lr.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: owner.GetName(), UID: owner.GetUID(), Controller: ptr.To(true)}}
		return lr
	}

	It("does not let a Pod go on a request its creator made herself and gave it as owner: deleted and made again, or after a priority the manager may not ask for", func() {
		bob := holdKeyIn(ns, "escape")
		p := pod(ns, "escape", "acme/infra:escape")
		Expect(alice.Create(ctx, p)).To(Succeed())
		managers := waitingRequest(requestIn(ns, "pod", "escape"))

		By("alice deletes the manager's request, which waits (hers to delete), and puts one of her own in its place: owned by her Pod, on a free key")
		mine := ownedBy(workload.RequestName("pod", "escape"), "free-escape", p, "Pod", "v1")
		Eventually(func(g Gomega) {
			cur := &locksv1.LockRequest{}
			if err := admin.Get(ctx, client.ObjectKeyFromObject(managers), cur); err == nil && cur.Annotations[workload.AnnotationWorkload] != "" {
				// The manager made its request again before hers landed: delete that one too.
				g.Expect(client.IgnoreNotFound(alice.Delete(ctx, cur))).To(Succeed())
			}
			g.Expect(alice.Create(ctx, mine.DeepCopy())).To(Succeed())
		}).WithTimeout(wait).Should(Succeed())
		Expect(grantedRequest(mine).Annotations).To(HaveKeyWithValue(workload.AnnotationCreatedBy, "alice"), "hers, granted on the free key")

		By("the manager makes its own at the Pod's other request name, which waits behind bob; the Pod stays gated")
		second := &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: workload.RequestNames("pod", "escape")[1]}}
		waitingRequest(second)
		Expect(second.Spec.Locks).To(Equal([]locksv1.LockTarget{{Repo: "acme/infra", Path: "escape", Workspace: "default"}}))
		notLetGo(p)

		By("bob releases: the Pod is let go on the manager's request, and alice's request is left as it is")
		releaseRequest(bob)
		second = grantedRequest(second)
		Eventually(func() string { return reload(p).GetAnnotations()[workload.AnnotationFencingToken] }).WithTimeout(wait).
			Should(Equal(strconv.FormatInt(second.Status.FencingToken, 10)))
		Expect(reload(mine).(*locksv1.LockRequest).Status.Phase).To(Equal(locksv1.PhaseGranted), "never deleted nor released by the manager")

		By("a priority the manager may not ask for: its request is refused, and hers, made in its place, lets nothing go")
		q := pod(ns, "urgent", "acme/infra:escape")
		q.Annotations[workload.AnnotationPriority] = string(locksv1.PriorityCritical)
		Expect(alice.Create(ctx, q)).To(Succeed())
		Eventually(eventReasons(ns, "Pod", "urgent")).WithTimeout(wait).Should(ContainElement(workload.ReasonRequestRefused))
		Expect(alice.Create(ctx, ownedBy(workload.RequestName("pod", "urgent"), "free-urgent", q, "Pod", "v1"))).To(Succeed())
		notLetGo(q)
	})

	It("never deletes another user's request that has a workload's request name: the Job's request gets its other name", func() {
		bobs := wrappers.MakeLockRequest(workload.RequestName("job", "nightly"), ns).Lock("acme/infra", "bobs-own", "default").Owner("bob", 0).Obj()
		Expect(admin.Create(ctx, bobs)).To(Succeed())
		bobs = grantedRequest(bobs)
		By("alice may not delete bob's request herself")
		forbidden(alice.Delete(ctx, bobs.DeepCopy()), "turnstile-lockrequest-changes", "is held for bob")

		By("nor through the manager: her Job named nightly gets its request under the other name, and runs")
		j := job(ns, "nightly", "acme/infra:nightly")
		Expect(alice.Create(ctx, j)).To(Succeed())
		second := grantedRequest(&locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: workload.RequestNames("job", "nightly")[1]}})
		Expect(second.Annotations).To(HaveKeyWithValue(workload.AnnotationWorkloadUID, string(j.UID)))
		Eventually(func() *bool { return reload(j).(*batchv1.Job).Spec.Suspend }).WithTimeout(wait).Should(Equal(ptr.To(false)))
		Consistently(func(g Gomega) {
			cur := &locksv1.LockRequest{}
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(bobs), cur)).To(Succeed())
			g.Expect(cur.UID).To(Equal(bobs.UID))
			g.Expect(cur.Status.Phase).To(Equal(locksv1.PhaseGranted))
		}).WithTimeout(2*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), "bob's request is untouched")
	})

	It("takes no lock for a forged created-by: a workload is gated only as the policy gates it when it is created, and its lock annotations never change", func() {
		noRequest := func(kind, name string) {
			GinkgoHelper()
			Consistently(func(g Gomega) {
				for _, n := range workload.RequestNames(kind, name) {
					err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, &locksv1.LockRequest{})
					g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "request %s: %v", n, err)
				}
			}).WithTimeout(2*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), "no request for the made-up creator")
		}

		By("a suspended Job created without the lock annotation, saying it was created by carol, and labelled gated: refused")
		j := job(ns, "forged", "")
		j.Spec.Template.Annotations = nil
		j.Annotations = map[string]string{workload.AnnotationCreatedBy: "carol"}
		j.Spec.Suspend = ptr.To(true)
		withLabel := j.DeepCopy()
		withLabel.Labels = map[string]string{workload.LabelGated: "true"}
		forbidden(alice.Create(ctx, withLabel), "turnstile-workload-gate", "the label locks.turnstile.dev/gated is given by the Turnstile admission policy")
		By("created without the label, then given the lock annotation in its Pod template and the label: refused")
		Expect(alice.Create(ctx, j)).To(Succeed())
		patch := client.MergeFrom(j.DeepCopy())
		j.Labels = map[string]string{workload.LabelGated: "true"}
		j.Spec.Template.Annotations = map[string]string{workload.AnnotationLock: "acme/infra:forged"}
		err := alice.Patch(ctx, j, patch)
		forbidden(err, "turnstile-workload-gate", "job forged was not created gated")
		By("given the annotation alone, it is no gated Job: the manager never sees it")
		reload(j)
		patch = client.MergeFrom(j.DeepCopy())
		j.Spec.Template.Annotations = map[string]string{workload.AnnotationLock: "acme/infra:forged"}
		Expect(alice.Patch(ctx, j, patch)).To(Succeed())
		noRequest("job", "forged")

		By("a Pod claiming a made-up controlling Job (the Pods of a Job are not gated), labelled gated, carol its creator: refused")
		p := pod(ns, "forged", "acme/infra:forged")
		p.Annotations[workload.AnnotationCreatedBy] = "carol"
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "made-up", UID: types.UID("0f0f0f0f-0000-4000-8000-000000000000"), Controller: ptr.To(true)}}
		withLabelPod := p.DeepCopy()
		withLabelPod.Labels = map[string]string{workload.LabelGated: "true"}
		forbidden(alice.Create(ctx, withLabelPod), "turnstile-workload-gate", "the label locks.turnstile.dev/gated is given by the Turnstile admission policy")
		By("created without the label (not gated: it runs as any Pod she may create), its ownerReference removed, then labelled: refused")
		Expect(alice.Create(ctx, p)).To(Succeed())
		Expect(isGated(p)).To(BeFalse())
		patchPod := client.MergeFrom(p.DeepCopy())
		p.OwnerReferences = nil
		Expect(alice.Patch(ctx, p, patchPod)).To(Succeed())
		patchPod = client.MergeFrom(p.DeepCopy())
		p.Labels = map[string]string{workload.LabelGated: "true"}
		forbidden(alice.Patch(ctx, p, patchPod), "turnstile-workload-gate", "pod forged was not created gated")
		noRequest("pod", "forged")

		By("a gated Job's lock key, on the Job or in its Pod template (a suspended Job that never ran may change its template), cannot change after admission")
		holdKeyIn(ns, "keyed")
		g := job(ns, "keyed", "acme/infra:keyed")
		Expect(alice.Create(ctx, g)).To(Succeed())
		waitingOrGranted := waitingRequest(requestIn(ns, "job", "keyed"))
		for _, change := range []func(*batchv1.Job){
			func(j *batchv1.Job) { j.Spec.Template.Annotations[workload.AnnotationLock] = "acme/infra:other" },
			func(j *batchv1.Job) { j.Spec.Template.Annotations[workload.AnnotationCommand] = "plan" },
			func(j *batchv1.Job) { j.Annotations[workload.AnnotationLock] = "acme/infra:other" },
			func(j *batchv1.Job) { j.Annotations[workload.AnnotationCreatedBy] = "carol" },
			func(j *batchv1.Job) { delete(j.Labels, workload.LabelGated) },
		} {
			reload(g)
			patch := client.MergeFrom(g.DeepCopy())
			change(g)
			forbidden(alice.Patch(ctx, g, patch), "turnstile-workload-gate", "are fixed when it is created")
		}
		Expect(reload(waitingOrGranted).(*locksv1.LockRequest).Spec.Holder.Owner).To(Equal("alice"))
	})

	It("refuses deleting the request of a running gated Pod to its owner, a namespace admin and a cluster admin; releasing it stops the Pod", func() {
		bindIn(ns, "dana", "turnstile-admin")
		p := pod(ns, "running", "acme/infra:running")
		Expect(alice.Create(ctx, p)).To(Succeed())
		lr := grantedRequest(requestIn(ns, "pod", "running"))
		Eventually(func() bool { return isGated(reload(p).(*corev1.Pod)) }).WithTimeout(wait).Should(BeFalse())
		next := pod(ns, "next", "acme/infra:running")
		Expect(alice.Create(ctx, next)).To(Succeed())
		waitingRequest(requestIn(ns, "pod", "next"))

		want := "lockrequest pod-running holds the lock of the gated pod/running, which may still run: deleting it would hand the lock on while it runs"
		forbidden(alice.Delete(ctx, lr.DeepCopy()), "turnstile-workload-requests", want)
		forbidden(as("dana").Delete(ctx, lr.DeepCopy()), "turnstile-workload-requests", want)
		forbidden(admin.Delete(ctx, lr.DeepCopy()), "turnstile-workload-requests", want)
		out, err := framework.AdminKubectl(env, env.Kubectl()).Combined("--as=alice", "-n", ns, "delete", "lockrequest", lr.Name)
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring(want), "as kubectl shows it")
		Expect(reload(lr).(*locksv1.LockRequest).Status.Phase).To(Equal(locksv1.PhaseGranted))
		Expect(isGated(reload(next).(*corev1.Pod))).To(BeTrue())

		By("a request that waits may be deleted as any other (the manager asks again for its Pod)")
		Expect(alice.Delete(ctx, requestIn(ns, "pod", "next"))).To(Succeed())
		waitingRequest(requestIn(ns, "pod", "next"))

		By("alice releases the running Pod's request: the manager stops the Pod, and the next one is let go")
		Expect(alice.Patch(ctx, lr, client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"release":true}}`)))).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})) }).
			WithTimeout(wait).Should(BeTrue(), "the Pod whose lock was released is deleted")
		grantedRequest(requestIn(ns, "pod", "next"))
		Eventually(func() bool { return isGated(reload(next).(*corev1.Pod)) }).WithTimeout(wait).Should(BeFalse())
	})

	It("keeps the manager's stamp its own: a requester can neither forge it, change it, nor give the manager's request an owner", func() {
		By("a request of alice's own with the stamp: refused")
		forged := wrappers.MakeLockRequest("forged", ns).Lock("acme/infra", "stamp", "default").Owner("", 0).MadeFor("pod", "anything").Obj()
		forbidden(alice.Create(ctx, forged), "turnstile-workload-requests", "only it sets them, and you are alice")

		p := pod(ns, "stamped", "acme/infra:stamp")
		Expect(alice.Create(ctx, p)).To(Succeed())
		lr := grantedRequest(requestIn(ns, "pod", "stamped"))
		other := pod(ns, "other", "acme/infra:stamp-other")
		Expect(alice.Create(ctx, other)).To(Succeed())
		for what, change := range map[string]func(*locksv1.LockRequest){
			"its stamp's uid": func(lr *locksv1.LockRequest) { lr.Annotations[workload.AnnotationWorkloadUID] = string(other.UID) },
			"its stamp":       func(lr *locksv1.LockRequest) { delete(lr.Annotations, workload.AnnotationWorkload) },
			"an owner": func(lr *locksv1.LockRequest) {
				lr.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: other.Name, UID: other.UID}}
			},
		} {
			By("alice, who owns the request, changes " + what + ": refused")
			reload(lr)
			patch := client.MergeFrom(lr.DeepCopy())
			change(lr)
			err := alice.Patch(ctx, lr, patch)
			Expect(err).To(HaveOccurred(), what)
			Expect(err.Error()).To(ContainSubstring("ValidatingAdmissionPolicy 'turnstile-workload-requests'"), what)
		}
		By("what is hers to change she still may: its priority, up to maxPriority")
		Expect(alice.Patch(ctx, reload(lr), client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"priority":"High"}}`)))).To(Succeed())
	})

	It("gets a request for a Pod of any valid name, 253 characters included", func() {
		name := strings.Repeat("migrate.", 31) + "abcde" // 253 characters
		Expect(name).To(HaveLen(253))
		p := pod(ns, name, "acme/infra:long-name")
		Expect(alice.Create(ctx, p)).To(Succeed())
		lr := grantedRequest(requestIn(ns, "pod", name))
		Expect(len(lr.Name)).To(BeNumerically("<=", 253))
		Expect(len(lr.Spec.Holder.Session)).To(BeNumerically("<=", 253))
		Expect(lr.Spec.Holder.Session).To(HavePrefix("pod/migrate.migrate."))
		Eventually(func() bool { return isGated(reload(p).(*corev1.Pod)) }).WithTimeout(wait).Should(BeFalse())
	})

	It("keeps the lock of a Job that says it has finished while one of its Pods still runs", func() {
		j := job(ns, "straggler", "acme/infra:straggler")
		Expect(alice.Create(ctx, j)).To(Succeed())
		lr := grantedRequest(requestIn(ns, "job", "straggler"))
		Eventually(func() *bool { return reload(j).(*batchv1.Job).Spec.Suspend }).WithTimeout(wait).Should(Equal(ptr.To(false)))
		By("a Pod of the Job runs (made here as the Job controller makes one: labelled with the Job's uid); the Job says Complete before it has stopped")
		straggler := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "straggler-0", Labels: map[string]string{batchv1.ControllerUidLabel: string(j.UID), batchv1.JobNameLabel: j.Name}},
			Spec:       *j.Spec.Template.Spec.DeepCopy(),
		}
		Expect(admin.Create(ctx, straggler)).To(Succeed())
		markJobComplete(j)
		Consistently(func(g Gomega) {
			cur := &locksv1.LockRequest{}
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(lr), cur)).To(Succeed())
			g.Expect(cur.Spec.Release).To(BeFalse())
			g.Expect(cur.Status.Phase).To(Equal(locksv1.PhaseGranted))
		}).WithTimeout(2*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), "its lock is kept while the Pod runs")
		By("the Pod stops: the lock is released")
		markPodSucceeded(straggler)
		Eventually(func() locksv1.LockRequestPhase { return reload(lr).(*locksv1.LockRequest).Status.Phase }).WithTimeout(wait).Should(Equal(locksv1.PhaseReleased))
	})
})

// bindIn binds user to the shipped clusterRole in namespace ns and waits until RBAC says so.
func bindIn(ns, user, clusterRole string) {
	GinkgoHelper()
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user + "-" + clusterRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
	}
	Expect(admin.Create(ctx, rb)).To(Succeed())
	Eventually(func(g Gomega) {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "delete", Group: locksv1.GroupVersion.Group, Resource: "lockrequests"},
		}}
		g.Expect(admin.Create(ctx, review)).To(Succeed())
		g.Expect(review.Status.Allowed).To(BeTrue(), review.Status.Reason)
	}).WithTimeout(settle).WithPolling(poll).Should(Succeed())
}

// eventReasons are the reasons of the events about the object kind/name in ns.
func eventReasons(ns, kind, name string) func() []string {
	return func() []string {
		var evs corev1.EventList
		if err := admin.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return []string{err.Error()}
		}
		var out []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name {
				out = append(out, e.Reason)
			}
		}
		return out
	}
}

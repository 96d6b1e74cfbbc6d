package admission

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// A fleet's partition opt-out (docs/fleet.md "Opting out", config/admission/keep-running.yaml):
// fleet.turnstile.dev/on-partition: keep-running holds a lock past any partition, so only a user
// with the keeprunning verb writes it, on a request or on a gated workload (whose request the
// manager makes with its own rights: the creator is judged when the workload is created).
var _ = Describe("The keep-running opt-out of a fleet's partition stop", func() {
	const policy = "turnstile-keep-running"
	keepAnn := map[string]string{locksv1.AnnotationOnPartition: locksv1.OnPartitionKeepRunning}
	// alice, a requester, is the one refused.
	verbDenial := func(ref, ns, kind string) string {
		return denial(ref, policy, "fleet.turnstile.dev/on-partition: keep-running keeps the "+kind+"'s lock held while its fleet spoke cannot reach the hub, "+
			"and on the hub until it is released: it needs the keeprunning permission on lockrequests in namespace "+ns+
			" (the turnstile-admin role, or a Role with verbs [keeprunning], resources [lockrequests]), which alice"+
			" does not have; ask an admin, or leave the annotation out (the holder is then stopped on a partition, before the hub hands its lock on)")
	}
	keeping := func(ns, name string) *locksv1.LockRequest {
		lr := request(ns, name, "")
		lr.Annotations = map[string]string{locksv1.AnnotationOnPartition: locksv1.OnPartitionKeepRunning}
		return lr
	}

	It("lets only a user with keeprunning make a keep-running request, with no ttl, and nobody add, change or remove it afterwards", func() {
		t := newTeam()
		By("alice, a requester, is refused, saying what she needs (the policy loads asynchronously: the first refusal is waited for)")
		Eventually(func() error { return t.alice.Create(ctx, keeping(t.ns, "migrate"), client.DryRunAll) }).WithTimeout(settle).WithPolling(poll).
			Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy '" + policy + "'")))
		expectDenied(t.alice.Create(ctx, keeping(t.ns, "migrate")), verbDenial(lockRequestRef("migrate"), t.ns, "lock request"))

		By("dana, the namespace's admin (turnstile-admin), may; so may bob with a Role of the verb alone beside his requester's")
		Expect(t.dana.Create(ctx, keeping(t.ns, "migrate"))).To(Succeed())
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: t.ns, Name: "keep-running"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"locks.turnstile.dev"}, Resources: []string{"lockrequests"}, Verbs: []string{"keeprunning"}}}}
		Expect(admin.Create(ctx, role)).To(Succeed())
		Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: t.ns, Name: "bob-keep-running"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "bob"}}})).To(Succeed())
		Eventually(func() error { return t.bob.Create(ctx, keeping(t.ns, "bobs")) }).WithTimeout(settle).WithPolling(poll).Should(Succeed())

		By("the manager, which makes gated workloads' requests with it (its shipped role has the verb)")
		mgrName, mgrGroups := serviceAccount("turnstile-system", "turnstile-controller-manager")
		forAlice := keeping(t.ns, "for-alice")
		forAlice.Spec.Holder.Owner = "alice"
		Expect(as(mgrName, mgrGroups...).Create(ctx, forAlice)).To(Succeed())

		By("its only value is keep-running")
		odd := keeping(t.ns, "odd")
		odd.Annotations[locksv1.AnnotationOnPartition] = "Keep-Running"
		err := t.dana.Create(ctx, odd)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring(`annotation fleet.turnstile.dev/on-partition must be keep-running, not "Keep-Running"; leave it out to have the holder stopped when its fleet spoke cannot reach the hub (the default)`))

		By("no ttl with it, on create or added later")
		timed := keeping(t.ns, "timed")
		timed.Spec.TTL = &metav1.Duration{Duration: 3600e9}
		noTTL := "fleet.turnstile.dev/on-partition: keep-running and a ttl (spec.ttl) cannot go together: a keep-running grant has no end on the hub (a ttl a spoke cut off from it cannot renew would hand the lock on while its holder runs); leave out the ttl: the lock is held until released"
		err = t.dana.Create(ctx, timed)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring(noTTL))
		mine := &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: t.ns, Name: "migrate"}}
		err = patch(t.dana, mine.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"ttl":"1h"}}`)))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring(noTTL))

		By("fixed once made: removed by its admin, or added by alice to her own request, refused")
		fixed := func(name string) string {
			return denial(lockRequestRef(name), policy, "lock request "+name+": annotation fleet.turnstile.dev/on-partition is fixed when the lock request is made "+
				"(its hub request names the spoke's Lease or none, which cannot change): make a new request (also to have a keep-running holder stopped on a partition again)")
		}
		expectDenied(patch(t.dana, mine.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"fleet.turnstile.dev/on-partition":null}}}`))), fixed("migrate"))
		plain := request(t.ns, "plain", "")
		Expect(t.alice.Create(ctx, plain)).To(Succeed())
		add := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"fleet.turnstile.dev/on-partition":"keep-running"}}}`))
		expectDenied(patch(t.alice, plain.DeepCopy(), add), fixed("plain"))
		expectDenied(patch(t.dana, plain.DeepCopy(), add), fixed("plain"))

		By("an update that keeps it is not judged: dana releases her request")
		Expect(patch(t.dana, mine.DeepCopy(), release)).To(Succeed())
	})

	It("judges a gated Job's or Pod's creator when it is created: alice without keeprunning is refused, dana may; fixed afterwards; no ttl; a Job's own Pods are not judged again", func() {
		t := newTeam()
		workloads := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "keep-running-workloads"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"*"}},
			{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"*"}}}}
		if err := admin.Create(ctx, workloads); err != nil {
			Expect(apierrors.IsAlreadyExists(err)).To(BeTrue(), "%v", err)
		}
		bind(t.ns, workloads.Name, rbacv1.Subject{Kind: rbacv1.UserKind, Name: "alice"}, rbacv1.Subject{Kind: rbacv1.UserKind, Name: "dana"})
		job := func(name string, own, template map[string]string) *batchv1.Job {
			j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: t.ns, Name: name, Annotations: map[string]string{"locks.turnstile.dev/lock": "acme/infra:db"}},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "migrate", Image: "migrate:1"}}}}}}
			for k, v := range own {
				j.Annotations[k] = v
			}
			if template != nil {
				j.Spec.Template.Annotations = template
			}
			return j
		}
		jobRef := func(name string) string { return fmt.Sprintf("jobs.batch %q", name) }

		By("alice's gated Job with the opt-out, on the Job or on its Pod template: refused")
		Eventually(func() error { return t.alice.Create(ctx, job("migrate", keepAnn, nil), client.DryRunAll) }).WithTimeout(settle).WithPolling(poll).
			Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy '" + policy + "'")))
		expectDenied(t.alice.Create(ctx, job("migrate", keepAnn, nil)), verbDenial(jobRef("migrate"), t.ns, "job"))
		expectDenied(t.alice.Create(ctx, job("migrate", nil, keepAnn)), verbDenial(jobRef("migrate"), t.ns, "job"))
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: t.ns, Name: "migrate",
			Annotations: map[string]string{"locks.turnstile.dev/lock": "acme/infra:db", locksv1.AnnotationOnPartition: locksv1.OnPartitionKeepRunning}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "migrate", Image: "migrate:1"}}}}
		expectDenied(t.alice.Create(ctx, pod.DeepCopy()), verbDenial(fmt.Sprintf("pods %q", "migrate"), t.ns, "pod"))

		By("dana's: admitted, gated as any other (the manager will carry the opt-out to its request)")
		mine := job("migrate", keepAnn, nil)
		Expect(t.dana.Create(ctx, mine)).To(Succeed())
		if mutating {
			Expect(mine.Labels).To(HaveKeyWithValue("locks.turnstile.dev/gated", "true"))
			Expect(mine.Spec.Suspend).To(HaveValue(BeTrue()))
		}

		By("no ttl with it")
		timed := job("timed", map[string]string{locksv1.AnnotationOnPartition: locksv1.OnPartitionKeepRunning, "locks.turnstile.dev/ttl": "1h"}, nil)
		err := t.dana.Create(ctx, timed)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("fleet.turnstile.dev/on-partition: keep-running and a ttl (annotation locks.turnstile.dev/ttl) cannot go together"))

		By("fixed once created: alice cannot add it to her gated Job, nor dana remove it from hers")
		plain := job("plain", nil, nil)
		Expect(t.alice.Create(ctx, plain)).To(Succeed())
		fixedJob := func(name string) string {
			return denial(jobRef(name), policy, "job "+name+": annotation fleet.turnstile.dev/on-partition is fixed when the job is created: create a new one (also to have a keep-running holder stopped on a partition again)")
		}
		expectDenied(patch(t.alice, plain.DeepCopy(), client.RawPatch(types.MergePatchType,
			[]byte(`{"spec":{"template":{"metadata":{"annotations":{"fleet.turnstile.dev/on-partition":"keep-running"}}}}}`))), fixedJob("plain"))
		expectDenied(patch(t.dana, mine.DeepCopy(), client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"fleet.turnstile.dev/on-partition":null}}}`))), fixedJob("migrate"))

		By("the Job controller makes dana's Job's Pods from its template: not judged again (they are not gated)")
		jcName, jcGroups := serviceAccount("kube-system", "job-controller")
		jobsPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: t.ns, Name: "migrate-abcde", Annotations: keepAnn,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: mine.Name, UID: mine.UID, Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "migrate", Image: "migrate:1"}}}}
		Expect(rawAs(jcName, jcGroups...).Create(ctx, jobsPod)).To(Succeed())
	})
})

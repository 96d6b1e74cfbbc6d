package gated

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

// holdKeyIn makes bob hold key (repo acme/infra, path) in namespace ns with a LockRequest of
// his own, and returns it once granted.
func holdKeyIn(ns, path string) *locksv1.LockRequest {
	GinkgoHelper()
	lr := wrappers.MakeLockRequest("bob-holds-"+path, ns).Lock("acme/infra", path, "default").Owner("bob", 0).Obj()
	Expect(admin.Create(ctx, lr)).To(Succeed())
	return grantedRequest(lr)
}

// releaseRequest releases lr, as an admin.
func releaseRequest(lr *locksv1.LockRequest) {
	GinkgoHelper()
	Expect(admin.Patch(ctx, lr, client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"release":true}}`)))).To(Succeed())
}

// requestIn is (the key of) the request the manager makes first for the workload of kind and name.
func requestIn(ns, kind, name string) *locksv1.LockRequest {
	return &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: workload.RequestName(kind, name)}}
}

// waitingRequest waits until lr exists and waits in its queue, and returns it.
func waitingRequest(lr *locksv1.LockRequest) *locksv1.LockRequest {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(lr), lr)).To(Succeed())
		g.Expect(lr.Status.Phase).To(Equal(locksv1.PhasePending))
		g.Expect(lr.Status.BlockedBy).NotTo(BeEmpty())
	}).WithTimeout(wait).Should(Succeed())
	return lr
}

// grantedRequest waits until lr exists and is granted, and returns it.
func grantedRequest(lr *locksv1.LockRequest) *locksv1.LockRequest {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(lr), lr)).To(Succeed())
		g.Expect(lr.Status.Phase).To(Equal(locksv1.PhaseGranted))
	}).WithTimeout(wait).Should(Succeed())
	return lr
}

// reload reads obj again from the API server.
func reload(obj client.Object) client.Object {
	GinkgoHelper()
	Expect(admin.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	return obj
}

// markPodSucceeded does what the kubelet would when the Pod's container exits 0.
func markPodSucceeded(p *corev1.Pod) {
	GinkgoHelper()
	reload(p)
	p.Status.Phase = corev1.PodSucceeded
	Expect(admin.Status().Update(ctx, p)).To(Succeed())
}

// markJobComplete does what the Job controller would when the Job's Pod succeeds.
func markJobComplete(j *batchv1.Job) {
	GinkgoHelper()
	reload(j)
	now := metav1.Now()
	j.Status.StartTime, j.Status.CompletionTime, j.Status.Succeeded = &now, &now, 1
	j.Status.Conditions = append(j.Status.Conditions,
		batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now},
		batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now})
	Expect(admin.Status().Update(ctx, j)).To(Succeed())
}

// isGated says whether the Pod still has Turnstile's scheduling gate.
func isGated(p *corev1.Pod) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == workload.SchedulingGate {
			return true
		}
	}
	return false
}

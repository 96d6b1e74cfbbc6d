package workload

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// laggingRequests is a manager's cache that has not seen a LockRequest's latest change: Get
// serves the version it holds; everything else, and every write, goes to the API server.
type laggingRequests struct {
	client.Client
	stale *locksv1.LockRequest
}

func (l laggingRequests) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if lr, ok := obj.(*locksv1.LockRequest); ok && key == client.ObjectKeyFromObject(l.stale) {
		l.stale.DeepCopyInto(lr)
		return nil
	}
	return l.Client.Get(ctx, key, obj, opts...)
}

// TestGrantSeenStaleDoesNotLetGo: the manager's cache still shows a Pod's request Granted, but
// the API server has it Released (force-unlocked). The Pod stays gated, with no fencing token:
// its lock is read live before it is let go. A real kube-apiserver and etcd; the lock
// controller's writes are made by the test (the request's status), as the input of this one.
func TestGrantSeenStaleDoesNotLetGo(t *testing.T) {
	env, err := framework.Start("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	c := env.Client
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gated-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "migrate", Labels: map[string]string{LabelGated: "true"},
			Annotations: map[string]string{AnnotationLock: "acme/infra:db"}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, SchedulingGates: []corev1.PodSchedulingGate{{Name: SchedulingGate}},
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	lr := wrappers.MakeLockRequest(RequestName("pod", pod.Name), ns.Name).Lock("acme/infra", "db", "default").Owner("alice", 0).Session("pod/migrate").Obj()
	lr.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}}
	if err := c.Create(ctx, lr); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	lr.Status = locksv1.LockRequestStatus{Phase: locksv1.PhaseGranted, FencingToken: 41, GrantedAt: &now, ExpiresAt: &now}
	if err := c.Status().Update(ctx, lr); err != nil {
		t.Fatal(err)
	}
	stale := lr.DeepCopy()
	lr.Status.Phase, lr.Status.FinishedAt = locksv1.PhaseReleased, &now
	if err := c.Status().Update(ctx, lr); err != nil {
		t.Fatal(err)
	}

	recorder := events.NewFakeRecorder(10)
	r := &Reconciler{kind: podKind{}, client: laggingRequests{Client: c, stale: stale}, workloads: c, live: c, recorder: recorder, clock: clock.RealClock{}}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pod)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == SchedulingGate }) {
		t.Errorf("the Pod was let go on a grant its request no longer has: gates %v", pod.Spec.SchedulingGates)
	}
	if tok, ok := pod.Annotations[AnnotationFencingToken]; ok {
		t.Errorf("the Pod got fencing token %s of a grant that had ended", tok)
	}
}

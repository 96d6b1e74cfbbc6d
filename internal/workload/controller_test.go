package workload

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/whoami"
)

// These tests run the Reconciler itself against a real kube-apiserver and etcd, without the
// admission policies (as where they are not installed): what they prove is what the
// controller does on its own. The lock controller does not run: the test writes a request's
// status as it would. test/gated proves the whole, with the policies and the shipped roles.

// self is the manager's user name in these tests: the creator its requests carry.
const self = "system:serviceaccount:turnstile-system:turnstile-controller-manager"

var (
	envOnce sync.Once
	env     *framework.Env
	envErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

// apiServer is a client of the API server shared by this package's tests, and a fresh
// namespace for the calling test.
func apiServer(t *testing.T) (client.Client, string) {
	t.Helper()
	envOnce.Do(func() { env, envErr = framework.Start("") })
	if envErr != nil {
		t.Fatal(envErr)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gated-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return env.Client, ns.Name
}

// cacheView is a manager's cache that lags behind the API server for LockRequests: Get serves
// the version it holds (nil: it has not seen the request, or saw it deleted); everything else,
// and every write, goes to the API server.
type cacheView struct {
	client.Client
	requests map[client.ObjectKey]*locksv1.LockRequest
}

func (v cacheView) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if lr, ok := obj.(*locksv1.LockRequest); ok {
		if held, ok := v.requests[key]; ok {
			if held == nil {
				return apierrors.NewNotFound(schema.GroupResource{Group: locksv1.GroupVersion.Group, Resource: "lockrequests"}, key.Name)
			}
			held.DeepCopyInto(lr)
			return nil
		}
	}
	return v.Client.Get(ctx, key, obj, opts...)
}

// reconciler is the controller of kind as the manager self runs it, reading LockRequests
// through cached.
func reconciler(k kind, c, cached client.Client) (*Reconciler, *events.FakeRecorder) {
	recorder := events.NewFakeRecorder(100)
	return &Reconciler{kind: k, client: cached, workloads: c, live: c, recorder: recorder, clock: clock.RealClock{}, self: whoami.Known(self)}, recorder
}

func reconcileOnce(t *testing.T, r *Reconciler, obj client.Object) {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)}); err != nil {
		t.Fatal(err)
	}
}

// gatedPod is a Pod as the admission policies make it: labelled, gated, its creator recorded.
func gatedPod(ns, name, locks string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{LabelGated: "true"},
			Annotations: map[string]string{AnnotationLock: locks, AnnotationCreatedBy: "alice"}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, SchedulingGates: []corev1.PodSchedulingGate{{Name: SchedulingGate}},
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
}

// gatedJob is a Job as the admission policies make it: labelled, suspended, its creator recorded.
func gatedJob(ns, name, locks string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{LabelGated: "true"},
			Annotations: map[string]string{AnnotationLock: locks, AnnotationCreatedBy: "alice"}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
	}
}

func create(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, c client.Client, obj client.Object) client.Object {
	t.Helper()
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// requestOf is the request the manager made for the workload of kind and name, read live.
func requestOf(t *testing.T, c client.Client, ns, kind, name string) *locksv1.LockRequest {
	t.Helper()
	lr := &locksv1.LockRequest{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: RequestName(kind, name)}, lr); err != nil {
		t.Fatalf("the %s's request: %v", kind, err)
	}
	return lr
}

// grant writes lr Granted with token, as the lock controller would.
func grant(t *testing.T, c client.Client, lr *locksv1.LockRequest, token int64) *locksv1.LockRequest {
	t.Helper()
	now := metav1.Now()
	expires := metav1.NewTime(now.Add(30 * time.Minute))
	lr.Status = locksv1.LockRequestStatus{Phase: locksv1.PhaseGranted, FencingToken: token, GrantedAt: &now, ExpiresAt: &expires, ObservedGeneration: lr.Generation}
	if err := c.Status().Update(context.Background(), lr); err != nil {
		t.Fatal(err)
	}
	return lr
}

func gated(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == SchedulingGate })
}

// eventsWith are the recorded events that contain s.
func eventsWith(r *events.FakeRecorder, s string) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			if strings.Contains(e, s) {
				out = append(out, e)
			}
		default:
			return out
		}
	}
}

// TestGrantSeenStaleDoesNotLetGo: the manager's cache still shows a Pod's request Granted, but
// the API server has it Released (force-unlocked). The Pod stays gated, with no fencing token:
// its lock is read live before it is let go.
func TestGrantSeenStaleDoesNotLetGo(t *testing.T) {
	c, ns := apiServer(t)
	ctx := context.Background()
	pod := gatedPod(ns, "migrate", "acme/infra:db")
	create(t, c, pod)
	r, _ := reconciler(podKind{}, c, c)
	reconcileOnce(t, r, pod)
	lr := grant(t, c, requestOf(t, c, ns, "pod", pod.Name), 41)
	stale := lr.DeepCopy()
	now := metav1.Now()
	lr.Status.Phase, lr.Status.FinishedAt = locksv1.PhaseReleased, &now
	if err := c.Status().Update(ctx, lr); err != nil {
		t.Fatal(err)
	}

	r, _ = reconciler(podKind{}, c, cacheView{Client: c, requests: map[client.ObjectKey]*locksv1.LockRequest{client.ObjectKeyFromObject(stale): stale}})
	reconcileOnce(t, r, pod)
	get(t, c, pod)
	if !gated(pod) {
		t.Errorf("the Pod was let go on a grant its request no longer has: gates %v", pod.Spec.SchedulingGates)
	}
	if tok, ok := pod.Annotations[AnnotationFencingToken]; ok {
		t.Errorf("the Pod got fencing token %s of a grant that had ended", tok)
	}
}

// TestLetGoOnlyOnItsLocks: where no policy fixes a workload's annotations, a Pod whose lock
// annotation changed after its request was made is not let go on that request's grant (it is
// for other locks); with the annotation it was made for, it is.
func TestLetGoOnlyOnItsLocks(t *testing.T) {
	c, ns := apiServer(t)
	ctx := context.Background()
	pod := gatedPod(ns, "migrate", "acme/infra:free")
	create(t, c, pod)
	r, recorder := reconciler(podKind{}, c, c)
	reconcileOnce(t, r, pod)
	grant(t, c, requestOf(t, c, ns, "pod", pod.Name), 5)

	patch := client.MergeFrom(pod.DeepCopy())
	pod.Annotations[AnnotationLock] = "acme/infra:busy"
	if err := c.Patch(ctx, pod, patch); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, pod)
	if get(t, c, pod); !gated(pod) || pod.Annotations[AnnotationFencingToken] != "" {
		t.Fatalf("the Pod, whose annotation now names acme/infra:busy, was let go on a grant of acme/infra:free: gates %v, token %q",
			pod.Spec.SchedulingGates, pod.Annotations[AnnotationFencingToken])
	}
	if got := eventsWith(recorder, ReasonMismatch); len(got) != 1 || !strings.Contains(got[0], "asks for other locks than the annotation locks.turnstile.dev/lock") {
		t.Errorf("events %s: %q", ReasonMismatch, got)
	}

	patch = client.MergeFrom(pod.DeepCopy())
	pod.Annotations[AnnotationLock] = "acme/infra:free"
	if err := c.Patch(ctx, pod, patch); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, pod)
	if get(t, c, pod); gated(pod) || pod.Annotations[AnnotationFencingToken] != "5" {
		t.Errorf("with the annotation its request was made for, the Pod is let go with token 5: gates %v, token %q",
			pod.Spec.SchedulingGates, pod.Annotations[AnnotationFencingToken])
	}
}

// TestRequestDeletedStopsWorkload: a workload let go whose request is deleted (admission
// refuses that while it holds; here no policy is installed) runs without its lock: the Pod is
// deleted, the Job suspended, its token removed and the loss recorded, and no new request is
// made for it.
func TestRequestDeletedStopsWorkload(t *testing.T) {
	c, ns := apiServer(t)
	ctx := context.Background()
	for _, tc := range []struct {
		kind kind
		obj  client.Object
	}{
		{podKind{}, gatedPod(ns, "long", "acme/infra:net")},
		{jobKind{}, gatedJob(ns, "long", "acme/infra:fw")},
	} {
		create(t, c, tc.obj)
		r, recorder := reconciler(tc.kind, c, c)
		reconcileOnce(t, r, tc.obj)
		lr := grant(t, c, requestOf(t, c, ns, tc.kind.name(), "long"), 9)
		reconcileOnce(t, r, tc.obj)
		if get(t, c, tc.obj); tc.obj.GetAnnotations()[AnnotationFencingToken] != "9" {
			t.Fatalf("the %s was not let go", tc.kind.name())
		}
		if err := c.Delete(ctx, lr); err != nil {
			t.Fatal(err)
		}
		reconcileOnce(t, r, tc.obj)
		switch o := tc.obj.(type) {
		case *corev1.Pod:
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				t.Errorf("the Pod whose request was deleted runs on (%v)", err)
			}
		case *batchv1.Job:
			get(t, c, o)
			if !ptr.Deref(o.Spec.Suspend, false) || o.Annotations[AnnotationFencingToken] != "" || o.Annotations[AnnotationLockEnded] == "" {
				t.Errorf("the Job whose request was deleted: suspend %v, token %q, %s %q",
					o.Spec.Suspend, o.Annotations[AnnotationFencingToken], AnnotationLockEnded, o.Annotations[AnnotationLockEnded])
			}
			reconcileOnce(t, r, o)
			if err := c.Get(ctx, client.ObjectKeyFromObject(lr), &locksv1.LockRequest{}); !apierrors.IsNotFound(err) {
				t.Errorf("the stopped Job asked for its lock again (%v)", err)
			}
		}
		if got := eventsWith(recorder, ReasonLost); len(got) != 1 || !strings.Contains(got[0], "lost its lock: its lock request was deleted") {
			t.Errorf("%s: events %s: %q", tc.kind.name(), ReasonLost, got)
		}
	}
}

// TestRequestGoneReadLive: a cache that does not show a running Pod's request (it lags) does
// not get the Pod stopped: the API server is asked first.
func TestRequestGoneReadLive(t *testing.T) {
	c, ns := apiServer(t)
	pod := gatedPod(ns, "run", "acme/infra:db")
	create(t, c, pod)
	r, _ := reconciler(podKind{}, c, c)
	reconcileOnce(t, r, pod)
	lr := grant(t, c, requestOf(t, c, ns, "pod", pod.Name), 3)
	reconcileOnce(t, r, pod)

	r, _ = reconciler(podKind{}, c, cacheView{Client: c, requests: map[client.ObjectKey]*locksv1.LockRequest{client.ObjectKeyFromObject(lr): nil}})
	reconcileOnce(t, r, pod)
	if p := get(t, c, pod).(*corev1.Pod); p.DeletionTimestamp != nil || p.Annotations[AnnotationFencingToken] != "3" {
		t.Errorf("the running Pod was stopped though its request exists: deleting %v, token %q", p.DeletionTimestamp, p.Annotations[AnnotationFencingToken])
	}
}

// TestOwnerSuspendKept: a Job that runs with its token and that its owner suspends is left
// suspended (it keeps its lock, renewed, and its owner may resume it), not let go again.
func TestOwnerSuspendKept(t *testing.T) {
	c, ns := apiServer(t)
	ctx := context.Background()
	j := gatedJob(ns, "apply", "acme/infra:vpc")
	create(t, c, j)
	r, _ := reconciler(jobKind{}, c, c)
	reconcileOnce(t, r, j)
	grant(t, c, requestOf(t, c, ns, "job", j.Name), 12)
	reconcileOnce(t, r, j)
	if get(t, c, j); ptr.Deref(j.Spec.Suspend, true) {
		t.Fatal("the Job was not let go")
	}
	patch := client.MergeFrom(j.DeepCopy())
	j.Spec.Suspend = ptr.To(true)
	if err := c.Patch(ctx, j, patch); err != nil {
		t.Fatal(err)
	}
	reconcileOnce(t, r, j)
	if get(t, c, j); !ptr.Deref(j.Spec.Suspend, false) {
		t.Error("the owner's suspend was undone")
	}
	if j.Annotations[AnnotationFencingToken] != "12" || j.Annotations[AnnotationLockEnded] != "" {
		t.Errorf("the suspended Job was taken for one that lost its lock: token %q, %s %q",
			j.Annotations[AnnotationFencingToken], AnnotationLockEnded, j.Annotations[AnnotationLockEnded])
	}
	if lr := requestOf(t, c, ns, "job", j.Name); lr.Spec.Release {
		t.Error("a suspended Job's lock was released; it may be resumed")
	}
}

// TestEveryValidNameGetsARequest: a Pod named with 253 characters gets its request, which the
// API server accepts (its name, session and reason within the CRD's limits).
func TestEveryValidNameGetsARequest(t *testing.T) {
	c, ns := apiServer(t)
	for _, name := range []string{longName(250), longName(253), cutAt(253, 237, ".")} {
		pod := gatedPod(ns, name, "acme/infra:long")
		create(t, c, pod)
		r, recorder := reconciler(podKind{}, c, c)
		reconcileOnce(t, r, pod)
		lr := requestOf(t, c, ns, "pod", name)
		if lr.Spec.Holder.Session != session("pod", name) || lr.Annotations[AnnotationWorkload] != "pod/"+name {
			t.Errorf("the request of a Pod of %d characters: session %q, workload %q", len(name), lr.Spec.Holder.Session, lr.Annotations[AnnotationWorkload])
		}
		if refused := eventsWith(recorder, ReasonRequestRefused); len(refused) > 0 {
			t.Errorf("refused: %q", refused)
		}
	}
}

// TestStopGraceCapsTheStoppedPods: with a stop grace (a spoke agent's --fleet-grace), a workload
// stopped on a lost lock terminates within it, though its Pods ask for 30 s: the Pod is deleted
// with gracePeriodSeconds 15, and the Job, once suspended, has its own Pods deleted with 15 too
// (the Job controller would give them their 30); a Pod that only wears the Job's label is not
// the Job's and is left alone. Without a stop grace (one cluster), a Pod keeps its own.
func TestStopGraceCapsTheStoppedPods(t *testing.T) {
	c, ns := apiServer(t)
	ctx := context.Background()
	// bind puts a Pod on a node, as the scheduler does: a Pod on no node is deleted at once
	// whatever its grace, one on a node waits for its kubelet.
	bind := func(p *corev1.Pod) {
		t.Helper()
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}
		if err := c.SubResource("binding").Create(ctx, p, b); err != nil {
			t.Fatal(err)
		}
	}
	deletionGrace := func(p *corev1.Pod) int64 {
		t.Helper()
		get(t, c, p)
		if p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil {
			t.Fatalf("Pod %s is not being deleted", p.Name)
		}
		return *p.DeletionGracePeriodSeconds
	}
	grace := 15 * time.Second
	for _, tc := range []struct {
		name  string
		limit *time.Duration
		want  int64
	}{{"one cluster", nil, 30}, {"spoke", &grace, 15}} {
		t.Run(tc.name, func(t *testing.T) {
			letGo := func(k kind, obj client.Object) (*Reconciler, *locksv1.LockRequest) {
				t.Helper()
				create(t, c, obj)
				r, _ := reconciler(k, c, c)
				r.stopGrace = tc.limit
				reconcileOnce(t, r, obj)
				lr := grant(t, c, requestOf(t, c, ns, k.name(), obj.GetName()), 7)
				reconcileOnce(t, r, obj)
				return r, lr
			}
			name := strings.ReplaceAll(tc.name, " ", "-")

			pod := gatedPod(ns, "pod-"+name, "acme/infra:net-"+name)
			pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
			r, lr := letGo(podKind{}, pod)
			bind(get(t, c, pod).(*corev1.Pod))
			if err := c.Delete(ctx, lr); err != nil {
				t.Fatal(err)
			}
			reconcileOnce(t, r, pod)
			if got := deletionGrace(pod); got != tc.want {
				t.Errorf("the stopped Pod is deleted with a grace of %d s, want %d", got, tc.want)
			}

			job := gatedJob(ns, "job-"+name, "acme/infra:fw-"+name)
			job.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
			r, lr = letGo(jobKind{}, job)
			get(t, c, job)
			// The Job's Pod, as the Job controller makes it, and one that only wears its label.
			mine := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: job.Name + "-abcde",
				Labels:          map[string]string{batchv1.ControllerUidLabel: string(job.UID)},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
				Spec: *job.Spec.Template.Spec.DeepCopy()}
			dressed := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dressed-" + name,
				Labels: map[string]string{batchv1.ControllerUidLabel: string(job.UID)}}, Spec: *job.Spec.Template.Spec.DeepCopy()}
			for _, p := range []*corev1.Pod{mine, dressed} {
				create(t, c, p)
				bind(p)
			}
			if err := c.Delete(ctx, lr); err != nil {
				t.Fatal(err)
			}
			reconcileOnce(t, r, job)
			if !ptr.Deref(get(t, c, job).(*batchv1.Job).Spec.Suspend, false) {
				t.Fatal("the Job that lost its lock was not suspended")
			}
			if tc.limit == nil {
				// The Job controller deletes the suspended Job's Pods (none runs here): the manager does not.
				if get(t, c, mine); mine.DeletionTimestamp != nil {
					t.Errorf("in one cluster the manager deleted the suspended Job's Pod")
				}
				return
			}
			if got := deletionGrace(mine); got != tc.want {
				t.Errorf("the stopped Job's Pod is deleted with a grace of %d s, want %d", got, tc.want)
			}
			if get(t, c, dressed); dressed.DeletionTimestamp != nil {
				t.Errorf("a Pod that only wears the stopped Job's label was deleted")
			}
		})
	}
}

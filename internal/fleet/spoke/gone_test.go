package spoke_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/testing/netcut"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

// There is no kubelet in these tests: the test plays the scheduler (it binds a Pod let go to a
// node, so that its deletion waits for its kubelet, as a running Pod's does, where an unbound
// Pod is deleted at once whatever its grace) and the kubelet (it ends a terminating Pod's
// deletion with grace 0 when the Pod's containers "have stopped", or never, when its node "does
// not answer").

// goneSettings: L = 20 s, --fleet-grace 3 s: the stop comes about 13 s after the last answered
// renewal, the hub can hand the locks on 20 s after it.
var goneSettings = skew.Settings{Lease: 20 * time.Second, Grace: 3 * time.Second, MaxSkew: 2 * time.Second}

// behindNetcut runs spk's agent talking to the hub through a netcut proxy, stopped (the network
// healed first) when the test ends.
func behindNetcut(t *testing.T, spk *testSpoke) *netcut.Proxy {
	t.Helper()
	host, err := url.Parse(hub.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	p, err := netcut.New(host.Host)
	if err != nil {
		t.Fatal(err)
	}
	through := rest.CopyConfig(hub.Config)
	through.Host = "https://" + p.Addr()
	m := spk.startWith(t, through, goneSettings)
	t.Cleanup(func() { p.Pass(); _ = m.Stop(); _ = p.Close() })
	return p
}

// runningPod makes a gated Pod locking acme/infra:path that asks for a 30 s grace, waits until
// the hub's grant lets it go, and binds it to a node (as the scheduler would).
func runningPod(t *testing.T, spk *testSpoke, ns, name, path string) {
	t.Helper()
	g := gomega.NewWithT(t)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{workload.LabelGated: "true"},
			Annotations: map[string]string{workload.AnnotationLock: "acme/infra:" + path, workload.AnnotationCreatedBy: "alice"}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, SchedulingGates: []corev1.PodSchedulingGate{{Name: workload.SchedulingGate}},
			TerminationGracePeriodSeconds: ptr.To[int64](30), Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	g.Expect(spk.Client.Create(ctx, pod)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(spk.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(gomega.Succeed())
		g.Expect(pod.Spec.SchedulingGates).To(gomega.BeEmpty())
		g.Expect(pod.Annotations).To(gomega.HaveKey(workload.AnnotationFencingToken))
	}).Should(gomega.Succeed())
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}
	g.Expect(spk.Client.SubResource("binding").Create(ctx, pod, b)).To(gomega.Succeed())
}

// runningJob makes a gated Job locking acme/infra:path, waits until the hub's grant lets it go,
// and plays the Job controller: it makes the Job's Pod (its controller reference and
// controller-uid label), which asks for a 30 s grace, bound to a node.
func runningJob(t *testing.T, spk *testSpoke, ns, name, path string) (*batchv1.Job, *corev1.Pod) {
	t.Helper()
	g := gomega.NewWithT(t)
	ctx := context.Background()
	spec := corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: ptr.To[int64](30),
		Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{workload.LabelGated: "true"},
			Annotations: map[string]string{workload.AnnotationLock: "acme/infra:" + path, workload.AnnotationCreatedBy: "alice"}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: spec}},
	}
	g.Expect(spk.Client.Create(ctx, job)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(spk.Client.Get(ctx, client.ObjectKeyFromObject(job), job)).To(gomega.Succeed())
		g.Expect(job.Spec.Suspend).To(gomega.HaveValue(gomega.BeFalse()))
	}).Should(gomega.Succeed())
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-abcde",
		Labels:          map[string]string{batchv1.ControllerUidLabel: string(job.UID)},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
		Spec: *spec.DeepCopy()}
	g.Expect(spk.Client.Create(ctx, pod)).To(gomega.Succeed())
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}
	g.Expect(spk.Client.SubResource("binding").Create(ctx, pod, b)).To(gomega.Succeed())
	return job, pod
}

// stoppedOnPartition waits until the spoke request of Pod name is HubUnreachable, and its Pod
// is being deleted within --fleet-grace (the workload controller's cap of its 30 s).
func stoppedOnPartition(t *testing.T, spk *testSpoke, ns, name string) {
	t.Helper()
	g := gomega.NewWithT(t)
	g.Eventually(func(g gomega.Gomega) {
		lr := get(g, spk.Client, ns, workload.RequestName("pod", name))
		g.Expect(lr.Status.Phase).To(gomega.Equal(locksv1.PhaseReleased))
		g.Expect(meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted).Reason).To(gomega.Equal(spoke.ReasonHubUnreachable))
		var p corev1.Pod
		g.Expect(spk.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p)).To(gomega.Succeed())
		g.Expect(p.DeletionTimestamp).NotTo(gomega.BeNil())
		g.Expect(p.DeletionGracePeriodSeconds).To(gomega.HaveValue(gomega.BeEquivalentTo(3)))
	}).WithTimeout(40 * time.Second).Should(gomega.Succeed())
}

// kubeletEnds plays the kubelet of a Pod whose containers have stopped: the Pod object goes.
func kubeletEnds(g gomega.Gomega, spk *testSpoke, ns, name string) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	g.Expect(spk.Client.Delete(context.Background(), p, client.GracePeriodSeconds(0))).To(gomega.Succeed())
}

// eventsOf are the events of reason in ns, by "Kind/name" of what they regard.
func eventsOf(g gomega.Gomega, spk *testSpoke, ns, reason string) map[string]eventsv1.Event {
	var evs eventsv1.EventList
	g.Expect(spk.Client.List(context.Background(), &evs, client.InNamespace(ns))).To(gomega.Succeed())
	out := map[string]eventsv1.Event{}
	for _, e := range evs.Items {
		if e.Reason == reason {
			out[e.Regarding.Kind+"/"+e.Regarding.Name] = e
		}
	}
	return out
}

// handOn is when the hub can hand the spoke's locks in ns on: its hub Lease's renewTime + L,
// read from the hub.
func handOn(g gomega.Gomega, spk *testSpoke, ns string) time.Time {
	var lease coordinationv1.Lease
	g.Expect(hub.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: spoke.LeaseName(spk.cluster)}, &lease)).To(gomega.Succeed())
	return lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
}

// TestStoppedHolderGoneOrOutlivedTheHandOn cuts the network to the hub (Blackhole) while two
// gated Pods and a gated Job (with one Pod) run on the hub's grants. The agent stops them all
// (their requests HubUnreachable, the Pods deleted with --fleet-grace 3 s, the Job suspended) and
// waits for each to be gone. The Job is not gone while its Pod terminates. The kubelet ends the
// deletion of one Pod and of the Job's Pod, and the agent records HolderGone on their requests,
// the Pod and the Job before the hub's hand-on time (the hub Lease's renewTime + L, read from
// the hub), saying how long before. The other Pod's node never answers, and once the hand-on
// time passes the agent records HolderOutlivedLease on its request and Pod, and the wait's end
// on the request.
func TestStoppedHolderGoneOrOutlivedTheHandOn(t *testing.T) {
	const ns = "team-gone"
	t.Parallel()
	spk := fleet(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	p := behindNetcut(t, spk)
	runningPod(t, spk, ns, "quick", "quick")
	runningPod(t, spk, ns, "slow", "slow")
	job, jobPod := runningJob(t, spk, ns, "batch", "batch")

	p.Blackhole()
	stoppedOnPartition(t, spk, ns, "quick")
	stoppedOnPartition(t, spk, ns, "slow")
	lapse := handOn(g, spk, ns)
	quickReq, slowReq := "LockRequest/"+workload.RequestName("pod", "quick"), "LockRequest/"+workload.RequestName("pod", "slow")
	jobReq := "LockRequest/" + workload.RequestName("job", "batch")
	// The Job is suspended and its Pod deleted within --fleet-grace; while that Pod terminates,
	// the Job is not gone.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(spk.Client.Get(ctx, client.ObjectKeyFromObject(job), job)).To(gomega.Succeed())
		g.Expect(job.Spec.Suspend).To(gomega.HaveValue(gomega.BeTrue()))
		g.Expect(spk.Client.Get(ctx, client.ObjectKeyFromObject(jobPod), jobPod)).To(gomega.Succeed())
		g.Expect(jobPod.DeletionGracePeriodSeconds).To(gomega.HaveValue(gomega.BeEquivalentTo(3)))
	}).Should(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) {
		g.Expect(eventsOf(g, spk, ns, spoke.ReasonHolderGone)).NotTo(gomega.HaveKey("Job/batch"))
	}).WithTimeout(time.Second).Should(gomega.Succeed())

	kubeletEnds(g, spk, ns, "quick")
	kubeletEnds(g, spk, ns, jobPod.Name)
	// The Job controller counts the Job's Pods that terminate (status.terminating) and writes
	// the count once the last is gone: the Job's change wakes the wait.
	job.Status.Terminating = ptr.To[int32](0)
	g.Expect(spk.Client.Status().Update(ctx, job)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		on := eventsOf(g, spk, ns, spoke.ReasonHolderGone)
		for _, k := range []string{quickReq, "Pod/quick", jobReq, "Job/batch"} {
			g.Expect(on).To(gomega.HaveKey(k))
			e := on[k]
			g.Expect(e.Type).To(gomega.Equal(corev1.EventTypeNormal))
			g.Expect(e.Note).To(gomega.MatchRegexp(`^the stopped holder was gone at \S+Z, [0-9]+\.[0-9]s before the hub can hand its locks on \(renewTime\+L at \S+Z, by the hub's clock\)$`))
			g.Expect(e.Note).To(gomega.ContainSubstring("renewTime+L at " + lapse.UTC().Format(time.RFC3339)))
			g.Expect(e.EventTime.Time).To(gomega.BeTemporally("<", lapse), "HolderGone recorded after the hub could hand the lock on")
		}
	}).Should(gomega.Succeed())
	g.Expect(time.Now()).To(gomega.BeTemporally("<", lapse), "the slow Pod's outcome is judged only at the hand-on time")
	g.Expect(eventsOf(g, spk, ns, spoke.ReasonHolderOutlivedLease)).To(gomega.BeEmpty())

	g.Eventually(func(g gomega.Gomega) {
		on := eventsOf(g, spk, ns, spoke.ReasonHolderOutlivedLease)
		for _, k := range []string{slowReq, "Pod/slow"} {
			g.Expect(on).To(gomega.HaveKey(k))
			e := on[k]
			g.Expect(e.Type).To(gomega.Equal(corev1.EventTypeWarning))
			g.Expect(e.Note).To(gomega.MatchRegexp(`^the stopped holder was still running at \S+Z, when the hub could hand its locks on \(renewTime\+L at \S+Z, by the hub's clock\): ` +
				`its grace \(3s\) is longer than --fleet-grace \(3s\) allows, or its node does not answer$`))
			g.Expect(e.EventTime.Time).To(gomega.BeTemporally(">=", lapse.Add(-time.Millisecond)))
		}
		lr := get(g, spk.Client, ns, workload.RequestName("pod", "slow"))
		g.Expect(lr.Annotations).To(gomega.HaveKeyWithValue(spoke.AnnotationHolderGone, gomega.HavePrefix("outlived at ")))
	}).WithTimeout(40 * time.Second).Should(gomega.Succeed())
	g.Expect(eventsOf(g, spk, ns, spoke.ReasonHolderGone)).NotTo(gomega.HaveKey("Pod/slow"))
	g.Expect(eventsOf(g, spk, ns, spoke.ReasonHolderOutlivedLease)).NotTo(gomega.HaveKey("Pod/quick"))
	// And in the metric, by outcome (other tests of the process count too: at least).
	g.Expect(stoppedHolders(g, "gone")).To(gomega.BeNumerically(">=", 2))
	g.Expect(stoppedHolders(g, "outlived")).To(gomega.BeNumerically(">=", 1))
}

// stoppedHolders is turnstile_fleet_stopped_holders_total{outcome} of the process's registry.
func stoppedHolders(g gomega.Gomega, outcome string) float64 {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	for _, f := range families {
		if f.GetName() != "turnstile_fleet_stopped_holders_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

// TestHealedCutReleasesOnlyOnceTheHolderIsGone cuts the network to the hub (Cut: connections
// reset) while a gated Pod runs, and heals it as soon as the agent has stopped the Pod, which
// still terminates (its kubelet has not ended it). The hub answers again, but the agent does not
// release the request's hub request while the stopped Pod may still run (the hub would hand the
// lock on at once); once the kubelet ends it, the agent records HolderGone and the hub request
// is released (or deleted with its spoke request).
func TestHealedCutReleasesOnlyOnceTheHolderIsGone(t *testing.T) {
	const ns = "team-healed"
	t.Parallel()
	spk := fleet(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	p := behindNetcut(t, spk)
	runningPod(t, spk, ns, "held", "held")
	hubName := spk.cluster + "." + workload.RequestName("pod", "held")

	p.Cut()
	stoppedOnPartition(t, spk, ns, "held")
	p.Pass()
	// The agent renews again and would release at once: it holds the release while the Pod may run.
	g.Consistently(func(g gomega.Gomega) {
		g.Expect(get(g, hub.Client, ns, hubName).Spec.Release).To(gomega.BeFalse(), "the hub request was released while its stopped holder still ran")
		g.Expect(get(g, spk.Client, ns, workload.RequestName("pod", "held")).Annotations).To(gomega.HaveKey(spoke.AnnotationHandOn))
	}).WithTimeout(4 * time.Second).Should(gomega.Succeed())

	kubeletEnds(g, spk, ns, "held")
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(eventsOf(g, spk, ns, spoke.ReasonHolderGone)).To(gomega.HaveKey("Pod/held"))
		var h locksv1.LockRequest
		err := hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: hubName}, &h)
		if !apierrors.IsNotFound(err) {
			g.Expect(err).NotTo(gomega.HaveOccurred())
			g.Expect(h.Spec.Release || h.Status.Phase.IsFinal()).To(gomega.BeTrue(), "the hub request was not released once the holder was gone")
		}
	}).Should(gomega.Succeed())
}

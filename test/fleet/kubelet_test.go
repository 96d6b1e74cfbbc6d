package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/lincheck"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

// Gated Jobs run in a spoke as test/gated runs them: the real kube-controller-manager's Job
// controller makes a Job's Pods once the manager unsuspends it, and the real kube-scheduler
// binds them to the spoke's one Node. No kubelet runs: this file's kubelet plays the node's,
// and records each run as the Job's container would record its own (the fencing token it is
// given through the downward API, from the Pod's annotation, and its start and end stamps).

const (
	// node is each spoke's one Node, registered Ready as a kubelet would.
	node = "node-1"
	// annotationRunsFor is how long a Job's container runs (a Go duration), or untilStopped:
	// until the Pod is deleted.
	annotationRunsFor = "test.turnstile.dev/runs-for"
	untilStopped      = "until-stopped"
)

// run is one run of a Job's Pod in a spoke, as its container records it.
type run struct {
	cluster, job, pod, lock string
	token                   int64 // -1: the Pod carried no token
	start, end              time.Time
	// stopped says the run ended because its Pod was deleted (its Job stopped), not by exiting 0.
	stopped bool

	done     chan struct{} // closed at end
	stopOnce *sync.Once
	stop     chan struct{} // closed when the Pod is deleted
}

func (r *run) String() string {
	end := "running"
	if !r.end.IsZero() {
		end = r.end.Format("15:04:05.000")
		if r.stopped {
			end += " (stopped)"
		}
	}
	return fmt.Sprintf("%s/%s token %d %s – %s", r.cluster, r.job, r.token, r.start.Format("15:04:05.000"), end)
}

// kubelet runs the Pods the scheduler binds to a spoke's node, and keeps their runs.
type kubelet struct {
	m    *member
	c    client.WithWatch
	mu   sync.Mutex
	runs []*run
	byID map[types.UID]*run
	errs []error
}

// installTurnstile installs the shipped bundle in m's cluster as the docs say (kubectl apply -k)
// and waits until its policies are enforced; m's manager then acts as its ServiceAccount, with
// the bundle's RBAC, under its policies (only it may make a gated workload's request).
func (m *member) installTurnstile(dir string) {
	GinkgoHelper()
	bundle, err := framework.BundleFor(m.env.Config)
	Expect(err).NotTo(HaveOccurred())
	Expect(bundle.Mutating).NotTo(BeEmpty(), "test/fleet runs gated Jobs on a server with MutatingAdmissionPolicy (%s)", bundle)
	By("installing Turnstile in " + m.name + " as the docs say: kubectl apply -k " + bundle.String())
	_, err = m.kubectl.Run("", "apply", "--server-side", "-k", bundle.Dir)
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		probe := jobObject("probe", "acme/infra:probe", "1s", "")
		g.Expect(m.env.Client.Create(context.Background(), probe, client.DryRunAll)).To(Succeed())
		g.Expect(probe.Spec.Suspend).To(HaveValue(BeTrue()), "the workload policies suspend a gated Job at creation")
	}).WithTimeout(120*time.Second).Should(Succeed(), "the API server of %s never enforced the workload policies", m.name)
	saDir := filepath.Join(dir, m.name+"-manager")
	Expect(os.MkdirAll(saDir, 0o700)).To(Succeed())
	m.managerConfig, err = m.env.WriteServiceAccountKubeconfig(context.Background(), saDir, "turnstile-system", "turnstile-controller-manager")
	Expect(err).NotTo(HaveOccurred())
}

// startWorkloads makes m's control plane run gated Jobs as test/gated does: the shipped bundle
// installed (its admission policies suspend an annotated Job at creation), the real
// kube-controller-manager (Job and garbage collector controllers) and kube-scheduler, one Node,
// and this file's kubelet.
func (m *member) startWorkloads(dir string) {
	GinkgoHelper()
	m.installTurnstile(dir)
	kubeconfig := m.kubectl.Kubeconfig
	for _, c := range []struct {
		bin  string
		args []string
	}{
		{"kube-scheduler", []string{"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--secure-port=0"}},
		{"kube-controller-manager", []string{"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--secure-port=0",
			"--controllers=job-controller,garbage-collector-controller"}},
	} {
		bin := filepath.Join(m.env.Assets, c.bin)
		_, err := os.Stat(bin)
		Expect(err).NotTo(HaveOccurred(), "%s is built by `make k8s-bins` (CONTROL_PLANE=1 hack/build-k8s-bins.sh)", c.bin)
		p, err := framework.StartProcessLogFile(bin, kubeconfig, filepath.Join(dir, m.name+"-"+c.bin+".log"), c.args...)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = p.Stop(10 * time.Second) })
	}

	By("registering one Node in " + m.name + ", Ready, as a kubelet would")
	ctx := context.Background()
	admin := m.env.Client
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"kubernetes.io/hostname": node}}}
	Expect(admin.Create(ctx, n)).To(Succeed())
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}
	n.Status = corev1.NodeStatus{Capacity: capacity, Allocatable: capacity, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady,
		Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
	Expect(admin.Status().Update(ctx, n)).To(Succeed())
	// The API server taints a new Node not-ready; the node lifecycle controller (not run)
	// would lift it once the Node reports Ready.
	Eventually(func() error {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(n), n); err != nil {
			return err
		}
		n.Spec.Taints = nil
		return admin.Update(ctx, n)
	}).Should(Succeed())

	k := &kubelet{m: m, c: admin, byID: map[types.UID]*run{}}
	kctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); k.serve(kctx) }()
	DeferCleanup(func() { cancel(); <-done })
	m.kubelet = k
}

// serve lists and watches the Pods of ns, again after every watch that ends, until ctx ends.
func (k *kubelet) serve(ctx context.Context) {
	for ctx.Err() == nil {
		var pods corev1.PodList
		if err := k.c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			continue
		}
		for i := range pods.Items {
			k.see(ctx, &pods.Items[i])
		}
		w, err := k.c.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: pods.ResourceVersion}})
		if err != nil {
			continue
		}
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Deleted {
				k.see(ctx, p)
			}
		}
		w.Stop()
	}
}

// see does what the node's kubelet does with p: starts the container of a Pod bound to the node,
// and stops it when the Pod is deleted (then confirms the deletion, grace period 0).
func (k *kubelet) see(ctx context.Context, p *corev1.Pod) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r := k.byID[p.UID]
	switch {
	case p.DeletionTimestamp != nil && r != nil && !r.end.IsZero():
		go k.remove(ctx, p.Namespace, p.Name, p.UID) // its container has exited
	case p.DeletionTimestamp != nil && r != nil:
		r.stopOnce.Do(func() { close(r.stop) })
	case p.DeletionTimestamp != nil:
		if p.Spec.NodeName == node {
			go k.remove(ctx, p.Namespace, p.Name, p.UID)
		}
	case r == nil && p.Spec.NodeName == node && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed:
		r = &run{cluster: k.m.name, job: p.Labels[batchv1.JobNameLabel], pod: p.Name, lock: p.Annotations[workload.AnnotationLock], token: -1,
			stopOnce: &sync.Once{}, start: time.Now(), done: make(chan struct{}), stop: make(chan struct{})}
		if t, err := strconv.ParseInt(p.Annotations[workload.AnnotationFencingToken], 10, 64); err == nil {
			r.token = t
		}
		k.byID[p.UID] = r
		k.runs = append(k.runs, r)
		go k.container(ctx, r, p.DeepCopy())
	}
}

// container runs r until its time is up (exit 0: the Pod Succeeded, as the kubelet writes it),
// or until its Pod is deleted (stopped: the kubelet confirms the
// deletion).
func (k *kubelet) container(ctx context.Context, r *run, p *corev1.Pod) {
	defer close(r.done)
	var timeout <-chan time.Time
	if d, err := time.ParseDuration(p.Annotations[annotationRunsFor]); err == nil {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
		return
	case <-r.stop:
		k.end(r, true)
		k.remove(ctx, p.Namespace, p.Name, p.UID)
		return
	case <-timeout:
	}
	k.end(r, false)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.c.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodSucceeded
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now, Reason: "PodCompleted"})
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: metav1.NewTime(r.start), FinishedAt: now}}}}
		return k.c.Status().Update(ctx, p)
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		k.fail(fmt.Errorf("pod %s/%s in %s: writing Succeeded: %w", p.Namespace, p.Name, k.m.name, err))
	}
}

func (k *kubelet) end(r *run, stopped bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r.end, r.stopped = time.Now(), stopped
}

// remove confirms a Pod's deletion once its container stopped, as the kubelet does.
func (k *kubelet) remove(ctx context.Context, namespace, name string, uid types.UID) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := k.c.Delete(ctx, p, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		k.fail(fmt.Errorf("pod %s/%s in %s: confirming its deletion: %w", namespace, name, k.m.name, err))
	}
}

func (k *kubelet) fail(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.errs = append(k.errs, err)
}

// runsOf are the runs of job (all, in start order); a copy of each.
func (k *kubelet) runsOf(job string) []run {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []run
	for _, r := range k.runs {
		if r.job == job {
			out = append(out, r.snapshot())
		}
	}
	return out
}

func (r *run) snapshot() run {
	return run{cluster: r.cluster, job: r.job, pod: r.pod, lock: r.lock, token: r.token, start: r.start, end: r.end, stopped: r.stopped}
}

// runsOn are the runs of every spoke's Jobs that take lock (the annotation's value), in start
// order; copies.
func runsOn(lock string) []run {
	var out []run
	for _, s := range []*member{spokeA, spokeB} {
		s.kubelet.mu.Lock()
		for _, r := range s.kubelet.runs {
			if r.lock == lock {
				out = append(out, r.snapshot())
			}
		}
		s.kubelet.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

// expectSerialized judges runs (in start order) as the Jobs' own records: every run has a token
// and has ended, each starts after the one before it ended, and the tokens rise; and, as
// test/faults judges its clients' records, porcupine finds them the history of a fenced lock
// (each run an acquire at its start and a release at its end, on one key).
func expectSerialized(runs []run) {
	GinkgoHelper()
	h := lincheck.NewHistory()
	for _, r := range runs {
		who := locksv1.HolderID{Owner: r.cluster + "/" + r.pod}
		h.Add(lincheck.Input{Kind: lincheck.Acquire, Key: r.lock, Client: who}, lincheck.Output{KeyToken: r.token, RequestToken: r.token},
			r.start.UnixNano(), r.start.UnixNano())
		if !r.end.IsZero() {
			h.Add(lincheck.Input{Kind: lincheck.Release, Key: r.lock, Client: who}, lincheck.Output{}, r.end.UnixNano(), r.end.UnixNano())
		}
	}
	res := h.Check(time.Minute)
	AddReportEntry("porcupine on the Jobs' runs", res.String())
	Expect(res.Verdict).To(Equal(porcupine.Ok), "%s\n%s\n%s", res, res.Explanation, describeRuns(runs))
	for i, r := range runs {
		Expect(r.token).To(BeNumerically(">", 0), "%s ran without a fencing token", r.String())
		Expect(r.end.IsZero()).To(BeFalse(), "%s has not ended", r.String())
		if i == 0 {
			continue
		}
		prev := runs[i-1]
		Expect(r.start.After(prev.end)).To(BeTrue(), "overlap: %s started before %s ended", r.String(), prev.String())
		Expect(r.token).To(BeNumerically(">", prev.token), "tokens must rise across clusters: %s after %s", r.String(), prev.String())
	}
}

func describeRuns(runs []run) string {
	var lines []string
	for i, r := range runs {
		line := r.String()
		if i > 0 {
			line += fmt.Sprintf(" (%s after the one before ended)", r.start.Sub(runs[i-1].end).Round(time.Millisecond))
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// expectKubeletsFine says neither spoke's kubelet failed to do its part.
func expectKubeletsFine() {
	GinkgoHelper()
	for _, s := range []*member{spokeA, spokeB} {
		s.kubelet.mu.Lock()
		errs := append([]error(nil), s.kubelet.errs...)
		s.kubelet.mu.Unlock()
		Expect(errs).To(BeEmpty(), "the kubelet of %s", s.name)
	}
}

// jobObject is a gated Job of ns whose Pods take lock, run for runsFor (or untilFinished), for
// command when set: what a user's chart would hold.
func jobObject(name, lock, runsFor, command string) *batchv1.Job {
	ann := map[string]string{workload.AnnotationLock: lock, annotationRunsFor: runsFor}
	if command != "" {
		ann[workload.AnnotationCommand] = command
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: ann},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "apply", Image: "busybox", Command: []string{"sh", "-c", "echo applying"}}}},
			},
		},
	}
}

// jobManifest is jobObject as the YAML a user applies with kubectl.
func jobManifest(name, lock, runsFor, command string) string {
	cmd := ""
	if command != "" {
		cmd = "\n        " + workload.AnnotationCommand + ": " + command
	}
	return fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata: {name: %s, namespace: %s}
spec:
  backoffLimit: 0
  template:
    metadata:
      annotations:
        %s: %q
        %s: %q%s
    spec:
      restartPolicy: Never
      containers:
      - name: apply
        image: busybox
        command: ["sh", "-c", "echo applying"]
`, name, ns, workload.AnnotationLock, lock, annotationRunsFor, runsFor, cmd)
}

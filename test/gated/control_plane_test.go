package gated

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

// The real kube-scheduler and kube-controller-manager (its Job, CronJob and garbage collector
// controllers), built by hack/build-k8s-bins.sh at the API server's version, run against the
// test control plane with one Node object. No kubelet runs: where a Pod would run and exit,
// the test writes the Pod's status as the kubelet would (phase Succeeded), and says so.
var _ = Describe("Gated workloads with the real kube-scheduler and Job controller", Ordered, func() {
	const node = "node-1"
	var (
		ns    string
		alice client.Client
	)
	BeforeAll(func() {
		dir := GinkgoT().TempDir()
		kubeconfig := filepath.Join(dir, "admin.kubeconfig")
		Expect(env.WriteKubeconfig(kubeconfig)).To(Succeed())
		for _, c := range []struct {
			bin  string
			args []string
		}{
			{"kube-scheduler", []string{"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--secure-port=0"}},
			// The controllers act as the admin (no --use-service-account-credentials): the
			// token controller it would need has no signing key here.
			{"kube-controller-manager", []string{"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--secure-port=0",
				"--controllers=job-controller,cronjob-controller,garbage-collector-controller"}},
		} {
			bin := filepath.Join(env.Assets, c.bin)
			_, err := os.Stat(bin)
			Expect(err).NotTo(HaveOccurred(), "%s is built by `make k8s-bins` (CONTROL_PLANE=1 hack/build-k8s-bins.sh)", c.bin)
			p, err := framework.StartProcessLogFile(bin, kubeconfig, filepath.Join(dir, c.bin+".log"), c.args...)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(func() {
				_ = p.Stop(10 * time.Second)
				if CurrentSpecReport().Failed() {
					AddReportEntry(c.bin+" log", p.Log())
				}
			})
		}

		By("registering one Node, Ready, as a kubelet would")
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"kubernetes.io/hostname": node}}}
		Expect(admin.Create(ctx, n)).To(Succeed())
		DeferCleanup(func() { _ = admin.Delete(ctx, n) })
		capacity := corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110"),
		}
		n.Status = corev1.NodeStatus{
			Capacity: capacity, Allocatable: capacity,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
		}
		Expect(admin.Status().Update(ctx, n)).To(Succeed())
		// The API server taints a new Node not-ready; the node lifecycle controller lifts the
		// taint once the Node reports Ready. That controller does not run here: do what it would.
		Eventually(func() error {
			if err := admin.Get(ctx, client.ObjectKeyFromObject(n), n); err != nil {
				return err
			}
			n.Spec.Taints = nil
			return admin.Update(ctx, n)
		}).WithTimeout(wait).Should(Succeed())

		ns = newNamespace()
		alice = as("alice")
	})

	// succeed writes what the kubelet would once the Pod's only container exited 0.
	succeed := func(p *corev1.Pod) {
		GinkgoHelper()
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		now := metav1.Now()
		p.Status.Phase = corev1.PodSucceeded
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now, Reason: "PodCompleted"})
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}}}}
		Expect(admin.Status().Update(ctx, p)).To(Succeed())
	}
	// jobPods are the Pods the Job controller made for job name.
	jobPods := func(name string) []corev1.Pod {
		GinkgoHelper()
		var pods corev1.PodList
		Expect(admin.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{batchv1.JobNameLabel: name})).To(Succeed())
		return pods.Items
	}
	phase := func(name string) func() locksv1.LockRequestPhase {
		return framework.PhaseOf(ctx, admin, ns, name)
	}

	It("shows a gated Pod SchedulingGated until its lock is free, then the scheduler binds it", func() {
		bob := wrappers.MakeLockRequest("bob-holds", ns).Lock("acme/infra", "db", "default").Owner("bob", 0).Obj()
		Expect(admin.Create(ctx, bob)).To(Succeed())
		Eventually(phase(bob.Name)).WithTimeout(wait).Should(Equal(locksv1.PhaseGranted))

		p := pod(ns, "migrate", "acme/infra:db")
		Expect(alice.Create(ctx, p)).To(Succeed())
		Eventually(phase(workload.RequestName("pod", "migrate"))).WithTimeout(wait).Should(Equal(locksv1.PhasePending))
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			g.Expect(p.Status.Conditions).To(ContainElement(And(
				HaveField("Type", corev1.PodScheduled), HaveField("Status", corev1.ConditionFalse), HaveField("Reason", corev1.PodReasonSchedulingGated))))
		}).WithTimeout(wait).Should(Succeed(), "the scheduler reports the Pod SchedulingGated")
		Expect(p.Spec.NodeName).To(BeEmpty())

		Expect(admin.Patch(ctx, bob, client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"release":true}}`)))).To(Succeed())
		Eventually(func() string {
			_ = admin.Get(ctx, client.ObjectKeyFromObject(p), p)
			return p.Spec.NodeName
		}).WithTimeout(wait).Should(Equal(node), "the scheduler binds the Pod once the gate is gone")
		Expect(p.Annotations).To(HaveKey(workload.AnnotationFencingToken))

		By("the container exits 0: the test writes the Pod Succeeded, as the kubelet would")
		succeed(p)
		Eventually(phase(workload.RequestName("pod", "migrate"))).WithTimeout(wait).Should(Equal(locksv1.PhaseReleased))
	})

	It("runs two Jobs on one key through the real Job controller: the second makes no Pod until the first completes", func() {
		first, second := job(ns, "apply-1", "acme/infra:vpc"), job(ns, "apply-2", "acme/infra:vpc")
		Expect(alice.Create(ctx, first)).To(Succeed())
		Eventually(phase(workload.RequestName("job", "apply-1"))).WithTimeout(wait).Should(Equal(locksv1.PhaseGranted))
		var p1 corev1.Pod
		Eventually(func(g Gomega) {
			pods := jobPods("apply-1")
			g.Expect(pods).To(HaveLen(1))
			p1 = pods[0]
			g.Expect(p1.Spec.NodeName).To(Equal(node))
		}).WithTimeout(wait).Should(Succeed(), "the Job controller makes the first Job's Pod and the scheduler binds it")
		lr1 := &locksv1.LockRequest{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: workload.RequestName("job", "apply-1")}, lr1)).To(Succeed())
		Expect(p1.Annotations).To(HaveKeyWithValue(workload.AnnotationFencingToken, strconv.FormatInt(lr1.Status.FencingToken, 10)),
			"the Job's Pod carries the token for the downward API")
		Expect(p1.Spec.SchedulingGates).To(BeEmpty(), "a Job's Pods are not gated again")

		Expect(alice.Create(ctx, second)).To(Succeed())
		Eventually(phase(workload.RequestName("job", "apply-2"))).WithTimeout(wait).Should(Equal(locksv1.PhasePending))
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(second), second)).To(Succeed())
		Expect(second.Spec.Suspend).To(Equal(ptr.To(true)))
		Expect(jobPods("apply-2")).To(BeEmpty(), "a suspended Job has no Pods")

		By("the first Job's container exits 0: the test writes its Pod Succeeded, as the kubelet would")
		succeed(&p1)
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(first), first)).To(Succeed())
			g.Expect(first.Status.Conditions).To(ContainElement(And(HaveField("Type", batchv1.JobComplete), HaveField("Status", corev1.ConditionTrue))))
		}).WithTimeout(wait).Should(Succeed(), "the Job controller completes the first Job")
		Eventually(phase(workload.RequestName("job", "apply-2"))).WithTimeout(wait).Should(Equal(locksv1.PhaseGranted))
		Eventually(func(g Gomega) {
			pods := jobPods("apply-2")
			g.Expect(pods).To(HaveLen(1))
			g.Expect(pods[0].Spec.NodeName).To(Equal(node))
		}).WithTimeout(wait).Should(Succeed(), "the second Job runs once the first completed")
		Expect(phase(workload.RequestName("job", "apply-1"))()).To(Equal(locksv1.PhaseReleased))
	})

	It("keeps a deleted Job's lock until its last Pod is gone, then deletes its request", func() {
		j := job(ns, "dropped", "acme/infra:dropped")
		Expect(alice.Create(ctx, j)).To(Succeed())
		lrName := workload.RequestName("job", "dropped")
		Eventually(phase(lrName)).WithTimeout(wait).Should(Equal(locksv1.PhaseGranted))
		var p corev1.Pod
		Eventually(func(g Gomega) {
			pods := jobPods("dropped")
			g.Expect(pods).To(HaveLen(1))
			p = pods[0]
			g.Expect(p.Spec.NodeName).To(Equal(node))
		}).WithTimeout(wait).Should(Succeed())
		next := job(ns, "next", "acme/infra:dropped")
		Expect(alice.Create(ctx, next)).To(Succeed())
		Eventually(phase(workload.RequestName("job", "next"))).WithTimeout(wait).Should(Equal(locksv1.PhasePending))

		By("alice deletes the Job; the garbage collector then deletes its Pod, which goes on running until its kubelet stops it")
		Expect(alice.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(j), j)) }).WithTimeout(wait).Should(BeTrue())
		Eventually(func() *metav1.Time {
			_ = admin.Get(ctx, client.ObjectKeyFromObject(&p), &p)
			return p.DeletionTimestamp
		}).WithTimeout(wait).ShouldNot(BeNil(), "the garbage collector deletes the Job's Pod")
		Eventually(func(g Gomega) {
			var evs corev1.EventList
			g.Expect(admin.List(ctx, &evs, client.InNamespace(ns))).To(Succeed())
			g.Expect(evs.Items).To(ContainElement(And(HaveField("Reason", workload.ReasonPodsLeft), HaveField("InvolvedObject.Name", lrName),
				HaveField("Message", "the job is gone but 1 of its Pods still run: the lock is kept until they are gone"))))
		}).WithTimeout(wait).Should(Succeed(), "the manager has seen the Job go and keeps the request for its Pod")
		lr := &locksv1.LockRequest{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: lrName}, lr)).To(Succeed())
		Expect(lr.DeletionTimestamp).To(BeNil())
		Expect(lr.Status.Phase).To(Equal(locksv1.PhaseGranted), "the terminating Pod still holds the lock")
		Expect(phase(workload.RequestName("job", "next"))()).To(Equal(locksv1.PhasePending))

		By("the container stops: the test removes the Pod as its kubelet would (grace period 0)")
		Expect(admin.Delete(ctx, &p, client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: lrName}, &locksv1.LockRequest{}))
		}).WithTimeout(wait).Should(BeTrue(), "the request goes once the last Pod is gone")
		Eventually(phase(workload.RequestName("job", "next"))).WithTimeout(wait).Should(Equal(locksv1.PhaseGranted))
	})

	It("keeps a re-created Job suspended while the Pods of the Job it replaced still run (kubectl replace --force, as Helm's before-hook-creation and Argo CD's Replace do), even beside a request its owner made for it", func() {
		const name = "replaced"
		manifest := `apiVersion: batch/v1
kind: Job
metadata:
  name: ` + name + `
spec:
  backoffLimit: 0
  template:
    metadata:
      annotations:
        locks.turnstile.dev/lock: acme/infra:replaced
    spec:
      restartPolicy: Never
      containers:
      - name: apply
        image: busybox
        command: ["sh", "-c", "echo applying"]
`
		if !mutating {
			// Nothing is filled in: alice writes what the mutating policies would have given it.
			manifest = strings.Replace(manifest, "  name: "+name+"\n", "  name: "+name+"\n"+
				"  labels: {locks.turnstile.dev/gated: \"true\"}\n  annotations: {locks.turnstile.dev/created-by: alice}\n", 1)
			manifest = strings.Replace(manifest, "spec:\n  backoffLimit: 0\n", "spec:\n  suspend: true\n  backoffLimit: 0\n", 1)
		}
		kubectl := framework.AdminKubectl(env, env.Kubectl())
		out, err := kubectl.Run(manifest, "--as=alice", "-n", ns, "create", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), out)
		old := &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: workload.RequestName("job", name)}}
		old = grantedRequest(old)
		var p corev1.Pod
		Eventually(func(g Gomega) {
			pods := jobPods(name)
			g.Expect(pods).To(HaveLen(1))
			p = pods[0]
			g.Expect(p.Spec.NodeName).To(Equal(node))
		}).WithTimeout(wait).Should(Succeed(), "the first Job's Pod runs")

		By("alice replaces the Job: kubectl deletes it (the garbage collector then deletes its Pod, which runs until its kubelet stops it) and creates it again")
		out, err = kubectl.Run(manifest, "--as=alice", "-n", ns, "replace", "--force", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), out)
		second := &batchv1.Job{}
		Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, second)).To(Succeed())
		Expect(string(second.UID)).NotTo(Equal(old.Annotations[workload.AnnotationWorkloadUID]))
		Eventually(func() *metav1.Time {
			_ = admin.Get(ctx, client.ObjectKeyFromObject(&p), &p)
			return p.DeletionTimestamp
		}).WithTimeout(wait).ShouldNot(BeNil(), "the garbage collector deletes the first Job's Pod")
		Eventually(eventReasons(ns, "Job", name)).WithTimeout(wait).Should(ContainElement(workload.ReasonEarlier))
		held := func() {
			GinkgoHelper()
			Consistently(func(g Gomega) {
				g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(second), second)).To(Succeed())
				g.Expect(second.Spec.Suspend).To(Equal(ptr.To(true)), "the new Job waits")
				g.Expect(second.Annotations).NotTo(HaveKey(workload.AnnotationFencingToken))
				g.Expect(framework.PhaseOf(ctx, admin, ns, old.Name)()).To(Equal(locksv1.PhaseGranted), "the old Pod's lock is kept")
			}).WithTimeout(3 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		}
		held()

		By("alice makes a request of her own for the new Job: its other request name, the new Job its controlling owner, the same holder and lock (it shares her old Job's grant)")
		forged := wrappers.MakeLockRequest(workload.RequestNames("job", name)[1], ns).Lock("acme/infra", "replaced", "default").Owner("", 0).Session("job/" + name).Obj()
		forged.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: name, UID: second.UID, Controller: ptr.To(true)}}
		Expect(alice.Create(ctx, forged)).To(Succeed())
		Eventually(phase(forged.Name)).WithTimeout(wait).Should(Equal(locksv1.PhaseGranted), "hers, as the old Job's holder shares")
		held()

		By("the old Pod stops: the test removes it as its kubelet would (grace period 0)")
		Expect(admin.Delete(ctx, &p, client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(func() types.UID {
			lr := &locksv1.LockRequest{}
			_ = admin.Get(ctx, client.ObjectKeyFromObject(old), lr)
			return types.UID(lr.Annotations[workload.AnnotationWorkloadUID])
		}).WithTimeout(wait).Should(Equal(second.UID), "the old request is deleted, and the manager makes the new Job's under the first name")
		Eventually(phase(old.Name)).WithTimeout(wait).Should(Equal(locksv1.PhaseGranted))
		Eventually(func() []corev1.Pod { return jobPods(name) }).WithTimeout(wait).Should(HaveLen(1), "the new Job runs")
	})

	It("keeps a running Pod's lock through a deletion in the foreground (Argo CD's prune) until the Pod is gone", func() {
		p := pod(ns, "pruned", "acme/infra:pruned")
		Expect(alice.Create(ctx, p)).To(Succeed())
		lrName := workload.RequestName("pod", "pruned")
		Eventually(phase(lrName)).WithTimeout(wait).Should(Equal(locksv1.PhaseGranted))
		Eventually(func() string { _ = admin.Get(ctx, client.ObjectKeyFromObject(p), p); return p.Spec.NodeName }).WithTimeout(wait).Should(Equal(node))
		next := pod(ns, "after-prune", "acme/infra:pruned")
		Expect(alice.Create(ctx, next)).To(Succeed())
		Eventually(phase(workload.RequestName("pod", "after-prune"))).WithTimeout(wait).Should(Equal(locksv1.PhasePending))

		Expect(alice.Delete(ctx, p, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(framework.PhaseOf(ctx, admin, ns, lrName)()).To(Equal(locksv1.PhaseGranted))
			g.Expect(framework.PhaseOf(ctx, admin, ns, workload.RequestName("pod", "after-prune"))()).To(Equal(locksv1.PhasePending))
		}).WithTimeout(3*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), "the garbage collector does not take the lock of a Pod that still runs")

		By("the container stops: the test removes the Pod as its kubelet would")
		Expect(admin.Delete(ctx, p, client.GracePeriodSeconds(0))).To(Succeed())
		Eventually(phase(workload.RequestName("pod", "after-prune"))).WithTimeout(wait).Should(Equal(locksv1.PhaseGranted))
	})

	It("lets the owner suspend a running Job and resume it as usual: it keeps its lock meanwhile", func() {
		j := job(ns, "pausable", "acme/infra:pausable")
		Expect(alice.Create(ctx, j)).To(Succeed())
		lrName := workload.RequestName("job", "pausable")
		Eventually(phase(lrName)).WithTimeout(wait).Should(Equal(locksv1.PhaseGranted))
		Eventually(func() []corev1.Pod { return jobPods("pausable") }).WithTimeout(wait).Should(HaveLen(1))

		By("alice suspends it: the Job controller deletes its Pod, and the Job stays suspended with its lock")
		Expect(alice.Patch(ctx, j, client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"suspend":true}}`)))).To(Succeed())
		Eventually(func(g Gomega) {
			for _, p := range jobPods("pausable") {
				g.Expect(p.DeletionTimestamp).NotTo(BeNil())
			}
		}).WithTimeout(wait).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(j), j)).To(Succeed())
			g.Expect(j.Spec.Suspend).To(Equal(ptr.To(true)), "the owner's suspend stands")
			g.Expect(j.Annotations).To(HaveKey(workload.AnnotationFencingToken))
			g.Expect(framework.PhaseOf(ctx, admin, ns, lrName)()).To(Equal(locksv1.PhaseGranted))
		}).WithTimeout(3 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		for _, p := range jobPods("pausable") {
			Expect(admin.Delete(ctx, &p, client.GracePeriodSeconds(0))).To(Succeed()) // as its kubelet would
		}

		By("alice resumes it: the Job controller makes its Pod again")
		Expect(alice.Patch(ctx, j, client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"suspend":false}}`)))).To(Succeed())
		Eventually(func(g Gomega) {
			pods := jobPods("pausable")
			g.Expect(pods).To(HaveLen(1))
			g.Expect(pods[0].DeletionTimestamp).To(BeNil())
		}).WithTimeout(wait).Should(Succeed())
		Expect(framework.PhaseOf(ctx, admin, ns, lrName)()).To(Equal(locksv1.PhaseGranted))
	})

	It("serializes a CronJob's Jobs: a Job the CronJob controller starts while the last one runs waits, suspended", func() {
		// The CronJob controller starts at most one Job a minute (a Job's name is the CronJob's
		// plus the scheduled minute), so this spec takes one to two minutes.
		cj := &batchv1.CronJob{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
			Spec: batchv1.CronJobSpec{
				Schedule:          "* * * * *",
				ConcurrencyPolicy: batchv1.AllowConcurrent,
				JobTemplate: batchv1.JobTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{workload.AnnotationLock: "acme/infra:nightly"}},
					Spec:       job(ns, "unused", "acme/infra:nightly").Spec,
				},
			},
		}
		if !mutating {
			// Nothing is filled in: the CronJob's Jobs must carry what the policy would give
			// them, as the CronJob controller's identity (the user the controller manager runs as).
			tmpl := &cj.Spec.JobTemplate
			tmpl.Labels = map[string]string{workload.LabelGated: "true"}
			tmpl.Annotations[workload.AnnotationCreatedBy] = "turnstile-admin"
			tmpl.Spec.Suspend = ptr.To(true)
		}
		Expect(admin.Create(ctx, cj)).To(Succeed())
		DeferCleanup(func() { _ = admin.Delete(ctx, cj) })
		cronJobs := func() []batchv1.Job {
			var jobs batchv1.JobList
			Expect(admin.List(ctx, &jobs, client.InNamespace(ns))).To(Succeed())
			var out []batchv1.Job
			for _, j := range jobs.Items {
				if c := metav1.GetControllerOf(&j); c != nil && c.Kind == "CronJob" && c.Name == cj.Name {
					out = append(out, j)
				}
			}
			return out
		}
		var first batchv1.Job
		Eventually(func(g Gomega) {
			jobs := cronJobs()
			g.Expect(jobs).To(HaveLen(1))
			first = jobs[0]
		}).WithTimeout(90*time.Second).Should(Succeed(), "the CronJob controller starts a Job within a minute")
		Expect(first.Annotations).To(HaveKeyWithValue(workload.AnnotationCreatedBy, "turnstile-admin"),
			"the Job's creator is the CronJob controller's identity (here turnstile-admin, the user the controller manager runs as)")
		Eventually(phase(workload.RequestName("job", first.Name))).WithTimeout(wait).Should(Equal(locksv1.PhaseGranted))
		var p1 corev1.Pod
		Eventually(func(g Gomega) {
			pods := jobPods(first.Name)
			g.Expect(pods).To(HaveLen(1))
			p1 = pods[0]
			g.Expect(p1.Spec.NodeName).To(Equal(node))
		}).WithTimeout(wait).Should(Succeed())

		var second batchv1.Job
		Eventually(func(g Gomega) {
			jobs := cronJobs()
			g.Expect(jobs).To(HaveLen(2))
			for _, j := range jobs {
				if j.Name != first.Name {
					second = j
				}
			}
		}).WithTimeout(90*time.Second).Should(Succeed(), "the CronJob controller starts the next minute's Job while the first runs")
		Eventually(phase(workload.RequestName("job", second.Name))).WithTimeout(wait).Should(Equal(locksv1.PhasePending))
		Expect(admin.Get(ctx, client.ObjectKeyFromObject(&second), &second)).To(Succeed())
		Expect(second.Spec.Suspend).To(Equal(ptr.To(true)))
		Expect(jobPods(second.Name)).To(BeEmpty())

		By("the first Job's container exits 0: the test writes its Pod Succeeded, as the kubelet would")
		succeed(&p1)
		Eventually(phase(workload.RequestName("job", second.Name))).WithTimeout(wait).Should(Equal(locksv1.PhaseGranted))
		Eventually(func() []corev1.Pod { return jobPods(second.Name) }).WithTimeout(wait).Should(HaveLen(1))
		Expect(phase(workload.RequestName("job", first.Name))()).To(Equal(locksv1.PhaseReleased))
	})
})

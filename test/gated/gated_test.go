package gated

import (
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

const wait = 60 * time.Second

var _ = Describe("Gated workloads", func() {
	var (
		ns    string
		alice client.Client
	)
	BeforeEach(func() {
		ns = newNamespace()
		alice = as("alice")
	})

	holdKey := func(path string) *locksv1.LockRequest { return holdKeyIn(ns, path) }
	requestOf := func(kind, name string) *locksv1.LockRequest { return requestIn(ns, kind, name) }
	waiting, granted, get := waitingRequest, grantedRequest, reload
	release, markSucceeded, markComplete, gated := releaseRequest, markPodSucceeded, markJobComplete, isGated

	It("holds a Pod at its scheduling gate until the lock is free, then lets it go with the fencing token, and releases the lock when it succeeds", func() {
		bob := holdKey("db")
		p := pod(ns, "migrate", "acme/infra:db")
		Expect(alice.Create(ctx, p)).To(Succeed())
		Expect(gated(p)).To(BeTrue(), "the mutating policy gates an annotated Pod")
		Expect(p.Annotations).To(HaveKeyWithValue(workload.AnnotationCreatedBy, "alice"))

		lr := waiting(requestOf("pod", "migrate"))
		Expect(lr.Spec.Holder.Owner).To(Equal("alice"), "the request is held for the Pod's creator")
		Expect(lr.Spec.Holder.Session).To(Equal("pod/migrate"))
		Expect(lr.Annotations).To(And(HaveKeyWithValue(workload.AnnotationWorkload, "pod/migrate"), HaveKeyWithValue(workload.AnnotationWorkloadUID, string(p.UID)),
			HaveKeyWithValue(workload.AnnotationCreatedBy, "system:serviceaccount:"+managerNS+":"+managerSA)), "the manager's stamp: made by it, for this Pod")
		Expect(lr.OwnerReferences).To(BeEmpty(), "no owner: the garbage collector does not delete a lock before its workload has stopped")
		Expect(lr.Spec.Locks).To(Equal([]locksv1.LockTarget{{Repo: "acme/infra", Path: "db", Workspace: "default"}}))
		Expect(gated(get(p).(*corev1.Pod))).To(BeTrue(), "still gated while its request waits behind bob")
		Expect(p.Annotations).NotTo(HaveKey(workload.AnnotationFencingToken))

		release(bob)
		lr = granted(lr)
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			g.Expect(gated(p)).To(BeFalse())
		}).WithTimeout(wait).Should(Succeed())
		Expect(p.Annotations).To(HaveKeyWithValue(workload.AnnotationFencingToken, strconv.FormatInt(lr.Status.FencingToken, 10)),
			"the token is written in the same write that removes the gate")
		Expect(lr.Status.FencingToken).To(BeNumerically(">", bob.Status.FencingToken))

		markSucceeded(p)
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(lr), lr)).To(Succeed())
			g.Expect(lr.Spec.Release).To(BeTrue())
			g.Expect(lr.Status.Phase).To(Equal(locksv1.PhaseReleased))
		}).WithTimeout(wait).Should(Succeed())
	})

	It("renews the lock of a Pod that runs past twice its ttl, stops when the Pod finishes, and goes with a Pod that is deleted", func() {
		const ttl = 4 * time.Second
		p := pod(ns, "long-run", "acme/infra:renew")
		p.Annotations[workload.AnnotationTTL] = ttl.String()
		Expect(alice.Create(ctx, p)).To(Succeed())
		lr := granted(requestOf("pod", "long-run"))
		Eventually(func() bool { return gated(get(p).(*corev1.Pod)) }).WithTimeout(wait).Should(BeFalse())
		firstGen, grantedAt := lr.Generation, lr.Status.GrantedAt.Time

		By("the Pod runs (the test plays no kubelet: it simply is not marked finished) for more than twice its ttl")
		Consistently(func(g Gomega) {
			got := &locksv1.LockRequest{}
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(lr), got)).To(Succeed())
			g.Expect(got.Status.Phase).To(Equal(locksv1.PhaseGranted), "the running Pod keeps its lock")
		}).WithTimeout(2*ttl + 2*time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		lr = get(lr).(*locksv1.LockRequest)
		Expect(lr.Status.RenewedAt).NotTo(BeNil(), "the grant was renewed")
		Expect(lr.Status.ExpiresAt.Time).To(BeTemporally(">", grantedAt.Add(2*ttl)), "it holds beyond twice its ttl from the grant")
		// A renewal is due each quarter of the term (3 or 4 s): about 10 in these 10 s. A manager
		// that renewed on every event (each renewal's own status write is one) makes hundreds.
		Expect(lr.Generation-firstGen).To(BeNumerically("<=", 20), "renewed at its quarter-term pace, not on every event")

		By("the Pod finishes: the lock is released and no longer renewed")
		markSucceeded(p)
		Eventually(func() locksv1.LockRequestPhase { return get(lr).(*locksv1.LockRequest).Status.Phase }).
			WithTimeout(wait).Should(Equal(locksv1.PhaseReleased))
		finalGen := lr.Generation
		Consistently(func() int64 { return get(lr).(*locksv1.LockRequest).Generation }).
			WithTimeout(ttl/2+time.Second).WithPolling(200*time.Millisecond).Should(Equal(finalGen), "nothing renews a finished Pod's request")

		By("a running Pod that is deleted takes its request (and its renewals) with it")
		q := pod(ns, "deleted-run", "acme/infra:renew")
		q.Annotations[workload.AnnotationTTL] = ttl.String()
		Expect(alice.Create(ctx, q)).To(Succeed())
		lrq := granted(requestOf("pod", "deleted-run"))
		Eventually(func() bool { return gated(get(q).(*corev1.Pod)) }).WithTimeout(wait).Should(BeFalse())
		Eventually(func() *metav1.Time { return get(lrq).(*locksv1.LockRequest).Status.RenewedAt }).
			WithTimeout(wait).ShouldNot(BeNil(), "renewed while it runs")
		Expect(alice.Delete(ctx, q)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(lrq), lrq)) }).
			WithTimeout(wait).Should(BeTrue(), "the request goes with its Pod")
	})

	It("shows the workload that holds and the one that waits in kubectl get locks and kubectl turnstile locks (the real kubectl and plugin)", func() {
		p := pod(ns, "migrate-db", "acme/infra:shown")
		Expect(alice.Create(ctx, p)).To(Succeed())
		granted(requestOf("pod", "migrate-db"))
		j := job(ns, "apply-db", "acme/infra:shown")
		Expect(alice.Create(ctx, j)).To(Succeed())
		waiting(requestOf("job", "apply-db"))

		kubectl := framework.AdminKubectl(env, env.Kubectl())
		out, err := kubectl.Run("", "get", "locks", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		// kubectl prints one table per kind, each with its own header.
		Expect(out).To(MatchRegexp(`(?m)^NAME\s+LOCK\s+OWNER\s+SESSION\s`))
		Expect(out).To(MatchRegexp(`(?m)^lockrequest\.locks\.turnstile\.dev/pod-migrate-db\s+acme/infra/shown/default\s+alice\s+pod/migrate-db\s.*\sGranted\s`))
		Expect(out).To(MatchRegexp(`(?m)^lockrequest\.locks\.turnstile\.dev/job-apply-db\s+acme/infra/shown/default\s+alice\s+job/apply-db\s.*\sPending\s`))
		Expect(out).To(MatchRegexp(`(?m)^NAME\s+REPO\s+PATH\s+WORKSPACE\s+PROJECT\s+MODE\s+HOLDERS\s+MAX\s+HOLDER\s+PULL\s+SESSION\s`))
		Expect(out).To(MatchRegexp(`(?m)^projectlock\.locks\.turnstile\.dev/\S+\s+acme/infra\s+shown\s+default\s+Exclusive\s+1\s+alice\s+pod/migrate-db\s+1\s`),
			"the key's row: held by the Pod, one waiting")

		By("the plugin names the holding workload in its REASON")
		framework.PutOnPath(framework.PluginBinary())
		out, err = kubectl.Run("", "turnstile", "-n", ns, "locks")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(MatchRegexp(`(?m)^acme/infra/shown/default\s+alice\s+[1-9][0-9]*\s+1\s+\S+\s+Pod ` + ns + `/migrate-db$`))
	})

	It("runs two Jobs on one key one after the other: the second stays suspended until the first completes", func() {
		first, second := job(ns, "apply-1", "acme/infra:vpc"), job(ns, "apply-2", "acme/infra:vpc")
		Expect(alice.Create(ctx, first)).To(Succeed())
		Expect(first.Spec.Suspend).To(Equal(ptr.To(true)), "the mutating policy suspends an annotated Job")
		lr1 := granted(requestOf("job", "apply-1"))
		Eventually(func() *bool { return get(first).(*batchv1.Job).Spec.Suspend }).WithTimeout(wait).Should(Equal(ptr.To(false)))
		token1 := strconv.FormatInt(lr1.Status.FencingToken, 10)
		Expect(first.Annotations).To(HaveKeyWithValue(workload.AnnotationFencingToken, token1))
		Expect(first.Spec.Template.Annotations).To(HaveKeyWithValue(workload.AnnotationFencingToken, token1), "the Job's Pods carry the token")

		Expect(alice.Create(ctx, second)).To(Succeed())
		lr2 := waiting(requestOf("job", "apply-2"))
		Expect(lr2.Spec.Holder.Session).To(Equal("job/apply-2"), "two Jobs of one user are two holders")
		Expect(get(second).(*batchv1.Job).Spec.Suspend).To(Equal(ptr.To(true)), "suspended while the first Job holds the key")

		markComplete(first)
		lr2 = granted(lr2)
		Eventually(func() *bool { return get(second).(*batchv1.Job).Spec.Suspend }).WithTimeout(wait).Should(Equal(ptr.To(false)))
		Expect(second.Annotations).To(HaveKeyWithValue(workload.AnnotationFencingToken, strconv.FormatInt(lr2.Status.FencingToken, 10)))
		Expect(lr2.Status.FencingToken).To(BeNumerically(">", lr1.Status.FencingToken))
		Expect(get(lr1).(*locksv1.LockRequest).Status.Phase).To(Equal(locksv1.PhaseReleased))
	})

	It("deletes a waiting Pod's request when the Pod is deleted", func() {
		bob := holdKey("dns")
		p := pod(ns, "waiter", "acme/infra:dns")
		Expect(alice.Create(ctx, p)).To(Succeed())
		lr := waiting(requestOf("pod", "waiter"))
		Expect(alice.Delete(ctx, p)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(lr), lr)) }).
			WithTimeout(wait).Should(BeTrue(), "the request goes with its Pod")
		Expect(get(bob).(*locksv1.LockRequest).Status.Phase).To(Equal(locksv1.PhaseGranted))
	})

	It("keeps the lock of a running Pod that leaves the manager's gated-only cache (it reads the API server before deleting a request)", func() {
		p := pod(ns, "relabelled", "acme/infra:cache")
		Expect(alice.Create(ctx, p)).To(Succeed())
		lr := granted(requestOf("pod", "relabelled"))
		Eventually(func() bool { return gated(get(p).(*corev1.Pod)) }).WithTimeout(wait).Should(BeFalse())

		By("a cluster admin (who passes the gate policy) removes the gated label: the Pod drops out of the label-selected cache")
		patch := client.MergeFrom(p.DeepCopy())
		delete(p.Labels, workload.LabelGated)
		Expect(admin.Patch(ctx, p, patch)).To(Succeed())
		By("a second Pod on the key waits, and shows the manager has acted on events since")
		other := pod(ns, "next", "acme/infra:cache")
		Expect(alice.Create(ctx, other)).To(Succeed())
		waiting(requestOf("pod", "next"))
		// Nothing marks the moment the manager has handled the Pod leaving its cache (the right
		// outcome is that nothing happens), so the spec watches for a while: a manager that
		// trusted its cache deletes the request within milliseconds of that event, and the next
		// Pod is let go.
		Consistently(func(g Gomega) {
			got := &locksv1.LockRequest{}
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(lr), got)).To(Succeed(), "the running Pod's request is kept")
			g.Expect(got.Status.Phase).To(Equal(locksv1.PhaseGranted), "the running Pod still holds its lock")
			g.Expect(gated(get(other).(*corev1.Pod))).To(BeTrue(), "the next Pod waits")
		}).WithTimeout(3 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	})

	It("keeps the lock of a running Job that leaves the manager's gated-only cache, though it has no Pods yet (the live read, not the Pod count, keeps it)", func() {
		j := job(ns, "relabelled", "acme/infra:cache-job")
		Expect(alice.Create(ctx, j)).To(Succeed())
		lr := granted(requestOf("job", "relabelled"))
		Eventually(func() *bool { return get(j).(*batchv1.Job).Spec.Suspend }).WithTimeout(wait).Should(Equal(ptr.To(false)))

		By("a cluster admin removes the gated label: the Job drops out of the label-selected cache (no Job controller here, so it has no Pods)")
		j = get(j).(*batchv1.Job)
		patch := client.MergeFrom(j.DeepCopy())
		delete(j.Labels, workload.LabelGated)
		Expect(admin.Patch(ctx, j, patch)).To(Succeed())
		other := job(ns, "next", "acme/infra:cache-job")
		Expect(alice.Create(ctx, other)).To(Succeed())
		waiting(requestOf("job", "next"))
		// As for the Pod above: the right outcome is that nothing happens, so the spec watches.
		Consistently(func(g Gomega) {
			got := &locksv1.LockRequest{}
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(lr), got)).To(Succeed(), "the running Job's request is kept")
			g.Expect(got.Status.Phase).To(Equal(locksv1.PhaseGranted), "the running Job still holds its lock")
			g.Expect(get(other).(*batchv1.Job).Spec.Suspend).To(Equal(ptr.To(true)), "the next Job waits")
		}).WithTimeout(3 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	})

	It("refuses a user removing a Pod's gate or unsuspending a gated Job by hand", func() {
		holdKey("iam")
		p := pod(ns, "impatient", "acme/infra:iam")
		Expect(alice.Create(ctx, p)).To(Succeed())
		waiting(requestOf("pod", "impatient"))
		patch := client.MergeFrom(p.DeepCopy())
		p.Spec.SchedulingGates = nil
		err := alice.Patch(ctx, p, patch)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("ValidatingAdmissionPolicy 'turnstile-workload-gate'"))
		Expect(err.Error()).To(ContainSubstring("only the Turnstile manager removes the scheduling gate locks.turnstile.dev/lock"))

		p = get(p).(*corev1.Pod)
		patch = client.MergeFrom(p.DeepCopy())
		p.Annotations[workload.AnnotationFencingToken] = "999999999"
		err = alice.Patch(ctx, p, patch)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a user cannot write a token: %v", err)

		j := job(ns, "impatient", "acme/infra:iam")
		Expect(alice.Create(ctx, j)).To(Succeed())
		waiting(requestOf("job", "impatient"))
		jpatch := client.MergeFrom(j.DeepCopy())
		j.Spec.Suspend = ptr.To(false)
		err = alice.Patch(ctx, j, jpatch)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("only the Turnstile manager unsuspends it"))
		Expect(gated(get(p).(*corev1.Pod))).To(BeTrue())
		Expect(get(j).(*batchv1.Job).Spec.Suspend).To(Equal(ptr.To(true)))
	})

	It("refuses a workload whose annotations are not valid, naming the annotation", func() {
		for value, want := range map[string]string{
			"acme":                       "annotation locks.turnstile.dev/lock must name one or more locks as REPO:PATH[:WORKSPACE[:PROJECT]]",
			"acme/infra:../etc":          "annotation locks.turnstile.dev/lock must name one or more locks",
			"acme/infra:a:b:c:d":         "annotation locks.turnstile.dev/lock must name one or more locks",
			"acme/infra:ok, acme:broken": "not \"acme/infra:ok, acme:broken\"",
			// The CRD's lengths: admitted here, the lock request would be refused later.
			"acme/" + strings.Repeat("r", 196) + ":vpc": "at most 200, 253, 63 and 63 characters",
			"acme/infra:vpc:" + strings.Repeat("w", 64): "annotation locks.turnstile.dev/lock must name one or more locks",
			// A value of several lines is quoted on one line: the API server drops a message of
			// several lines for "failed expression: ...".
			"acme/infra:ok\nacme:broken": "not \"acme/infra:ok acme:broken\"",
		} {
			err := alice.Create(ctx, pod(ns, "bad", value))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%q: %v", value, err)
			Expect(err.Error()).To(ContainSubstring("ValidatingAdmissionPolicy 'turnstile-workload-annotations'"))
			Expect(err.Error()).To(ContainSubstring(want), value)
		}
		j := job(ns, "bad-ttl", "acme/infra:ok")
		j.Annotations = map[string]string{workload.AnnotationTTL: "soon"}
		err := alice.Create(ctx, j)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("annotation locks.turnstile.dev/ttl must be a positive duration"))
		p := pod(ns, "bad-priority", "acme/infra:ok")
		p.Annotations[workload.AnnotationPriority] = "urgent"
		Expect(alice.Create(ctx, p)).To(MatchError(ContainSubstring("annotation locks.turnstile.dev/priority must be Low, Normal, High or Critical")))

		// An empty workspace is the default and an empty project none, as kubectl turnstile run -l
		// reads them (internal/lockkey.Parse).
		Expect(alice.Create(ctx, pod(ns, "empty-parts", "acme/infra:a::, acme/infra:b:prod:"), client.DryRunAll)).To(Succeed())
		ok := pod(ns, "two-keys", "acme/infra:a, acme/infra:b:prod")
		Expect(alice.Create(ctx, ok)).To(Succeed())
		lr := granted(requestOf("pod", "two-keys"))
		Expect(lr.Spec.Locks).To(Equal([]locksv1.LockTarget{
			{Repo: "acme/infra", Path: "a", Workspace: "default"}, {Repo: "acme/infra", Path: "b", Workspace: "prod"},
		}))
	})

	It("stops a workload that loses its lock: the Pod is deleted, the Job suspended again, each with an event saying why", func() {
		p := pod(ns, "long", "acme/infra:net")
		Expect(alice.Create(ctx, p)).To(Succeed())
		granted(requestOf("pod", "long"))
		Eventually(func() bool { return gated(get(p).(*corev1.Pod)) }).WithTimeout(wait).Should(BeFalse())

		j := job(ns, "long", "acme/infra:fw")
		Expect(alice.Create(ctx, j)).To(Succeed())
		granted(requestOf("job", "long"))
		Eventually(func() *bool { return get(j).(*batchv1.Job).Spec.Suspend }).WithTimeout(wait).Should(Equal(ptr.To(false)))

		By("an admin force-unlocks both keys (deletes their ProjectLocks)")
		for _, path := range []string{"net", "fw"} {
			pl := &locksv1.ProjectLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns,
				Name: lockkey.Name(locksv1.LockTarget{Repo: "acme/infra", Path: path, Workspace: "default"})}}
			Expect(admin.Delete(ctx, pl)).To(Succeed())
		}
		Eventually(func() bool { return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{})) }).
			WithTimeout(wait).Should(BeTrue(), "the Pod that lost its lock is deleted")
		Eventually(func(g Gomega) {
			g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(j), j)).To(Succeed())
			g.Expect(j.Spec.Suspend).To(Equal(ptr.To(true)))
			g.Expect(j.Annotations).NotTo(HaveKey(workload.AnnotationFencingToken))
		}).WithTimeout(wait).Should(Succeed(), "the Job that lost its lock is suspended again")
		Eventually(func(g Gomega) {
			var evs corev1.EventList
			g.Expect(admin.List(ctx, &evs, client.InNamespace(ns))).To(Succeed())
			var lost []string
			for _, e := range evs.Items {
				if e.Reason == workload.ReasonLost {
					lost = append(lost, e.InvolvedObject.Kind+": "+e.Message)
				}
			}
			g.Expect(lost).To(ContainElements(
				MatchRegexp(`^Pod: deleted: the Pod lost its lock: lock request pod-long is Released \(.+\)$`),
				MatchRegexp(`^Job: suspended: the Job lost its lock: lock request job-long is Released \(.+\); delete it and create it again to ask anew$`),
			))
		}).WithTimeout(wait).Should(Succeed())

		By("a user cannot unsuspend the stopped Job")
		patch := client.MergeFrom(j.DeepCopy())
		j.Spec.Suspend = ptr.To(false)
		Expect(alice.Patch(ctx, j, patch)).To(MatchError(ContainSubstring("only the Turnstile manager unsuspends it")))
	})
})

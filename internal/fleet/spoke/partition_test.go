package spoke_test

import (
	"context"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/testing/netcut"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

// TestPartitionStopsHoldersBeforeTheHubLetsGo cuts the network between the spoke's agent and
// the hub (netcut's Blackhole: nothing answers, as when packets are dropped) while a gated Job
// of the spoke runs on the hub's grant and a spoke request waits on the hub behind a hub
// holder. The Job's request is marked lost (HubUnreachable) before the hub may hand its lock
// on (the hub Lease's renewTime + L, read from the hub directly), and the Job is suspended
// again without its token; the waiter, granted on the hub during the cut, is never Granted in
// the spoke; once the network heals, nothing runs again under the old token.
func TestPartitionStopsHoldersBeforeTheHubLetsGo(t *testing.T) {
	const ns = "team-partition"
	t.Parallel()
	spk := fleet(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	host, err := url.Parse(hub.Config.Host)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	p, err := netcut.New(host.Host)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	defer func() { _ = p.Close() }()
	through := rest.CopyConfig(hub.Config)
	through.Host = "https://" + p.Addr()
	// L = 20 s, with a grace and skew bound that fit: the stop comes about 13 s after the last
	// renewal, the hub's release 20 s after it.
	settings := skew.Settings{Lease: 20 * time.Second, Grace: 3 * time.Second, MaxSkew: 2 * time.Second}
	m := spk.startWith(t, through, settings)
	defer func() { p.Pass(); _ = m.Stop() }()

	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "apply", Labels: map[string]string{workload.LabelGated: "true"},
			Annotations: map[string]string{workload.AnnotationLock: "acme/infra:vpc", workload.AnnotationCreatedBy: "alice"}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
	}
	g.Expect(spk.Client.Create(ctx, job)).To(gomega.Succeed())
	reqName := workload.RequestName("job", "apply")
	hubName := spk.cluster + "." + reqName
	var token string
	g.Eventually(func(g gomega.Gomega) {
		h := get(g, hub.Client, ns, hubName)
		g.Expect(h.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
		var j batchv1.Job
		g.Expect(spk.Client.Get(ctx, client.ObjectKeyFromObject(job), &j)).To(gomega.Succeed())
		g.Expect(j.Spec.Suspend).To(gomega.HaveValue(gomega.BeFalse()))
		token = strconv.FormatInt(h.Status.FencingToken, 10)
		g.Expect(j.Annotations).To(gomega.HaveKeyWithValue(workload.AnnotationFencingToken, token))
	}).Should(gomega.Succeed())

	// A waiter: the hub's holder keeps the key it waits for until the cut.
	holder := request(ns, "alice-plan", "alice")
	holder.Spec.Locks[0].Path = "dns"
	g.Expect(hub.Client.Create(ctx, holder)).To(gomega.Succeed())
	granted(t, hub.Client, ns, "alice-plan")
	waiter := request(ns, "carol-plan", "carol")
	waiter.Spec.Locks[0].Path = "dns"
	stop := spk.neverGranted(t, ns, "carol-plan")
	g.Expect(spk.Client.Create(ctx, waiter)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(get(g, spk.Client, ns, "carol-plan").Status.Phase).To(gomega.Equal(locksv1.PhasePending))
	}).Should(gomega.Succeed())

	p.Blackhole()
	// The hub hands the dns key to the waiter during the cut.
	g.Expect(hub.Client.Patch(ctx, holder, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"release":true}}`)))).To(gomega.Succeed())
	granted(t, hub.Client, ns, spk.cluster+".carol-plan")

	// (a) The holder is stopped before the hub may let its lock go.
	var lostAt time.Time
	g.Eventually(func(g gomega.Gomega) {
		lr := get(g, spk.Client, ns, reqName)
		g.Expect(lr.Status.Phase).To(gomega.Equal(locksv1.PhaseReleased))
		lostAt = time.Now()
		c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
		g.Expect(c).NotTo(gomega.BeNil())
		g.Expect(c.Reason).To(gomega.Equal(spoke.ReasonHubUnreachable))
		g.Expect(c.Message).To(gomega.ContainSubstring(ns + "/" + spoke.LeaseName(spk.cluster)))
		g.Expect(c.Message).To(gomega.ContainSubstring("since"))
		g.Expect(c.Message).To(gomega.ContainSubstring("deadline"))
	}).WithTimeout(40 * time.Second).Should(gomega.Succeed())
	var lease coordinationv1.Lease
	g.Expect(hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: spoke.LeaseName(spk.cluster)}, &lease)).To(gomega.Succeed())
	lapse := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	g.Expect(lostAt).To(gomega.BeTemporally("<", lapse), "the holder was stopped at %s, after the hub Lease lapsed at %s", lostAt, lapse)
	g.Expect(get(g, hub.Client, ns, hubName).Status.Phase).To(gomega.Equal(locksv1.PhaseGranted), "the hub let the lock go before the spoke stopped its holder")
	g.Eventually(func(g gomega.Gomega) {
		var j batchv1.Job
		g.Expect(spk.Client.Get(ctx, client.ObjectKeyFromObject(job), &j)).To(gomega.Succeed())
		g.Expect(j.Spec.Suspend).To(gomega.HaveValue(gomega.BeTrue()))
		g.Expect(j.Annotations).NotTo(gomega.HaveKey(workload.AnnotationFencingToken))
	}).Should(gomega.Succeed())
	// The agent says what it did, on the request and on the Job.
	g.Eventually(func(g gomega.Gomega) {
		var evs eventsv1.EventList
		g.Expect(spk.Client.List(ctx, &evs, client.InNamespace(ns))).To(gomega.Succeed())
		on := map[string]string{}
		for _, e := range evs.Items {
			if e.Reason == spoke.ReasonStoppedOnPartition && e.Type == corev1.EventTypeWarning {
				on[e.Regarding.Kind+"/"+e.Regarding.Name] = e.Note
			}
		}
		g.Expect(on).To(gomega.HaveKeyWithValue("LockRequest/"+reqName, gomega.ContainSubstring("stopped: the hub has not answered a renewal")))
		g.Expect(on).To(gomega.HaveKeyWithValue("Job/apply", gomega.ContainSubstring("stopped: the hub has not answered a renewal")))
	}).Should(gomega.Succeed())

	// The hub lets the spoke's locks go once its Lease lapses.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(get(g, hub.Client, ns, hubName).Status.Phase.IsFinal()).To(gomega.BeTrue())
		g.Expect(get(g, hub.Client, ns, spk.cluster+".carol-plan").Status.Phase.IsFinal()).To(gomega.BeTrue())
	}).WithTimeout(40 * time.Second).Should(gomega.Succeed())

	// (c) The network heals: the agent hears the hub again, and nothing runs on the old token.
	p.Pass()
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(get(g, spk.Client, ns, "carol-plan").Status.Phase.IsFinal()).To(gomega.BeTrue())
	}).WithTimeout(40 * time.Second).Should(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) {
		lr := get(g, spk.Client, ns, reqName)
		g.Expect(lr.Status.Phase).To(gomega.Equal(locksv1.PhaseReleased))
		g.Expect(meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted).Reason).To(gomega.Equal(spoke.ReasonHubUnreachable))
		var j batchv1.Job
		g.Expect(spk.Client.Get(ctx, client.ObjectKeyFromObject(job), &j)).To(gomega.Succeed())
		g.Expect(j.Spec.Suspend).To(gomega.HaveValue(gomega.BeTrue()))
		g.Expect(j.Annotations).NotTo(gomega.HaveKey(workload.AnnotationFencingToken))
	}).WithTimeout(5 * time.Second).Should(gomega.Succeed())
	// (b) The waiter granted on the hub during the cut was never let go in the spoke.
	g.Expect(stop()).To(gomega.BeTrue(), "the waiter was Granted in the spoke on a grant made while the hub was unreachable")
}

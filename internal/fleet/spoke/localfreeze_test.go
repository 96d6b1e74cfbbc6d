package spoke_test

import (
	"context"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/testing/netcut"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

// firstGranted watches the spoke request ns/name and returns, at stop, the first time (by this
// process's clock, when the event arrived) any version of it showed Granted; zero if none did.
func (s *testSpoke) firstGranted(t *testing.T, ns, name string) func() time.Time {
	t.Helper()
	w, err := s.Client.Watch(context.Background(), &locksv1.LockRequestList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan time.Time, 1)
	go func() {
		var at time.Time
		for ev := range w.ResultChan() {
			if lr, ok := ev.Object.(*locksv1.LockRequest); ok && ev.Type != watch.Deleted && lr.Name == name &&
				lr.Status.Phase == locksv1.PhaseGranted && at.IsZero() {
				at = time.Now()
			}
		}
		first <- at
	}()
	return func() time.Time {
		w.Stop()
		return <-first
	}
}

// TestWindowOpeningDuringACutHoldsTheSpokesWorkload: a weekend freeze holds while the network
// does not. The hub has a Deny window for this spoke's cluster only (a window's own cluster
// scope) that opens every minute for 30 s. A gated Job of the spoke waits on the hub behind a
// hub holder; the network between the agent and the hub is cut while the window is closed, and
// the hub hands the Job's request the key then (its window is closed: a grant it rightly
// makes). The window opens during the cut: the spoke's mirror says so, judged by the spoke's
// clock. The network heals while the window is open: the spoke learns of the hub's grant and
// the partition rule would let it go, but the spoke holds it (FrozenInSpoke, and why says so)
// until the window closes by its clock; then the Job runs, on the hub's token.
func TestWindowOpeningDuringACutHoldsTheSpokesWorkload(t *testing.T) {
	const ns = "team-window-cut"
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
	// L = 60 s: the cut (about 20 s) ends long before the hub Lease could lapse.
	m := spk.startWith(t, through, skew.Settings{Lease: 60 * time.Second, Grace: 3 * time.Second, MaxSkew: 2 * time.Second})
	defer func() { p.Pass(); _ = m.Stop() }()

	cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "rollout"}, Spec: locksv1.CommandLockSpec{Windows: []locksv1.FreezeWindow{{
		Name: "half-minute", Schedule: "* * * * *", Duration: metav1.Duration{Duration: 30 * time.Second}, Action: locksv1.WindowDeny,
		WindowScope: locksv1.WindowScope{Clusters: &locksv1.ClusterScope{Names: []string{spk.cluster}}},
	}}}}
	g.Expect(hub.Client.Create(ctx, cl)).To(gomega.Succeed())
	defer func() { _ = hub.Client.Delete(ctx, cl) }()

	// The hub's holder (a request of the hub itself: in no cluster scope, so never frozen).
	holder := request(ns, "alice-vpc", "alice")
	g.Expect(hub.Client.Create(ctx, holder)).To(gomega.Succeed())
	granted(t, hub.Client, ns, "alice-vpc")

	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rollout", Labels: map[string]string{workload.LabelGated: "true"},
			Annotations: map[string]string{workload.AnnotationLock: "acme/infra:vpc", workload.AnnotationCommand: "rollout", workload.AnnotationCreatedBy: "bob"}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
	}
	reqName := workload.RequestName("job", "rollout")
	hubName := spk.cluster + "." + reqName
	granted := spk.firstGranted(t, ns, reqName)
	g.Expect(spk.Client.Create(ctx, job)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(get(g, hub.Client, ns, hubName).Status.Phase).To(gomega.Equal(locksv1.PhasePending))
		mc := spk.commandLock(g, "rollout")
		g.Expect(mc.Status.Windows).To(gomega.HaveLen(1))
	}).Should(gomega.Succeed())

	// Wait for the window to be closed, with 15 to 28 s before it opens: time for the hub to
	// grant while it is closed.
	var opens time.Time
	g.Eventually(func(g gomega.Gomega) {
		now := time.Now()
		g.Expect(now.Second()).To(gomega.BeNumerically(">=", 32))
		g.Expect(now.Second()).To(gomega.BeNumerically("<=", 45))
		var h locksv1.CommandLock
		g.Expect(hub.Client.Get(ctx, client.ObjectKey{Name: "rollout"}, &h)).To(gomega.Succeed())
		g.Expect(h.Status.Windows).To(gomega.HaveLen(1))
		g.Expect(h.Status.Windows[0].State).To(gomega.Equal(locksv1.WindowClosed))
		g.Expect(spk.commandLock(g, "rollout").Status.Windows[0].State).To(gomega.Equal(locksv1.WindowClosed))
		opens = now.Truncate(time.Minute).Add(time.Minute)
	}).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(gomega.Succeed())
	closes := opens.Add(30 * time.Second)

	p.Blackhole()
	g.Expect(hub.Client.Patch(ctx, holder, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"release":true}}`)))).To(gomega.Succeed())
	var token int64
	g.Eventually(func(g gomega.Gomega) {
		h := get(g, hub.Client, ns, hubName)
		g.Expect(h.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
		token = h.Status.FencingToken
	}).Should(gomega.Succeed())
	g.Expect(time.Now()).To(gomega.BeTemporally("<", opens), "the hub granted before the window opened")

	// The window opens during the cut: the mirror shows it, judged in the spoke.
	g.Eventually(func(g gomega.Gomega) {
		mc := spk.commandLock(g, "rollout")
		g.Expect(mc.Status.Windows[0].State).To(gomega.Equal(locksv1.WindowOpen))
		msg, ok := spoke.JudgedInSpoke(mc)
		g.Expect(ok).To(gomega.BeTrue())
		g.Expect(msg).To(gomega.ContainSubstring("judged in this spoke (cluster " + spk.cluster + ") by its own clock: the hub's judgement ran out at " + opens.UTC().Format(time.RFC3339)))
		c := meta.FindStatusCondition(mc.Status.Conditions, locksv1.ConditionLocked)
		g.Expect(c).NotTo(gomega.BeNil())
		g.Expect(c.Reason).To(gomega.Equal(locksv1.ReasonWindow))
	}).WithTimeout(60 * time.Second).Should(gomega.Succeed())
	g.Expect(get(g, spk.Client, ns, reqName).Status.Phase).NotTo(gomega.Equal(locksv1.PhaseGranted))

	// The network heals while the window is open: the spoke learns of the grant and holds it.
	p.Pass()
	g.Expect(time.Now()).To(gomega.BeTemporally("<", closes.Add(-10*time.Second)), "healed with time left in the window")
	g.Eventually(func(g gomega.Gomega) {
		lr := get(g, spk.Client, ns, reqName)
		g.Expect(lr.Status.Phase).To(gomega.Equal(locksv1.PhasePending))
		c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
		g.Expect(c).NotTo(gomega.BeNil())
		g.Expect(c.Reason).To(gomega.Equal(spoke.ReasonFrozenInSpoke))
		g.Expect(lr.Status.BlockedBy).To(gomega.Equal("commandlock/rollout"))
	}).WithTimeout(time.Until(closes)).Should(gomega.Succeed())
	out := spk.why(t, ns, reqName)
	g.Expect(out).To(gomega.ContainSubstring("granted by the hub, but not let go in this spoke (cluster " + spk.cluster + ")"))
	g.Expect(out).To(gomega.ContainSubstring("Rollout commands are frozen by window half-minute of commandlock rollout: Deny window in force"))
	g.Expect(get(g, hub.Client, ns, hubName).Status.Phase).To(gomega.Equal(locksv1.PhaseGranted), "the hub keeps its grant")
	g.Consistently(func(g gomega.Gomega) {
		var j batchv1.Job
		g.Expect(spk.Client.Get(ctx, client.ObjectKeyFromObject(job), &j)).To(gomega.Succeed())
		g.Expect(j.Spec.Suspend).To(gomega.HaveValue(gomega.BeTrue()))
		g.Expect(j.Annotations).NotTo(gomega.HaveKey(workload.AnnotationFencingToken))
	}).WithTimeout(time.Until(closes.Add(-time.Second))).Should(gomega.Succeed())

	// The window closes by the spoke's clock: the Job runs, on the hub's token, not before.
	g.Eventually(func(g gomega.Gomega) {
		var j batchv1.Job
		g.Expect(spk.Client.Get(ctx, client.ObjectKeyFromObject(job), &j)).To(gomega.Succeed())
		g.Expect(j.Spec.Suspend).To(gomega.HaveValue(gomega.BeFalse()))
		g.Expect(j.Annotations).To(gomega.HaveKeyWithValue(workload.AnnotationFencingToken, strconv.FormatInt(token, 10)))
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	at := granted()
	g.Expect(at.IsZero()).To(gomega.BeFalse())
	g.Expect(at).To(gomega.BeTemporally(">=", closes), "the spoke let the grant go while the window was open")
	t.Logf("window open %s to %s; the hub granted before it opened; the spoke let it go at %s", opens.Format(time.TimeOnly), closes.Format(time.TimeOnly), at.Format("15:04:05.000"))

	g.Expect(spk.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(gomega.Succeed())
}

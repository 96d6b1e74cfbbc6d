package spoke_test

import (
	"bytes"
	"context"
	"net/url"
	"path/filepath"
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
	plugincmd "github.com/turnstile-dev/turnstile/internal/plugin/cmd"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/util"
	"github.com/turnstile-dev/turnstile/internal/testing/netcut"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

// TestKeepRunningHolderSurvivesAPartition cuts the network between the spoke's agent and the
// hub (netcut's Cut: every connection reset, as by a firewall that rejects) while two gated
// Jobs of the spoke run on the hub's grants: "apply", as every workload, and "migrate",
// annotated fleet.turnstile.dev/on-partition: keep-running (docs/fleet.md "Opting out"). A
// LockRequest a spoke user made with the same annotation holds a third key. The workload
// controller carries the annotation to migrate's request, and the hub requests of the two that
// opted out name no hub Lease. During the cut apply is stopped before the hub may hand its lock
// on, as always, and migrate runs on with its token, no stop reported; past the hub Lease's
// lapse the hub has let apply's lock go and still holds migrate's and the user's. The user's
// request, deleted in the spoke during the cut, is deleted on the hub soon after the hub answers
// again (the agent's resync; over a cut this short the work queue's backoff and the hub cache's
// relist are quick too, so this does not prove the resync needed); migrate's is
// released by the hub's admin (kubectl turnstile release --cluster), and the spoke stops it.
func TestKeepRunningHolderSurvivesAPartition(t *testing.T) {
	const ns = "team-keep"
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
	// As TestPartitionStopsHoldersBeforeTheHubLetsGo: L = 20 s, the stop about 12 s after the
	// last answered renewal, the hub's release 20 s after it.
	settings := skew.Settings{Lease: 20 * time.Second, Grace: 3 * time.Second, MaxSkew: 2 * time.Second}
	m := spk.startWith(t, through, settings)
	defer func() { p.Pass(); _ = m.Stop() }()

	job := func(name, key string, keep bool) *batchv1.Job {
		j := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{workload.LabelGated: "true"},
				Annotations: map[string]string{workload.AnnotationLock: key, workload.AnnotationCreatedBy: "alice"}},
			Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
		}
		if keep {
			j.Annotations[locksv1.AnnotationOnPartition] = locksv1.OnPartitionKeepRunning
		}
		return j
	}
	apply, migrate := job("apply", "acme/infra:vpc", false), job("migrate", "acme/infra:db", true)
	g.Expect(spk.Client.Create(ctx, apply)).To(gomega.Succeed())
	g.Expect(spk.Client.Create(ctx, migrate)).To(gomega.Succeed())
	user := request(ns, "carol-hold", "carol")
	user.Spec.Locks[0].Path = "dns"
	user.Annotations = map[string]string{locksv1.AnnotationOnPartition: locksv1.OnPartitionKeepRunning}
	g.Expect(spk.Client.Create(ctx, user)).To(gomega.Succeed())

	applyReq, migrateReq := workload.RequestName("job", "apply"), workload.RequestName("job", "migrate")
	tokens := map[string]string{}
	running := func(g gomega.Gomega, j *batchv1.Job) {
		var cur batchv1.Job
		g.Expect(spk.Client.Get(ctx, client.ObjectKeyFromObject(j), &cur)).To(gomega.Succeed())
		g.Expect(cur.Spec.Suspend).To(gomega.HaveValue(gomega.BeFalse()))
		g.Expect(cur.Annotations).To(gomega.HaveKey(workload.AnnotationFencingToken))
		if tokens[j.Name] == "" {
			tokens[j.Name] = cur.Annotations[workload.AnnotationFencingToken]
		}
		g.Expect(cur.Annotations).To(gomega.HaveKeyWithValue(workload.AnnotationFencingToken, tokens[j.Name]))
	}
	g.Eventually(func(g gomega.Gomega) {
		running(g, apply)
		running(g, migrate)
		g.Expect(get(g, spk.Client, ns, "carol-hold").Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
	}).Should(gomega.Succeed())
	g.Expect(tokens["migrate"]).To(gomega.Equal(strconv.FormatInt(get(g, hub.Client, ns, spk.cluster+"."+migrateReq).Status.FencingToken, 10)))

	// The opt-out reaches the hub: no hub Lease for migrate's request and the user's, the spoke's for apply's.
	g.Expect(get(g, spk.Client, ns, migrateReq).Annotations).To(gomega.HaveKeyWithValue(locksv1.AnnotationOnPartition, locksv1.OnPartitionKeepRunning),
		"the workload controller did not carry the opt-out to the Job's request")
	for name, lease := range map[string]string{migrateReq: "", "carol-hold": "", applyReq: spoke.LeaseName(spk.cluster)} {
		h := get(g, hub.Client, ns, spk.cluster+"."+name)
		g.Expect(h.Spec.Holder.Lease).To(gomega.Equal(lease), "hub request of %s", name)
		if lease == "" {
			g.Expect(h.Annotations).To(gomega.HaveKeyWithValue(locksv1.AnnotationOnPartition, locksv1.OnPartitionKeepRunning))
			g.Expect(h.Status.ExpiresAt).To(gomega.BeNil(), "a keep-running grant has no end on the hub")
		} else {
			g.Expect(h.Status.ExpiresAt).NotTo(gomega.BeNil())
		}
	}

	p.Cut()
	// (a) apply is stopped, before the hub Lease lapses; migrate runs on.
	var lostAt time.Time
	g.Eventually(func(g gomega.Gomega) {
		lr := get(g, spk.Client, ns, applyReq)
		g.Expect(lr.Status.Phase).To(gomega.Equal(locksv1.PhaseReleased))
		lostAt = time.Now()
		g.Expect(meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted).Reason).To(gomega.Equal(spoke.ReasonHubUnreachable))
	}).WithTimeout(40 * time.Second).Should(gomega.Succeed())
	var lease coordinationv1.Lease
	g.Expect(hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: spoke.LeaseName(spk.cluster)}, &lease)).To(gomega.Succeed())
	lapse := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	g.Expect(lostAt).To(gomega.BeTemporally("<", lapse), "apply was stopped at %s, after the hub Lease lapsed at %s", lostAt, lapse)
	g.Eventually(func(g gomega.Gomega) {
		var j batchv1.Job
		g.Expect(spk.Client.Get(ctx, client.ObjectKeyFromObject(apply), &j)).To(gomega.Succeed())
		g.Expect(j.Spec.Suspend).To(gomega.HaveValue(gomega.BeTrue()))
	}).Should(gomega.Succeed())

	// The user deletes her request while the hub does not answer.
	g.Expect(spk.Client.Delete(ctx, user)).To(gomega.Succeed())

	// (b) Past the hub Lease's lapse: the hub has let apply's lock go (HolderLost), and keeps
	// migrate's and the user's; migrate runs on with its token, and nothing says it stopped.
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(get(g, hub.Client, ns, spk.cluster+"."+applyReq).Status.Phase.IsFinal()).To(gomega.BeTrue())
	}).WithTimeout(40 * time.Second).Should(gomega.Succeed())
	g.Expect(time.Now()).To(gomega.BeTemporally(">", lapse))
	g.Consistently(func(g gomega.Gomega) {
		for _, name := range []string{migrateReq, "carol-hold"} {
			h := get(g, hub.Client, ns, spk.cluster+"."+name)
			g.Expect(h.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted), "the hub let %s's lock go", name)
		}
		g.Expect(get(g, spk.Client, ns, migrateReq).Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
		running(g, migrate)
	}).WithTimeout(5 * time.Second).WithPolling(200 * time.Millisecond).Should(gomega.Succeed())
	var evs eventsv1.EventList
	g.Expect(spk.Client.List(ctx, &evs, client.InNamespace(ns))).To(gomega.Succeed())
	for _, e := range evs.Items {
		if e.Reason == spoke.ReasonStoppedOnPartition {
			g.Expect(e.Regarding.Name).NotTo(gomega.BeElementOf(migrateReq, "migrate"), "a stop reported for the holder that opted out: %s", e.Note)
		}
	}

	// (c) The network heals: the deleted request goes on the hub (the resync when the renewals
	// are answered again comes within a renewal retry of L/6 = 3.3 s).
	p.Pass()
	healed := time.Now()
	g.Eventually(func(g gomega.Gomega) {
		var h locksv1.LockRequest
		err := hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: spk.cluster + ".carol-hold"}, &h)
		g.Expect(client.IgnoreNotFound(err)).To(gomega.Succeed())
		g.Expect(err).To(gomega.HaveOccurred(), "the hub request of the request deleted in the spoke is still there (%s)", h.Status.Phase)
	}).WithTimeout(10 * time.Second).Should(gomega.Succeed())
	t.Logf("the hub request of a spoke request deleted during the cut was deleted %s after the network healed", time.Since(healed).Round(10*time.Millisecond))

	// (d) migrate's lock is held until released: in the spoke, or by an admin on the hub, which
	// the spoke, hearing the hub, obeys (the Job is suspended without its token).
	g.Expect(get(g, hub.Client, ns, spk.cluster+"."+migrateReq).Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
	g.Expect(release(t, ns, spk.cluster, migrateReq)).To(gomega.Equal("lockrequest/" + spk.cluster + "." + migrateReq + " released\n"))
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(get(g, hub.Client, ns, spk.cluster+"."+migrateReq).Status.Phase).To(gomega.Equal(locksv1.PhaseReleased))
		g.Expect(get(g, spk.Client, ns, migrateReq).Status.Phase).To(gomega.Equal(locksv1.PhaseReleased))
		var j batchv1.Job
		g.Expect(spk.Client.Get(ctx, client.ObjectKeyFromObject(migrate), &j)).To(gomega.Succeed())
		g.Expect(j.Spec.Suspend).To(gomega.HaveValue(gomega.BeTrue()))
		g.Expect(j.Annotations).NotTo(gomega.HaveKey(workload.AnnotationFencingToken))
	}).Should(gomega.Succeed())
}

// release runs kubectl turnstile release --cluster (the plugin's own command) against the hub,
// as its admin: the hub's request of cluster's spoke request name.
func release(t *testing.T, ns, cluster, name string) string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "hub.kubeconfig")
	if err := hub.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	root := plugincmd.NewCmdRoot(util.NewGlobals())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"release", "-n", ns, "--cluster", cluster, name, "--kubeconfig", kc})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("release: %v\n%s", err, out.String())
	}
	return out.String()
}

package hub_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/cache"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/fleet/hub"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
	"github.com/turnstile-dev/turnstile/internal/whoami"
	"github.com/turnstile-dev/turnstile/pkg/workdir"
)

// These tests run the hub's manager as cmd/manager runs it on a cluster that is not a spoke
// (the lock controllers and the Spoke reconciler, the members ConfigMap alone cached of
// ConfigMaps) against a real kube-apiserver and etcd. The spokes' hub Leases are written here as
// each spoke's agent writes them (internal/fleet/spoke), stamped with the creator the hub's
// admission policy would stamp (config/admission lease.yaml, tested in test/admission).

var (
	envOnce  sync.Once
	env      *framework.Env
	registry *prometheus.Registry
	envErr   error
	mgrRun   *framework.Manager
	ctx      = context.Background()
)

func TestMain(m *testing.M) {
	gomega.SetDefaultEventuallyTimeout(30 * time.Second)
	gomega.SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	code := m.Run()
	if mgrRun != nil {
		_ = mgrRun.Stop()
	}
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

// start starts the hub and its manager once: the lock controllers and the Spoke reconciler, as
// cmd/manager sets them up on a cluster that is not a spoke.
func start(t *testing.T) client.Client {
	t.Helper()
	envOnce.Do(func() {
		if env, envErr = framework.Start(""); envErr != nil {
			return
		}
		cfg := rest.CopyConfig(env.Config)
		cfg.QPS, cfg.Burst = 1000, 2000
		copts := cache.Options()
		copts.ByObject = map[client.Object]ctrlcache.ByObject{hub.CacheObject(): hub.CacheOptions()}
		var mgr ctrl.Manager
		mgr, envErr = ctrl.NewManager(cfg, ctrl.Options{
			Scheme: framework.Scheme, Cache: copts, NewCache: cache.New,
			Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
			// attack2_test.go runs a manager of its own in this process too.
			Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		})
		if envErr != nil {
			return
		}
		mctx, cancel := context.WithCancel(ctx)
		if envErr = controller.Setup(mctx, mgr, controller.SetupOptions{Queue: queue.DefaultConfig()}); envErr != nil {
			cancel()
			return
		}
		if envErr = hub.NewSpokeReconciler(mgr.GetClient(), hub.WithVersion("v9.9.9")).SetupWithManager(mctx, mgr); envErr != nil {
			cancel()
			return
		}
		registry = prometheus.NewRegistry()
		registry.MustRegister(hub.NewCollector(mgr.GetCache(), nil))
		mgrRun, envErr = framework.Run(mctx, cancel, mgr)
	})
	if envErr != nil {
		t.Fatal(envErr)
	}
	return env.Client
}

// member adds cluster to the members ConfigMap with labels (a JSON object), or removes it when
// labels is nil; the ConfigMap and its namespace are made on first use, as config/fleet does.
func member(t *testing.T, c client.Client, cluster string, labels *string) {
	t.Helper()
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hub.Namespace}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: hub.Namespace, Name: hub.MembersConfigMap}}
	if err := c.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	value := "null"
	if labels != nil {
		b, _ := json.Marshal(*labels)
		value = string(b)
	}
	patch := []byte(`{"data":{"` + cluster + `":` + value + `}}`)
	if err := c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
}

// renewal is one write of a spoke's hub Lease.
type renewal struct {
	ns, cluster, creator string
	at                   time.Time
	duration             time.Duration
	skew, version        string
}

// renew writes the hub Lease r describes as the spoke's agent does (created, then renewed).
func renew(t *testing.T, c client.Client, r renewal) {
	t.Helper()
	if r.creator == "" {
		r.creator = "system:serviceaccount:turnstile-fleet:" + spoke.LeaseName(r.cluster)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: spoke.LeaseName(r.cluster)}}
	_, err := controllerutil.CreateOrUpdate(ctx, c, lease, func() error {
		lease.Labels = map[string]string{workdir.LabelRole: spoke.RoleSpoke, spoke.LabelCluster: r.cluster}
		lease.Annotations = map[string]string{whoami.AnnotationCreatedBy: r.creator}
		if r.skew != "" {
			lease.Annotations[spoke.AnnotationClockSkew] = r.skew
		}
		if r.version != "" {
			lease.Annotations[spoke.AnnotationAgentVersion] = r.version
		}
		lease.Spec.HolderIdentity = ptr.To(spoke.LeaseName(r.cluster))
		lease.Spec.RenewTime = &metav1.MicroTime{Time: r.at}
		lease.Spec.LeaseDurationSeconds = ptr.To(int32(r.duration / time.Second))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// spokeOf reads cluster's Spoke from the API server.
func spokeOf(c client.Client, cluster string) func() (*locksv1.Spoke, error) {
	return func() (*locksv1.Spoke, error) {
		var sp locksv1.Spoke
		err := c.Get(ctx, client.ObjectKey{Name: cluster}, &sp)
		return &sp, err
	}
}

// connection is cluster's Spoke's status.connection ("" while it is missing).
func connection(c client.Client, cluster string) func() (locksv1.SpokeConnection, error) {
	return func() (locksv1.SpokeConnection, error) {
		sp, err := spokeOf(c, cluster)()
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return sp.Status.Connection, err
	}
}

// kstatusOf is cluster's Spoke as kstatus (sigs.k8s.io/cli-utils) reads it from the API server.
func kstatusOf(c client.Client, cluster string) func() (status.Status, error) {
	return func() (status.Status, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(locksv1.GroupVersion.WithKind("Spoke"))
		if err := c.Get(ctx, client.ObjectKey{Name: cluster}, u); err != nil {
			return "", err
		}
		res, err := status.Compute(u)
		if err != nil {
			return "", err
		}
		return res.Status, nil
	}
}

func labels(s string) *string { return &s }

func TestSpokesFollowTheMembersConfigMap(t *testing.T) {
	c := start(t)
	g := gomega.NewWithT(t)

	member(t, c, "fm-eu", labels(`{"labels":{"region":"eu"}}`))
	member(t, c, "fm-us", labels(`{}`))
	g.Eventually(spokeOf(c, "fm-eu")).Should(gomega.HaveField("Spec.Labels", map[string]string{"region": "eu"}))
	g.Eventually(connection(c, "fm-us")).Should(gomega.Equal(locksv1.SpokeNever))

	sp, err := spokeOf(c, "fm-us")()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(sp.Spec.Labels).To(gomega.BeEmpty())
	ready := meta.FindStatusCondition(sp.Status.Conditions, locksv1.ConditionReady)
	g.Expect(ready).NotTo(gomega.BeNil())
	g.Expect(ready.Status).To(gomega.Equal(metav1.ConditionFalse))
	g.Expect(ready.Reason).To(gomega.Equal(locksv1.ReasonSpokeNeverConnected))
	g.Expect(ready.Message).To(gomega.ContainSubstring("--cluster-name=fm-us"))
	g.Expect(sp.Status.ObservedGeneration).To(gomega.Equal(sp.Generation))
	g.Eventually(kstatusOf(c, "fm-us")).Should(gomega.Equal(status.InProgressStatus), "a member that has not connected yet")

	t.Run("a member's labels follow its entry", func(t *testing.T) {
		member(t, c, "fm-eu", labels(`{"labels":{"region":"eu","tier":"prod"}}`))
		g.Eventually(spokeOf(c, "fm-eu")).Should(gomega.HaveField("Spec.Labels", map[string]string{"region": "eu", "tier": "prod"}))
	})
	t.Run("an entry that is not a JSON object of strings is Stalled, saying how to fix it", func(t *testing.T) {
		member(t, c, "fm-bad", labels(`region=eu`))
		g.Eventually(func() (*metav1.Condition, error) {
			sp, err := spokeOf(c, "fm-bad")()
			if err != nil {
				return nil, client.IgnoreNotFound(err)
			}
			return meta.FindStatusCondition(sp.Status.Conditions, locksv1.ConditionStalled), nil
		}).Should(gomega.And(gomega.HaveField("Status", metav1.ConditionTrue), gomega.HaveField("Reason", hub.ReasonInvalidMember),
			gomega.HaveField("Message", gomega.ContainSubstring("kubectl -n turnstile-fleet patch configmap turnstile-fleet-members"))))
		g.Eventually(kstatusOf(c, "fm-bad")).Should(gomega.Equal(status.FailedStatus))
	})
	t.Run("a cluster removed from the members loses its Spoke", func(t *testing.T) {
		member(t, c, "fm-us", nil)
		member(t, c, "fm-bad", nil)
		for _, name := range []string{"fm-us", "fm-bad"} {
			g.Eventually(func() bool { _, err := spokeOf(c, name)(); return apierrors.IsNotFound(err) }).Should(gomega.BeTrue(), name)
		}
		_, err := spokeOf(c, "fm-eu")()
		g.Expect(err).NotTo(gomega.HaveOccurred(), "the other members keep theirs")
	})
	t.Run("a Spoke made by hand for a cluster that is not a member goes", func(t *testing.T) {
		g.Expect(c.Create(ctx, &locksv1.Spoke{ObjectMeta: metav1.ObjectMeta{Name: "fm-stranger"}})).To(gomega.Succeed())
		g.Eventually(func() bool { _, err := spokeOf(c, "fm-stranger")(); return apierrors.IsNotFound(err) }).Should(gomega.BeTrue())
	})
	t.Run("a Spoke deleted by hand comes back while its cluster is a member", func(t *testing.T) {
		old, err := spokeOf(c, "fm-eu")()
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(c.Delete(ctx, old)).To(gomega.Succeed())
		g.Eventually(func() (bool, error) {
			sp, err := spokeOf(c, "fm-eu")()
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil && sp.UID != old.UID && sp.Status.Connection == locksv1.SpokeNever, err
		}).Should(gomega.BeTrue())
	})
	member(t, c, "fm-eu", nil)
}

func TestSpokeConnectionFollowsItsHubLeases(t *testing.T) {
	c := start(t)
	g := gomega.NewWithT(t)
	const cl = "cn-eu"
	member(t, c, cl, labels(`{}`))
	g.Eventually(connection(c, cl)).Should(gomega.Equal(locksv1.SpokeNever))

	t.Run("a Lease of that name that the spoke did not create does not connect it", func(t *testing.T) {
		renew(t, c, renewal{ns: hub.Namespace, cluster: cl, creator: "mallory", at: time.Now(), duration: time.Hour, skew: "0.001"})
		// The Spoke is reconciled on the Lease's event; its status stays Never.
		g.Consistently(connection(c, cl), 2*time.Second).Should(gomega.Equal(locksv1.SpokeNever))
		g.Expect(c.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: hub.Namespace, Name: spoke.LeaseName(cl)}})).To(gomega.Succeed())
	})

	renewed := time.Now()
	renew(t, c, renewal{ns: hub.Namespace, cluster: cl, at: renewed, duration: 3 * time.Second, skew: "0.042", version: "v0.4.1"})
	g.Eventually(connection(c, cl)).Should(gomega.Equal(locksv1.SpokeConnected))
	sp, err := spokeOf(c, cl)()
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(sp.Status.ClockSkewMilliseconds).To(gomega.Equal(ptr.To[int64](42)))
	g.Expect(sp.Status.AgentVersion).To(gomega.Equal("v0.4.1"))
	g.Expect(meta.FindStatusCondition(sp.Status.Conditions, locksv1.ConditionReady).Message).To(gomega.HaveSuffix("; its agent runs v0.4.1, the hub v9.9.9: run one version across the fleet"))
	g.Expect(sp.Status.LastHeartbeat.Time).To(gomega.BeTemporally("==", renewed.Truncate(time.Second)), "in whole seconds, as metav1.Time is written")
	g.Expect(sp.Status.Leases).To(gomega.Equal(int32(1)))
	g.Expect(meta.IsStatusConditionTrue(sp.Status.Conditions, locksv1.ConditionReady)).To(gomega.BeTrue())
	g.Expect(kstatusOf(c, cl)()).To(gomega.Equal(status.CurrentStatus))
	expectMetrics(t, cl, `
# HELP turnstile_fleet_spoke_agent_info 1, labelled with the version the spoke's agent publishes (Spoke status.agentVersion); absent before its first. count by (version) shows the fleet's agent versions.
# TYPE turnstile_fleet_spoke_agent_info gauge
turnstile_fleet_spoke_agent_info{cluster="cn-eu",version="v0.4.1"} 1
# HELP turnstile_fleet_spoke_clock_skew_seconds The clock skew bound the spoke's agent measured against the hub (Spoke status.clockSkewMilliseconds); absent before its first measure.
# TYPE turnstile_fleet_spoke_clock_skew_seconds gauge
turnstile_fleet_spoke_clock_skew_seconds{cluster="cn-eu"} 0.042
# HELP turnstile_fleet_spoke_connected 1 while a hub Lease of the spoke is live (Spoke status.connection Connected), 0 when Unreachable or Never connected.
# TYPE turnstile_fleet_spoke_connected gauge
turnstile_fleet_spoke_connected{cluster="cn-eu"} 1
`, "turnstile_fleet_spoke_connected", "turnstile_fleet_spoke_clock_skew_seconds", "turnstile_fleet_spoke_agent_info")

	t.Run("every Lease lapsed: Unreachable, Stalled, and kstatus Failed, by the hub's clock alone", func(t *testing.T) {
		// No event: the reconciler looks again when the Lease lapses.
		g.Eventually(connection(c, cl), 10*time.Second).Should(gomega.Equal(locksv1.SpokeUnreachable))
		sp, err := spokeOf(c, cl)()
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(sp.Status.ConnectionSince.Time).To(gomega.BeTemporally("==", renewed.Add(3*time.Second).Truncate(time.Second)), "since the Lease lapsed")
		stalled := meta.FindStatusCondition(sp.Status.Conditions, locksv1.ConditionStalled)
		g.Expect(stalled.Status).To(gomega.Equal(metav1.ConditionTrue))
		g.Expect(stalled.Reason).To(gomega.Equal(locksv1.ReasonSpokeUnreachable))
		g.Expect(kstatusOf(c, cl)()).To(gomega.Equal(status.FailedStatus))
		var age float64
		g.Eventually(func() float64 { age = gauge(t, "turnstile_fleet_spoke_heartbeat_age_seconds", cl); return age }).Should(gomega.BeNumerically(">=", 3))
		g.Expect(gauge(t, "turnstile_fleet_spoke_connected", cl)).To(gomega.Equal(0.0))
	})
	t.Run("a renewal in any namespace connects it again", func(t *testing.T) {
		ns := newNamespace(t, c)
		renew(t, c, renewal{ns: ns, cluster: cl, at: time.Now(), duration: time.Minute})
		g.Eventually(connection(c, cl)).Should(gomega.Equal(locksv1.SpokeConnected))
		sp, err := spokeOf(c, cl)()
		g.Expect(err).NotTo(gomega.HaveOccurred())
		g.Expect(sp.Status.Leases).To(gomega.Equal(int32(2)))
		g.Expect(sp.Status.ClockSkewMilliseconds).To(gomega.Equal(ptr.To[int64](42)), "the last skew published stays")
	})
	member(t, c, cl, nil)
}

func TestSpokeCountsItsHoldersAndWaiters(t *testing.T) {
	c := start(t)
	g := gomega.NewWithT(t)
	const cl = "hw-eu"
	member(t, c, cl, labels(`{}`))
	ns := newNamespace(t, c)
	on := func(name string) *LockRequestWrapper {
		return MakeLockRequest(name, ns).Lock("acme/infra", "vpc", "default").Owner("alice", 1).Session(name)
	}
	// a and b are as a spoke makes the requests of holders that opted out of the partition stop:
	// no holder Lease, the annotation (a spoke's other requests name its hub Lease, which this
	// test has no spoke to renew: KeepsRunning's table has them).
	keep := func(w *LockRequestWrapper) *locksv1.LockRequest {
		lr := w.Obj()
		lr.Annotations = map[string]string{locksv1.AnnotationOnPartition: locksv1.OnPartitionKeepRunning}
		return lr
	}
	for _, lr := range []*locksv1.LockRequest{
		keep(on("a").Cluster(cl)),
		keep(on("b").Cluster(cl)),
		on("c").Cluster("hw-other").Obj(),
		on("d").Obj(),
	} {
		g.Expect(c.Create(ctx, lr)).To(gomega.Succeed())
	}
	counts := func() ([3]int32, error) {
		sp, err := spokeOf(c, cl)()
		return [3]int32{sp.Status.Holders, sp.Status.Waiters, sp.Status.KeepRunning}, client.IgnoreNotFound(err)
	}
	g.Eventually(counts).Should(gomega.Equal([3]int32{1, 1, 1}), "a holds the key (keep-running), b waits; c and d are not this cluster's")
	g.Expect(gauge(t, "turnstile_fleet_spoke_holders", cl)).To(gomega.Equal(1.0))
	g.Expect(gauge(t, "turnstile_fleet_spoke_waiters", cl)).To(gomega.Equal(1.0))
	g.Expect(gauge(t, "turnstile_fleet_spoke_keep_running", cl)).To(gomega.Equal(1.0))

	release := func(name string) {
		lr := &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		g.Expect(c.Patch(ctx, lr, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"release":true}}`)))).To(gomega.Succeed())
	}
	release("a")
	g.Eventually(counts).Should(gomega.Equal([3]int32{1, 0, 1}), "b holds now")
	release("b")
	g.Eventually(counts).Should(gomega.Equal([3]int32{0, 0, 0}))
	g.Expect(gauge(t, "turnstile_fleet_spoke_keep_running", cl)).To(gomega.Equal(0.0))
	member(t, c, cl, nil)
}

// TestKeepsRunning: a spoke's grant the hub keeps while the spoke is cut off is one with no
// holder Lease to lapse; one that names the spoke's Lease, waits, is being released, or is not
// a spoke's is not.
func TestKeepsRunning(t *testing.T) {
	// lr is a request of cluster on lease; opted out of the partition stop unless delegated (a
	// hub user's request for a holder in the cluster).
	lr := func(cluster, lease string, phase locksv1.LockRequestPhase, release bool) *locksv1.LockRequest {
		return &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{locksv1.AnnotationOnPartition: locksv1.OnPartitionKeepRunning}},
			Spec: locksv1.LockRequestSpec{Release: release, Holder: locksv1.Holder{Cluster: cluster, Lease: lease}}, Status: locksv1.LockRequestStatus{Phase: phase}}
	}
	delegated := lr("eu", "", locksv1.PhaseGranted, false)
	delegated.Annotations = nil
	for _, tc := range []struct {
		name string
		lr   *locksv1.LockRequest
		want bool
	}{
		{"a spoke's grant with no Lease, opted out", lr("eu", "", locksv1.PhaseGranted, false), true},
		{"a spoke's grant on its hub Lease", lr("eu", "spoke-eu", locksv1.PhaseGranted, false), false},
		{"a spoke's waiter with no Lease", lr("eu", "", locksv1.PhasePending, false), false},
		{"a spoke's grant being released", lr("eu", "", locksv1.PhaseGranted, true), false},
		{"a hub request's grant with no Lease", lr("", "", locksv1.PhaseGranted, false), false},
		{"a delegate's grant for a holder in the cluster, not opted out", delegated, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := hub.KeepsRunning(tc.lr); got != tc.want {
				t.Errorf("KeepsRunning = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNoFleetNoSpokes(t *testing.T) {
	c := start(t)
	g := gomega.NewWithT(t)
	// A Lease labelled like a spoke's of a cluster that is not a member makes no Spoke.
	renew(t, c, renewal{ns: newNamespace(t, c), cluster: "nf-stranger", at: time.Now(), duration: time.Minute})
	g.Consistently(func() bool { _, err := spokeOf(c, "nf-stranger")(); return apierrors.IsNotFound(err) }, 2*time.Second).Should(gomega.BeTrue())
}

// newNamespace makes a fresh namespace.
func newNamespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fleet-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// expectMetrics compares the named metrics of cluster with want (the exposition format).
func expectMetrics(t *testing.T, cluster, want string, names ...string) {
	t.Helper()
	g := gomega.NewWithT(t)
	g.Eventually(func() error {
		return testutil.GatherAndCompare(onlyCluster{registry, cluster}, strings.NewReader(want), names...)
	}).Should(gomega.Succeed())
}

// gauge is the value of metric name for cluster (-1 when absent).
func gauge(t *testing.T, name, cluster string) float64 {
	t.Helper()
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == cluster {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// onlyCluster gathers the series of one cluster (the tests' Spokes share one hub).
type onlyCluster struct {
	g       prometheus.Gatherer
	cluster string
}

func (o onlyCluster) Gather() ([]*dto.MetricFamily, error) {
	families, err := o.g.Gather()
	for _, f := range families {
		var keep []*dto.Metric
		for _, m := range f.Metric {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == o.cluster {
					keep = append(keep, m)
				}
			}
		}
		f.Metric = keep
	}
	return families, err
}

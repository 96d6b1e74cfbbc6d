package spoke_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/cache"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/version"
	"github.com/turnstile-dev/turnstile/internal/whoami"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

// These tests run a hub and spokes, each a real kube-apiserver and etcd: the hub with the lock
// controllers as the manager runs them, a spoke with what a spoke's manager runs
// (controller.SetupSpoke, the agent, the gated workload controller), in this process. The
// agent talks to the hub as an admin here; test/fleet runs the built binaries as the spoke's
// identity with the RBAC docs/fleet.md lists.
//
// The tests run side by side (t.Parallel) on one hub. Each takes a spoke for its length
// (fleet): two agents on one spoke would both mirror its requests, so a spoke serves one test
// at a time, and a test's agents take a cluster name of its own on the hub (its namespace's),
// so that their hub requests, Leases and heartbeats are apart from the other tests'.

var (
	hubOnce sync.Once
	hub     *framework.Env
	hubMgr  *framework.Manager
	hubErr  error
	spokes  spokePool
)

func TestMain(m *testing.M) {
	gomega.SetDefaultEventuallyTimeout(30 * time.Second)
	gomega.SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	code := m.Run()
	stopHub(hub, hubMgr)
	spokes.stop()
	os.Exit(code)
}

// testSpoke is a test's spoke: a spoke control plane, the test's alone until it ends, and the
// cluster name its agents take in the fleet.
type testSpoke struct {
	*framework.Env
	cluster string
}

// fleet gives the test a spoke, its cluster named ns, and makes namespace ns on the shared hub
// (started once, with its manager) and in the spoke.
func fleet(t *testing.T, ns string) *testSpoke {
	t.Helper()
	hubOnce.Do(func() { hub, hubMgr, hubErr = startHub() })
	if hubErr != nil {
		t.Fatal(hubErr)
	}
	return spokeOf(t, hub, ns)
}

// spokeOf gives the test a spoke of the pool until it ends, its cluster named ns, and makes
// namespace ns on hub h and in the spoke.
func spokeOf(t *testing.T, h *framework.Env, ns string) *testSpoke {
	t.Helper()
	e, err := spokes.take()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { spokes.give(e) })
	for _, c := range []client.Client{h.Client, e.Client} {
		if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	return &testSpoke{Env: e, cluster: ns}
}

// startHub starts a hub: its control plane, its fleet namespace (config/fleet's, where an agent
// renews its heartbeat Lease) and its manager. What it started is returned with an error too.
func startHub() (*framework.Env, *framework.Manager, error) {
	h, err := framework.Start("")
	if err != nil {
		return nil, nil, err
	}
	if err := h.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: spoke.FleetNamespace}}); err != nil {
		return h, nil, err
	}
	m, err := h.StartManager(controller.SetupOptions{Queue: queue.DefaultConfig()})
	return h, m, err
}

// ownHub starts a hub for the test alone, stopped when it ends.
func ownHub(t *testing.T) *framework.Env {
	t.Helper()
	h, m, err := startHub()
	t.Cleanup(func() { stopHub(h, m) })
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func stopHub(h *framework.Env, m *framework.Manager) {
	if m != nil {
		_ = m.Stop()
	}
	if h != nil {
		_ = h.Stop()
	}
}

// spokePool is the spoke control planes: a test takes one for its length and gives it back.
// There are as many as tests have run at once (go test's -parallel); a spoke keeps what earlier
// tests left in their namespaces.
type spokePool struct {
	mu        sync.Mutex
	free, all []*framework.Env
}

func (p *spokePool) take() (*framework.Env, error) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		e := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return e, nil
	}
	p.mu.Unlock()
	e, err := framework.Start("")
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.all = append(p.all, e)
	p.mu.Unlock()
	return e, nil
}

func (p *spokePool) give(e *framework.Env) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, e)
}

func (p *spokePool) stop() {
	for _, e := range p.all {
		_ = e.Stop()
	}
}

// start runs the spoke's manager as cmd/manager runs it with --hub-kubeconfig.
func (s *testSpoke) start(t *testing.T) *framework.Manager {
	t.Helper()
	return s.startWith(t, rest.CopyConfig(hub.Config), skew.Settings{})
}

// startWith runs the spoke's manager talking to the hub through hubCfg, with the partition
// rule's settings (the flags' defaults when zero).
func (s *testSpoke) startWith(t *testing.T, hubCfg *rest.Config, settings skew.Settings) *framework.Manager {
	t.Helper()
	return s.startAgent(t, spoke.Options{Cluster: s.cluster, Hub: hubCfg, Settings: settings}, nil)
}

// startAgent runs the spoke's manager with the agent's options o, and hook (when set) called on
// the agent before the manager starts.
func (s *testSpoke) startAgent(t *testing.T, o spoke.Options, hook func(*spoke.Agent)) *framework.Manager {
	t.Helper()
	cfg := rest.CopyConfig(s.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: framework.Scheme, Cache: cache.Options(), NewCache: cache.New,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := controller.SetupSpoke(mgr, controller.SetupOptions{Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// One cache of the gated workloads, the workload controllers' and the agent's, as
	// cmd/manager shares it.
	gated, err := workload.NewGatedCache(mgr)
	if err != nil {
		t.Fatal(err)
	}
	o.Workloads = gated
	agent, err := spoke.SetupWithManager(mgr, o)
	if err != nil {
		t.Fatal(err)
	}
	if hook != nil {
		hook(agent)
	}
	opts := []workload.Option{workload.WithGatedCache(gated), workload.WithIdentity("system:serviceaccount:turnstile-system:turnstile-controller-manager")}
	if o.Settings.Grace > 0 {
		opts = append(opts, workload.WithStopGrace(o.Settings.Grace)) // as cmd/manager: --fleet-grace
	}
	if err := workload.SetupWithManager(mgr, opts...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m, err := framework.Run(ctx, cancel, mgr)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func request(ns, name, owner string) *locksv1.LockRequest {
	return &locksv1.LockRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: locksv1.LockRequestSpec{
			Locks:  []locksv1.LockTarget{{Repo: "acme/infra", Path: "vpc", Workspace: "default"}},
			Holder: locksv1.Holder{Owner: owner},
		},
	}
}

// neverGranted watches the spoke request ns/name and reports whether any version of it showed
// Granted, until stop.
func (s *testSpoke) neverGranted(t *testing.T, ns, name string) func() bool {
	t.Helper()
	w, err := s.Client.Watch(context.Background(), &locksv1.LockRequestList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan bool, 1)
	go func() {
		seen := false
		for ev := range w.ResultChan() {
			if lr, ok := ev.Object.(*locksv1.LockRequest); ok && ev.Type != watch.Deleted && lr.Name == name && lr.Status.Phase == locksv1.PhaseGranted {
				seen = true
			}
		}
		granted <- seen
	}()
	return func() bool {
		w.Stop()
		return !<-granted
	}
}

func get(g gomega.Gomega, c client.Client, ns, name string) *locksv1.LockRequest {
	lr := &locksv1.LockRequest{}
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, lr)).To(gomega.Succeed())
	return lr
}

// A spoke request waits on the hub behind the hub's holder, shows the hub's decision, is granted
// by the hub (never by the spoke) with the hub's token, and its release reaches the hub.
func TestSpokeRequestFollowsTheHub(t *testing.T) {
	const ns = "team-follow"
	t.Parallel()
	spk := fleet(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	m := spk.start(t)
	defer func() { _ = m.Stop() }()

	holder := request(ns, "alice-apply", "alice")
	g.Expect(hub.Client.Create(ctx, holder)).To(gomega.Succeed())
	granted(t, hub.Client, ns, "alice-apply")

	stop := spk.neverGranted(t, ns, "bob-apply")
	g.Expect(spk.Client.Create(ctx, request(ns, "bob-apply", "bob"))).To(gomega.Succeed())
	hubName := spk.cluster + ".bob-apply"
	g.Eventually(func(g gomega.Gomega) {
		lr := get(g, spk.Client, ns, "bob-apply")
		g.Expect(lr.Status.Phase).To(gomega.Equal(locksv1.PhasePending))
		g.Expect(lr.Status.QueuePosition).To(gomega.Equal(int32(1)))
		g.Expect(lr.Status.BlockedBy).To(gomega.ContainSubstring("alice"))
	}).Should(gomega.Succeed())
	mirror := get(g, hub.Client, ns, hubName)
	g.Expect(mirror.Spec.Holder).To(gomega.Equal(locksv1.Holder{Owner: "bob", Cluster: spk.cluster, Lease: "spoke-" + spk.cluster}))
	g.Expect(mirror.Labels).To(gomega.HaveKeyWithValue(spoke.LabelCluster, spk.cluster))
	var lease coordinationv1.Lease
	g.Expect(hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "spoke-" + spk.cluster}, &lease)).To(gomega.Succeed())
	g.Expect(lease.Labels).To(gomega.HaveKeyWithValue("locks.turnstile.dev/role", "spoke"))
	// Both record their creator, the spoke's hub identity, themselves: a hub without
	// MutatingAdmissionPolicy (1.33 to 1.35) refuses a delegate's request or a holder Lease
	// that does not (config/admission/filled.yaml).
	self, err := whoami.Ask(ctx, hub.Client)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(mirror.Annotations).To(gomega.HaveKeyWithValue(whoami.AnnotationCreatedBy, self))
	g.Expect(lease.Annotations).To(gomega.HaveKeyWithValue(whoami.AnnotationCreatedBy, self))
	// The spoke decided nothing: no ProjectLock of its own (only the hub's mirrors), the request
	// Pending as the hub says.
	var locks locksv1.ProjectLockList
	g.Expect(spk.Client.List(ctx, &locks, client.InNamespace(ns))).To(gomega.Succeed())
	onlyMirrors(g, locks.Items, "bob-apply")

	// The hub hands the key on: the spoke shows the hub's grant and token.
	g.Expect(hub.Client.Patch(ctx, holder, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"release":true}}`)))).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		h := get(g, hub.Client, ns, hubName)
		g.Expect(h.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
		lr := get(g, spk.Client, ns, "bob-apply")
		g.Expect(lr.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
		g.Expect(lr.Status.FencingToken).To(gomega.Equal(h.Status.FencingToken))
		g.Expect(lr.Status.ObservedGeneration).To(gomega.Equal(lr.Generation))
		c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
		g.Expect(c).NotTo(gomega.BeNil())
		g.Expect(c.Status).To(gomega.Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(gomega.Equal(meta.FindStatusCondition(h.Status.Conditions, locksv1.ConditionGranted).Reason))
	}).Should(gomega.Succeed())
	g.Expect(stop()).To(gomega.BeFalse(), "the spoke request was Granted (the hub granted it)")

	// Released in the spoke, released on the hub.
	g.Expect(spk.Client.Patch(ctx, request(ns, "bob-apply", "bob"), client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"release":true}}`)))).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(get(g, hub.Client, ns, hubName).Status.Phase).To(gomega.Equal(locksv1.PhaseReleased))
		g.Expect(get(g, spk.Client, ns, "bob-apply").Status.Phase).To(gomega.Equal(locksv1.PhaseReleased))
	}).Should(gomega.Succeed())

	// Deleted in the spoke, deleted on the hub.
	g.Expect(spk.Client.Delete(ctx, request(ns, "bob-apply", "bob"))).To(gomega.Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: hubName}, &locksv1.LockRequest{}))
	}).Should(gomega.BeTrue())
}

// onlyMirrors expects the spoke's ProjectLocks to be the hub's mirrors, none listing the spoke
// request spokeName as a holder (the hub's holder is its hub request, <cluster>.<name>).
func onlyMirrors(g gomega.Gomega, locks []locksv1.ProjectLock, spokeName string) {
	for i := range locks {
		g.Expect(spoke.IsMirror(&locks[i])).To(gomega.BeTrue(), "projectlock %s is the spoke's own, not the hub's mirror", locks[i].Name)
		for _, h := range locks[i].Status.HolderRequests() {
			g.Expect(h.Name).NotTo(gomega.Equal(spokeName), "the spoke's request holds a key in the spoke")
		}
	}
}

// TestSpokeRequestIsNeverDecidedInTheSpoke: while the hub's holder keeps the key, the spoke
// request is never Granted, and the spoke makes no ProjectLock of its own (only the hub's
// mirrors), whatever time passes: a lock
// controller of the spoke would grant it at once (the key is free in the spoke).
func TestSpokeRequestIsNeverDecidedInTheSpoke(t *testing.T) {
	const ns = "team-authority"
	t.Parallel()
	spk := fleet(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	m := spk.start(t)
	defer func() { _ = m.Stop() }()
	g.Expect(hub.Client.Create(ctx, request(ns, "alice-apply", "alice"))).To(gomega.Succeed())
	granted(t, hub.Client, ns, "alice-apply")
	stop := spk.neverGranted(t, ns, "bob-apply")
	g.Expect(spk.Client.Create(ctx, request(ns, "bob-apply", "bob"))).To(gomega.Succeed())
	// Twice the hub's verdict, and every renewal of the spoke's Lease in between: nothing.
	for range 2 {
		g.Eventually(func(g gomega.Gomega) {
			g.Expect(get(g, spk.Client, ns, "bob-apply").Status.Phase).To(gomega.Equal(locksv1.PhasePending))
		}).Should(gomega.Succeed())
		var locks locksv1.ProjectLockList
		g.Consistently(func(g gomega.Gomega) {
			g.Expect(spk.Client.List(ctx, &locks, client.InNamespace(ns))).To(gomega.Succeed())
			onlyMirrors(g, locks.Items, "bob-apply")
		}).WithTimeout(2 * time.Second).Should(gomega.Succeed())
	}
	g.Expect(stop()).To(gomega.BeTrue(), "the spoke request was Granted while the hub's holder held the key")
}

// A gated Job in the spoke is let go on the hub's grant, as the agent writes it into its
// request, with the hub's fencing token.
func TestGatedJobRunsOnTheHubsGrant(t *testing.T) {
	const ns = "team-job"
	t.Parallel()
	spk := fleet(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	m := spk.start(t)
	defer func() { _ = m.Stop() }()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "apply", Labels: map[string]string{workload.LabelGated: "true"},
			Annotations: map[string]string{workload.AnnotationLock: "acme/infra:vpc", workload.AnnotationCreatedBy: "alice"}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
	}
	g.Expect(spk.Client.Create(ctx, job)).To(gomega.Succeed())
	hubName := spk.cluster + "." + workload.RequestName("job", "apply")
	g.Eventually(func(g gomega.Gomega) {
		h := get(g, hub.Client, ns, hubName)
		g.Expect(h.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
		g.Expect(h.Spec.Holder.Session).To(gomega.Equal("job/apply"))
		g.Expect(h.Spec.Holder.Cluster).To(gomega.Equal(spk.cluster))
		var j batchv1.Job
		g.Expect(spk.Client.Get(ctx, client.ObjectKeyFromObject(job), &j)).To(gomega.Succeed())
		g.Expect(j.Spec.Suspend).To(gomega.HaveValue(gomega.BeFalse()))
		g.Expect(j.Annotations).To(gomega.HaveKeyWithValue(workload.AnnotationFencingToken, strconv.FormatInt(h.Status.FencingToken, 10)))
	}).Should(gomega.Succeed())
}

// An agent restarted loses and doubles nothing: a spoke request deleted while it was away loses
// its hub request; one re-created under its name gets a new one (the old one's spoke UID is
// gone); one made while it was away is mirrored once; the one left alone keeps its hub request.
func TestAgentRestartedLosesAndDoublesNothing(t *testing.T) {
	const ns = "team-restart"
	t.Parallel()
	spk := fleet(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	m := spk.start(t)
	for _, n := range []string{"kept", "deleted", "recreated"} {
		g.Expect(spk.Client.Create(ctx, request(ns, n, "bob-"+n))).To(gomega.Succeed())
	}
	uids := map[string]string{}
	g.Eventually(func(g gomega.Gomega) {
		for _, n := range []string{"kept", "deleted", "recreated"} {
			h := get(g, hub.Client, ns, spk.cluster+"."+n)
			uids[n] = string(h.UID)
		}
	}).Should(gomega.Succeed())
	g.Expect(m.Stop()).To(gomega.Succeed())

	g.Expect(spk.Client.Delete(ctx, request(ns, "deleted", ""))).To(gomega.Succeed())
	g.Expect(spk.Client.Delete(ctx, request(ns, "recreated", ""))).To(gomega.Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(spk.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "recreated"}, &locksv1.LockRequest{}))
	}).Should(gomega.BeTrue())
	g.Expect(spk.Client.Create(ctx, request(ns, "recreated", "bob-recreated"))).To(gomega.Succeed())
	g.Expect(spk.Client.Create(ctx, request(ns, "new", "bob-new"))).To(gomega.Succeed())

	m = spk.start(t)
	defer func() { _ = m.Stop() }()
	g.Eventually(func(g gomega.Gomega) {
		var list locksv1.LockRequestList
		g.Expect(hub.Client.List(ctx, &list, client.InNamespace(ns))).To(gomega.Succeed())
		byName := map[string]locksv1.LockRequest{}
		for _, lr := range list.Items {
			byName[lr.Name] = lr
		}
		g.Expect(byName).To(gomega.HaveLen(3))
		g.Expect(string(byName[spk.cluster+".kept"].UID)).To(gomega.Equal(uids["kept"]))
		g.Expect(byName).NotTo(gomega.HaveKey(spk.cluster + ".deleted"))
		var recreated locksv1.LockRequest
		g.Expect(spk.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "recreated"}, &recreated)).To(gomega.Succeed())
		g.Expect(byName[spk.cluster+".recreated"].Annotations).To(gomega.HaveKeyWithValue(spoke.AnnotationSpokeUID, string(recreated.UID)))
		g.Expect(byName).To(gomega.HaveKey(spk.cluster + ".new"))
	}).Should(gomega.Succeed())
}

// An idle spoke (no request anywhere) renews its heartbeat Lease in the hub's fleet namespace,
// and publishes on it the clock skew bound its renewals measured, for the hub's fleet view
// (internal/fleet/hub reads both).
func TestAgentPublishesItsHeartbeatAndSkew(t *testing.T) {
	t.Parallel()
	spk := fleet(t, "team-heartbeat")
	g := gomega.NewWithT(t)
	// Renewals every 4 s: the first writes the Lease and measures, the second publishes.
	m := spk.startWith(t, rest.CopyConfig(hub.Config), skew.Settings{Lease: 12 * time.Second, Grace: time.Second, MaxSkew: 2 * time.Second})
	defer func() { g.Expect(m.Stop()).To(gomega.Succeed()) }()
	var lease coordinationv1.Lease
	g.Eventually(func() (string, error) {
		err := hub.Client.Get(context.Background(), client.ObjectKey{Namespace: spoke.FleetNamespace, Name: spoke.LeaseName(spk.cluster)}, &lease)
		return lease.Annotations[spoke.AnnotationClockSkew], err
	}).Should(gomega.MatchRegexp(`^[0-9]{1,4}\.[0-9]{3}$`), "the skew, in seconds to the millisecond (the hub's admission policy admits no other form)")
	g.Expect(lease.Labels).To(gomega.HaveKeyWithValue(spoke.LabelCluster, spk.cluster))
	g.Expect(lease.Spec.LeaseDurationSeconds).To(gomega.Equal(ptr.To(int32(12))))
	g.Expect(lease.Annotations).To(gomega.HaveKeyWithValue(spoke.AnnotationAgentVersion, version.Get().Version), "the agent's version, for the hub's fleet view")
	g.Expect(spoke.IsVersion(version.Get().Version)).To(gomega.BeTrue())
	skewed, err := strconv.ParseFloat(lease.Annotations[spoke.AnnotationClockSkew], 64)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	// One process, one clock: the bound is the Date header's second and the round trip.
	g.Expect(skewed).To(gomega.BeNumerically("<=", 2), "clocks in step measure at most 1 s + the round trip")
}

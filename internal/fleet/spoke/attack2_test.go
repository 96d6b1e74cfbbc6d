package spoke_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	"github.com/turnstile-dev/turnstile/internal/testing/netcut"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

// The second review of issue 45 (after keep-running, windows' clusters, the spoke's freeze gate,
// the mirrors, join/leave and the fleet view landed): attacks through the shipped roles on a
// hub and a spoke installed as the docs say (the admission bundle in both, config/fleet on the
// hub, the agent as its ServiceAccount there). This file keeps its own fleet and helpers (the
// names end in 2) so that it does not depend on attack_test.go's.
//
// Run them alone with: go test -race -run 'TestAttack2' ./internal/fleet/spoke/

// cluster2 is the spoke's name in the fleet.
const cluster2 = "eu-west-1"

// attack2Settings are the partition settings of these attacks: L 20s, grace 3s, max skew 2s.
var attack2Settings = skew.Settings{Lease: 20 * time.Second, Grace: 3 * time.Second, MaxSkew: 2 * time.Second}

// fleet2 is a hub and a spoke with Turnstile installed, and the hub's manager.
type fleet2 struct {
	hub, spk *framework.Env
	hubMgr   *framework.Manager
	mutating bool
	spokeSA  *rest.Config // the agent's identity on the hub
}

func startFleet2(t *testing.T) *fleet2 {
	t.Helper()
	f := &fleet2{}
	var err error
	if f.hub, err = framework.Start(""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.hub.Stop() })
	if f.spk, err = framework.Start(""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.spk.Stop() })
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []*framework.Env{f.hub, f.spk} {
		b, err := framework.BundleFor(e.Config)
		if err != nil {
			t.Fatal(err)
		}
		f.mutating = b.Mutating != ""
		if out, err := kubectl2(t, e, "apply", "--server-side", "-k", b.Dir); err != nil {
			t.Fatalf("install %s: %v: %s", b, err, out)
		}
	}
	if out, err := kubectl2(t, f.hub, "apply", "--server-side", "-k", filepath.Join(root, "config", "fleet")); err != nil {
		t.Fatalf("install config/fleet: %v: %s", err, out)
	}
	if out, err := kubectl2(t, f.hub, "-n", spoke.FleetNamespace, "patch", "configmap", "turnstile-fleet-members", "--type=merge", "-p", `{"data":{"`+cluster2+`":"{}"}}`); err != nil {
		t.Fatalf("join %s: %v: %s", cluster2, err, out)
	}
	f.spokeSA = rest.CopyConfig(f.hub.Config)
	f.spokeSA.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + spoke.FleetNamespace + ":" + spoke.LeaseName(cluster2),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + spoke.FleetNamespace, "system:authenticated"}}
	if f.hubMgr, err = f.hub.StartManager(controller.SetupOptions{Queue: queue.DefaultConfig()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.hubMgr.Stop() })
	return f
}

func kubectl2(t *testing.T, e *framework.Env, args ...string) (string, error) {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := e.WriteKubeconfig(kubeconfig); err != nil {
		return "", err
	}
	out, err := exec.Command(e.Kubectl(), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// as2 is a client of e that the API server authenticates as user.
func (f *fleet2) as2(t *testing.T, e *framework.Env, user string) client.WithWatch {
	t.Helper()
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: framework.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if !f.mutating {
		return framework.FillAsUser(c, user)
	}
	return c
}

// bind2 binds the shipped ClusterRole role to users in ns of e (a group when the name starts
// with "group:"), and waits until RBAC says so.
func bind2(t *testing.T, e *framework.Env, ns, role string, names ...string) {
	t.Helper()
	ctx := context.Background()
	var subjects []rbacv1.Subject
	for _, n := range names {
		if g, ok := strings.CutPrefix(n, "group:"); ok {
			subjects = append(subjects, rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: g})
		} else {
			subjects = append(subjects, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: n})
		}
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: role + "-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   subjects,
	}
	if err := e.Client.Create(ctx, rb); err != nil {
		t.Fatal(err)
	}
	g := gomega.NewWithT(t)
	for _, s := range subjects {
		spec := authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: "get", Group: "locks.turnstile.dev", Resource: "lockrequests"}}
		if s.Kind == rbacv1.GroupKind {
			spec.User, spec.Groups = "member-of-"+s.Name, []string{s.Name}
		} else {
			spec.User = s.Name
		}
		g.Eventually(func(g gomega.Gomega) {
			review := &authorizationv1.SubjectAccessReview{Spec: spec}
			g.Expect(e.Client.Create(ctx, review)).To(gomega.Succeed())
			g.Expect(review.Status.Allowed).To(gomega.BeTrue())
		}).WithTimeout(60 * time.Second).Should(gomega.Succeed())
	}
}

// startAgent2 runs the spoke's manager (SetupSpoke, the agent as the spoke's ServiceAccount on
// the hub, the workload controller) until the test ends.
func (f *fleet2) startAgent2(t *testing.T) { f.startAgent2Via(t, f.spokeSA) }

// agent2 is a running agent of the fleet's spoke; stop stops it (again at cleanup: a no-op).
type agent2 struct{ stop func() }

// startAgent2Via is startAgent2 with the agent's hub connection hubCfg (the spoke's identity,
// through a netcut proxy, say).
func (f *fleet2) startAgent2Via(t *testing.T, hubCfg *rest.Config) *agent2 {
	t.Helper()
	a, err := f.tryAgent2Via(t, hubCfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// tryAgent2Via is startAgent2Via that returns the error that kept the agent from starting.
func (f *fleet2) tryAgent2Via(t *testing.T, hubCfg *rest.Config) (*agent2, error) {
	t.Helper()
	cfg := rest.CopyConfig(f.spk.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: framework.Scheme, Cache: cache.Options(), NewCache: cache.New,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, err
	}
	if err := controller.SetupSpoke(mgr, controller.SetupOptions{Retention: time.Hour}); err != nil {
		return nil, err
	}
	if _, err := spoke.SetupWithManager(mgr, spoke.Options{Cluster: cluster2, Hub: rest.CopyConfig(hubCfg), Settings: attack2Settings}); err != nil {
		return nil, err
	}
	if err := workload.SetupWithManager(mgr, workload.WithIdentity("system:serviceaccount:turnstile-system:turnstile-controller-manager")); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m, err := framework.Run(ctx, cancel, mgr)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	a := &agent2{stop: func() { once.Do(func() { _ = m.Stop() }) }}
	t.Cleanup(a.stop)
	return a, nil
}

// grantsWatch2 records every version of the spoke request ns/name that shows Granted, until
// stop; stop returns them, described.
func grantsWatch2(t *testing.T, c client.WithWatch, ns, name string) (stop func() []string) {
	t.Helper()
	w, err := c.Watch(context.Background(), &locksv1.LockRequestList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []string, 1)
	go func() {
		var shown []string
		for ev := range w.ResultChan() {
			lr, ok := ev.Object.(*locksv1.LockRequest)
			if !ok || lr.Name != name || ev.Type == watch.Deleted {
				continue
			}
			if lr.Status.Phase == locksv1.PhaseGranted {
				shown = append(shown, fmt.Sprintf("%s %s token %d (bypassFreeze %v)", ev.Type, lr.Status.Phase, lr.Status.FencingToken, lr.Spec.BypassFreeze != nil))
			}
		}
		done <- shown
	}()
	return func() []string { w.Stop(); return <-done }
}

// TestAttack2SpokeAdminsBypassPassesTheFleetsFreeze: a spoke user with the bypassfreeze
// permission in the spoke (turnstile-admin of one namespace there, nothing on the hub) adds
// spec.bypassFreeze to a request the spoke holds back under the fleet's freeze (FrozenInSpoke: a
// hub grant that the spoke's judgement of the hub's CommandLocks does not let go). The agent
// never carries bypassFreeze to the hub (SpecUpdate carries release, ttl, priority, waitTimeout
// and reason), and the hub gives a spoke no bypassfreeze ("the hub's policy is the fleet's"),
// so the hub request keeps no bypass; but the gate (LocalFreeze) judges the spoke request, whose
// spoke-local bypass lets it past every freeze: the workload is let go inside the freeze.
// docs/fleet.md says "spec.bypassFreeze a hub admitted passes the gate too": only one the hub
// admitted.
//
// How the spoke comes to hold a hub grant back, deterministically: the Deny window selects
// namespaces by a label the spoke's namespace has and the hub's has not (a namespaceSelector is
// judged by the spoke's namespace labels in the spoke, docs/fleet.md "Scopes in the spoke"). In
// a live fleet the same state comes from a grant the hub made before a window opened that
// reaches the spoke after it (a cut, a slow watch, the partition rule's hold).
func TestAttack2SpokeAdminsBypassPassesTheFleetsFreeze(t *testing.T) {
	t.Parallel()
	f := startFleet2(t)
	const ns = "attack2-bypass"
	ctx := context.Background()
	g := gomega.NewWithT(t)
	g.Expect(f.hub.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(gomega.Succeed())
	g.Expect(f.spk.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"freeze": "weekend"}}})).To(gomega.Succeed())
	bind2(t, f.spk, ns, "turnstile-requester", "alice")
	bind2(t, f.spk, ns, "turnstile-admin", "dana")
	bind2(t, f.hub, ns, "turnstile-fleet-spoke", "group:system:serviceaccounts:"+spoke.FleetNamespace)
	alice, dana := f.as2(t, f.spk, "alice"), f.as2(t, f.spk, "dana")

	// The fleet's freeze: a Deny window always in force, for namespaces labelled freeze=weekend.
	cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "apply"}, Spec: locksv1.CommandLockSpec{Windows: []locksv1.FreezeWindow{{
		Name: "weekend", Schedule: "* * * * *", Duration: metav1.Duration{Duration: 2 * time.Hour}, Action: locksv1.WindowDeny,
		WindowScope: locksv1.WindowScope{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"freeze": "weekend"}}},
	}}}}
	g.Expect(f.hub.Client.Create(ctx, cl)).To(gomega.Succeed())
	f.startAgent2(t)
	g.Eventually(func(g gomega.Gomega) {
		var m locksv1.CommandLock
		g.Expect(f.spk.Client.Get(ctx, types.NamespacedName{Name: "apply"}, &m)).To(gomega.Succeed())
		g.Expect(spoke.IsMirror(&m)).To(gomega.BeTrue())
		g.Expect(m.Status.Windows).NotTo(gomega.BeEmpty(), "the hub has judged the window")
	}).WithTimeout(60 * time.Second).Should(gomega.Succeed())

	// The spoke's policies are enforced: alice may not bypass a freeze herself.
	probe := lockOn2(ns, "probe")
	probe.Spec.Command = "apply"
	probe.Spec.BypassFreeze = &locksv1.FreezeBypass{Reason: "mine"}
	g.Eventually(func() error { return alice.Create(ctx, probe, client.DryRunAll) }).WithTimeout(90*time.Second).
		Should(gomega.MatchError(gomega.ContainSubstring("bypassfreeze")), "the spoke's policies are enforced")

	lr := lockOn2(ns, "alice-apply")
	lr.Spec.Command = "apply"
	g.Expect(alice.Create(ctx, lr)).To(gomega.Succeed())
	hubName := spoke.HubName(cluster2, "alice-apply")
	// The hub grants it (its namespace is not labelled), the spoke holds it: the fleet's freeze
	// as the spoke judges it.
	g.Eventually(func(g gomega.Gomega) {
		var h locksv1.LockRequest
		g.Expect(f.hub.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: hubName}, &h)).To(gomega.Succeed())
		g.Expect(h.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
		var s locksv1.LockRequest
		g.Expect(f.spk.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "alice-apply"}, &s)).To(gomega.Succeed())
		c := meta.FindStatusCondition(s.Status.Conditions, locksv1.ConditionGranted)
		g.Expect(c).NotTo(gomega.BeNil())
		g.Expect(c.Reason).To(gomega.Equal(spoke.ReasonFrozenInSpoke))
	}).WithTimeout(60 * time.Second).Should(gomega.Succeed())
	shown := grantsWatch2(t, f.spk.Client, ns, "alice-apply")

	// dana, an admin of this namespace in the spoke only, bypasses the freeze there.
	g.Eventually(func() error {
		var s locksv1.LockRequest
		if err := dana.Get(ctx, types.NamespacedName{Namespace: ns, Name: "alice-apply"}, &s); err != nil {
			return err
		}
		s.Spec.BypassFreeze = &locksv1.FreezeBypass{Reason: "incident 4711: hotfix"}
		return dana.Update(ctx, &s)
	}).WithTimeout(30*time.Second).Should(gomega.Succeed(), "the spoke admits dana's bypass (she has bypassfreeze in the spoke)")

	g.Consistently(func(g gomega.Gomega) {
		var h locksv1.LockRequest
		g.Expect(f.hub.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: hubName}, &h)).To(gomega.Succeed())
		g.Expect(h.Spec.BypassFreeze).To(gomega.BeNil(), "the hub admitted a bypass of the spoke's")
	}).WithTimeout(10 * time.Second).Should(gomega.Succeed())
	g.Expect(shown()).To(gomega.BeEmpty(),
		"BREAK: a bypass the hub never admitted (dana's, in the spoke) let the hub's grant go in the spoke while the fleet's freeze holds it there")
}

// lockOn2 is a request (of no owner: the policies fill in its creator) for the key
// acme/infra/vpc/default.
func lockOn2(ns, name string) *locksv1.LockRequest {
	return &locksv1.LockRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{{Repo: "acme/infra", Path: "vpc", Workspace: "default"}}},
	}
}

// TestAttack2SlowHubStopsHoldersItStillAnswers (the network: a hub that answers late, but
// answers): the agent renews its hub Leases one namespace after the other (renewAll), two round
// trips each (a get, then the update), and starts the next round RenewEvery after the last one
// ended. So a namespace's Lease is renewed every RenewEvery plus a whole round, which grows with
// the number of namespaces in use times the round trip; once that passes the stop deadline
// (about L/2 after a renewal), the agent stops holders whose hub request the hub still grants
// and whose Lease it renews, every call answered well within RetryAfter. Here: L 20s (renewal
// every 6.7s, given up after 3.3s, the stop about 13s after a renewal), six namespaces with a
// holder each, and 400ms each way between the agent and the hub (a round trip of 0.8s, a
// renewal of 1.6s, a round of about 11s). In a live fleet the same comes at the defaults (L
// 40s, the stop at 20s) with a 100ms round trip once about 35 namespaces are in use. No holder
// should be stopped while the hub answers every renewal in time: the renewals of different
// namespaces do not depend on each other (they could go at once, or each on its own clock).
func TestAttack2SlowHubStopsHoldersItStillAnswers(t *testing.T) {
	t.Parallel()
	f := startFleet2(t)
	ctx := context.Background()
	g := gomega.NewWithT(t)
	host, err := url.Parse(f.hub.Config.Host)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	p, err := netcut.New(host.Host)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	t.Cleanup(func() { _ = p.Close() })
	through := rest.CopyConfig(f.spokeSA)
	through.Host = "https://" + p.Addr()
	calls := &leaseCalls2{}
	through.Wrap(calls.wrap)

	const spaces = 6
	var names []string
	for i := range spaces {
		ns := fmt.Sprintf("attack2-slow-%d", i)
		names = append(names, ns)
		for _, e := range []*framework.Env{f.hub, f.spk} {
			g.Expect(e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(gomega.Succeed())
		}
		bind2(t, f.hub, ns, "turnstile-fleet-spoke", "group:system:serviceaccounts:"+spoke.FleetNamespace)
	}
	f.startAgent2Via(t, through)
	for _, ns := range names {
		lr := lockOn2(ns, "alice-apply")
		lr.Spec.Holder.Owner = "alice"
		g.Eventually(func() error { return f.spk.Client.Create(ctx, lr.DeepCopy()) }).WithTimeout(60 * time.Second).Should(gomega.Succeed())
	}
	for _, ns := range names {
		g.Eventually(func(g gomega.Gomega) {
			var s locksv1.LockRequest
			g.Expect(f.spk.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "alice-apply"}, &s)).To(gomega.Succeed())
			g.Expect(s.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted), "%s: %s", ns, s.Status.BlockedBy)
		}).WithTimeout(60 * time.Second).Should(gomega.Succeed())
	}

	p.Delay(400 * time.Millisecond)
	t.Cleanup(p.Pass)
	calls.reset()
	g.Consistently(func(g gomega.Gomega) {
		for _, ns := range names {
			var s locksv1.LockRequest
			g.Expect(f.spk.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "alice-apply"}, &s)).To(gomega.Succeed())
			c := meta.FindStatusCondition(s.Status.Conditions, locksv1.ConditionGranted)
			why := ""
			if c != nil {
				why = c.Reason + ": " + c.Message
			}
			g.Expect(s.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted),
				"BREAK: the agent stopped a holder in %s while the hub answered its Lease calls (%s; RetryAfter %s): %s",
				ns, calls, attack2Settings.RetryAfter(), why)
		}
	}).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(gomega.Succeed())
}

// leaseCalls2 records the agent's calls on hub Leases: how many, how many failed (no answer,
// or an error status), and the slowest answer.
type leaseCalls2 struct {
	mu        sync.Mutex
	n, failed int
	slowest   time.Duration
}

func (c *leaseCalls2) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper2(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := next.RoundTrip(req)
		if strings.Contains(req.URL.Path, "/leases") {
			c.mu.Lock()
			c.n++
			if err != nil || resp.StatusCode >= 400 && resp.StatusCode != http.StatusNotFound {
				c.failed++
			}
			c.slowest = max(c.slowest, time.Since(start))
			c.mu.Unlock()
		}
		return resp, err
	})
}

func (c *leaseCalls2) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n, c.failed, c.slowest = 0, 0, 0
}

func (c *leaseCalls2) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d Lease calls since the delay began, %d failed, the slowest answered in %s", c.n, c.failed, c.slowest.Round(time.Millisecond))
}

type roundTripper2 func(*http.Request) (*http.Response, error)

func (f roundTripper2) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestAttack2AgentRestartedDuringACutNeverStopsItsHolders (the network, with a restart): the
// agent restarts (an upgrade, a node drained, an OOM kill) while the hub is cut off from the
// spoke. docs/fleet.md: "an agent that starts tries a renewal before it judges; when that fails
// (restarted during a partition) Judge's answer for an unknown clock is Stop: the safe one". But
// the agent's controller watches the hub's requests through its hub cache, which cannot sync
// while the hub does not answer, and controller-runtime starts no worker before its sources have
// synced (and gives up after CacheSyncTimeout, two minutes, stopping the manager): nothing
// judges the spoke's holders. A holder the spoke showed Granted before the restart runs on
// past the hub Lease's lapse, when the hub hands its lock to the next waiter: two holders.
func TestAttack2AgentRestartedDuringACutNeverStopsItsHolders(t *testing.T) {
	t.Parallel()
	f := startFleet2(t)
	ctx := context.Background()
	g := gomega.NewWithT(t)
	const ns = "attack2-restart"
	for _, e := range []*framework.Env{f.hub, f.spk} {
		g.Expect(e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(gomega.Succeed())
	}
	bind2(t, f.hub, ns, "turnstile-fleet-spoke", "group:system:serviceaccounts:"+spoke.FleetNamespace)
	host, err := url.Parse(f.hub.Config.Host)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	p, err := netcut.New(host.Host)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	t.Cleanup(func() { _ = p.Close() })
	through := rest.CopyConfig(f.spokeSA)
	through.Host = "https://" + p.Addr()

	first := f.startAgent2Via(t, through)
	lr := lockOn2(ns, "alice-apply")
	lr.Spec.Holder.Owner = "alice"
	g.Eventually(func() error { return f.spk.Client.Create(ctx, lr.DeepCopy()) }).WithTimeout(60 * time.Second).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		var s locksv1.LockRequest
		g.Expect(f.spk.Client.Get(ctx, client.ObjectKeyFromObject(lr), &s)).To(gomega.Succeed())
		g.Expect(s.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted), s.Status.BlockedBy)
	}).WithTimeout(60 * time.Second).Should(gomega.Succeed())
	// A waiter on the hub, for the same key.
	waiter := lockOn2(ns, "carol-apply")
	waiter.Spec.Holder.Owner = "carol"
	g.Expect(f.hub.Client.Create(ctx, waiter)).To(gomega.Succeed())

	// The agent restarts while the hub does not answer.
	first.stop()
	p.Blackhole()
	t.Cleanup(p.Pass)
	// The agent as cmd/manager runs it: a setup that fails is a manager that exits (and is
	// restarted, and fails again, while the cut lasts).
	started := "it runs"
	if _, err := f.tryAgent2Via(t, through); err != nil {
		started = "it did not start: " + err.Error()
	}
	t.Logf("the agent restarted during the cut: %s", started)
	var lease coordinationv1.Lease
	g.Expect(f.hub.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: spoke.LeaseName(cluster2)}, &lease)).To(gomega.Succeed())
	lapse := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	t.Logf("the hub Lease was last renewed at %s: it lapses at %s", lease.Spec.RenewTime.UTC().Format(time.RFC3339Nano), lapse.UTC().Format(time.RFC3339Nano))

	// The holder must be stopped before the lapse; by the time the hub has handed the key to
	// carol it must be long gone.
	g.Eventually(func(g gomega.Gomega) {
		var w locksv1.LockRequest
		g.Expect(f.hub.Client.Get(ctx, client.ObjectKeyFromObject(waiter), &w)).To(gomega.Succeed())
		g.Expect(w.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted), "the hub hands the key on once the Lease lapses")
	}).WithTimeout(time.Until(lapse) + 30*time.Second).Should(gomega.Succeed())
	var s locksv1.LockRequest
	g.Expect(f.spk.Client.Get(ctx, client.ObjectKeyFromObject(lr), &s)).To(gomega.Succeed())
	g.Expect(s.Status.Phase).NotTo(gomega.Equal(locksv1.PhaseGranted),
		"BREAK: the spoke's holder (token %d) still runs, never stopped by the agent restarted during the cut (%s), while the hub has granted carol the key",
		s.Status.FencingToken, started)
}

// TestAttack2MirrorLiftsTheSpokesOwnWriteFreeze (the agent as a deputy in the spoke, and a
// freeze that should hold there): a spoke's admin freezes writes to her own cluster with a
// CommandLock of the spoke (spec.locked with spec.admission: the spoke's turnstile-freeze
// policy enforces it from the spec alone, also with no lock controller running, as in a spoke).
// The hub has a CommandLock of the same name (every fleet has an "apply"): the agent's mirror
// takes the spoke's object for a mirror to put back and writes the hub's spec over it, with the
// manager's rights, dropping spec.admission ("Not mirrored: a write freeze"): the spoke's write
// freeze is gone, and writes it refused pass. Neither the hub's admin nor the agent was asked to
// lift it; nothing says it was.
func TestAttack2MirrorLiftsTheSpokesOwnWriteFreeze(t *testing.T) {
	t.Parallel()
	f := startFleet2(t)
	ctx := context.Background()
	g := gomega.NewWithT(t)
	const ns = "attack2-write-freeze"
	for _, e := range []*framework.Env{f.hub, f.spk} {
		g.Expect(e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(gomega.Succeed())
	}
	// alice writes ConfigMaps there (a Role of its own: envtest runs no aggregation of "edit").
	g.Expect(f.spk.Client.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configmaps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get"}}},
	})).To(gomega.Succeed())
	g.Expect(f.spk.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "alice-configmaps"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmaps"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}},
	})).To(gomega.Succeed())
	bind2(t, f.spk, ns, "turnstile-requester", "alice")
	alice := f.as2(t, f.spk, "alice")
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, GenerateName: "probe-"}, Data: map[string]string{"k": "v"}}
	}

	// The spoke's own write freeze: no ConfigMap written in this namespace.
	own := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "apply"}, Spec: locksv1.CommandLockSpec{
		Locked: true, Reason: "eu-west-1 is being migrated: no changes",
		Admission: &locksv1.AdmissionFreeze{
			Resources:         []locksv1.AdmissionResources{{APIGroups: []string{""}, Kinds: []string{"ConfigMap"}}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
		},
	}}
	g.Expect(f.spk.Client.Create(ctx, own)).To(gomega.Succeed())
	// (Not a dry run: the freeze lets those by.)
	g.Eventually(func() error { return alice.Create(ctx, cm("")) }).WithTimeout(60*time.Second).
		Should(gomega.MatchError(gomega.ContainSubstring("turnstile-freeze")), "the spoke's write freeze holds")

	// The hub's CommandLock of that name (not even locked), and the agent.
	g.Expect(f.hub.Client.Create(ctx, &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "apply"}})).To(gomega.Succeed())
	f.startAgent2(t)
	g.Consistently(func(g gomega.Gomega) {
		var cl locksv1.CommandLock
		g.Expect(f.spk.Client.Get(ctx, types.NamespacedName{Name: "apply"}, &cl)).To(gomega.Succeed())
		g.Expect(cl.Spec.Admission).NotTo(gomega.BeNil(), "BREAK: the agent wrote the hub's CommandLock over the spoke's own write freeze (labels %v)", cl.Labels)
		g.Expect(cl.Spec.Locked).To(gomega.BeTrue(), "BREAK: the agent thawed the spoke's own freeze")
	}).WithTimeout(20 * time.Second).Should(gomega.Succeed())
	g.Expect(alice.Create(ctx, cm("after"))).To(gomega.MatchError(gomega.ContainSubstring("turnstile-freeze")),
		"BREAK: a write the spoke's own freeze refuses passes once the agent mirrored the hub's CommandLock of its name")
}

// TestAttack2RequestAfterAnIdleSpellIsLostAtOnce (plain use, no attacker; a stalled namespace):
// the agent renews the hub Lease only of namespaces with an unfinished hub request (renewAll),
// so a namespace whose requests have all finished has its Lease lapse L later; and it makes a
// new request's Lease only when its partition clock has never been renewed (ensureLease: "if
// st.Renewed is not zero, nothing to do"). The next request made there after an idle spell
// longer than L names a Lease that lapsed: the hub releases it at once (HolderLost), and since
// that leaves the namespace with no unfinished request again, the renewer never renews it:
// every later request of that namespace is lost the same way, until the agent restarts.
func TestAttack2RequestAfterAnIdleSpellIsLostAtOnce(t *testing.T) {
	t.Parallel()
	f := startFleet2(t)
	ctx := context.Background()
	g := gomega.NewWithT(t)
	const ns = "attack2-idle"
	for _, e := range []*framework.Env{f.hub, f.spk} {
		g.Expect(e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(gomega.Succeed())
	}
	bind2(t, f.hub, ns, "turnstile-fleet-spoke", "group:system:serviceaccounts:"+spoke.FleetNamespace)
	bind2(t, f.spk, ns, "turnstile-requester", "alice")
	alice := f.as2(t, f.spk, "alice")
	f.startAgent2(t)

	phase := func(g gomega.Gomega, name string) *locksv1.LockRequest {
		var s locksv1.LockRequest
		g.Expect(f.spk.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &s)).To(gomega.Succeed())
		return &s
	}
	g.Eventually(func() error { return alice.Create(ctx, lockOn2(ns, "first")) }).WithTimeout(60 * time.Second).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(phase(g, "first").Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
	}).WithTimeout(60 * time.Second).Should(gomega.Succeed())
	first := phase(g, "first")
	first.Spec.Release = true
	g.Expect(alice.Update(ctx, first)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(phase(g, "first").Status.Phase).To(gomega.Equal(locksv1.PhaseReleased))
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())

	// Idle past the Lease: it lapses on the hub.
	g.Eventually(func(g gomega.Gomega) {
		var l coordinationv1.Lease
		g.Expect(f.hub.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: spoke.LeaseName(cluster2)}, &l)).To(gomega.Succeed())
		lapse := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
		g.Expect(time.Now().After(lapse.Add(2*time.Second))).To(gomega.BeTrue(), "the namespace's hub Lease has lapsed")
	}).WithTimeout(attack2Settings.Lease + 20*time.Second).WithPolling(time.Second).Should(gomega.Succeed())

	for _, name := range []string{"second", "third"} {
		g.Expect(alice.Create(ctx, lockOn2(ns, name))).To(gomega.Succeed())
		g.Eventually(func(g gomega.Gomega) {
			s := phase(g, name)
			why := ""
			if c := meta.FindStatusCondition(s.Status.Conditions, locksv1.ConditionGranted); c != nil {
				why = c.Reason + ": " + c.Message
			}
			g.Expect(s.Status.Phase).NotTo(gomega.Equal(locksv1.PhaseReleased), "BREAK: %s, made after the namespace was idle past L, was lost at once: %s", name, why)
			g.Expect(s.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
		}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	}
}

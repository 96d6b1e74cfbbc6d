package spoke_test

import (
	"context"
	"fmt"
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
	"github.com/turnstile-dev/turnstile/internal/workload"
	"github.com/turnstile-dev/turnstile/pkg/workdir"
)

// The attacks of issue 45's review: users of a fleet, each through the shipped roles only, try
// to make the spoke's agent (which acts on the hub with the spoke's identity, and in the spoke
// with the manager's) do for them what they could not do themselves. Unlike the other tests of
// this package, the hub and the spoke here run Turnstile as installed: `kubectl apply -k` of the
// admission bundle in both, config/fleet on the hub, the agent acting on the hub as its
// ServiceAccount turnstile-fleet/spoke-<cluster>, and every person an impersonated user bound to
// turnstile-requester or turnstile-viewer in one namespace.
//
// Run them alone with: go test -race -run 'TestAttack' ./internal/fleet/spoke/

// attackCluster is the installed fleet's spoke's name.
const attackCluster = "eu-west-1"

// attackSettings are short partition settings (as TestRefusedClusterSaysSoInTheSpoke's) so a
// grant's stop deadline comes within a test: L 20s, grace 3s, max skew 2s.
var attackSettings = skew.Settings{Lease: 20 * time.Second, Grace: 3 * time.Second, MaxSkew: 2 * time.Second}

// installed is a hub and a spoke with Turnstile installed as the docs say, and the hub's manager.
type installed struct {
	hub, spk *framework.Env
	hubMgr   *framework.Manager
	mutating bool
	// spokeSA is the agent's rest.Config on the hub: the spoke's ServiceAccount.
	spokeSA *rest.Config
}

var (
	attackOnce sync.Once
	attackEnv  *installed
	attackErr  error
)

// TestAttack runs every attack on one installed fleet (started once, stopped at the end).
func TestAttack(t *testing.T) {
	t.Parallel()
	f := install(t)
	t.Cleanup(func() {
		if f.hubMgr != nil {
			_ = f.hubMgr.Stop()
		}
		_ = f.hub.Stop()
		_ = f.spk.Stop()
	})
	t.Run("ShortTTLInTheNamespaceStopsAnothersHolder", f.attackShortTTL)
	t.Run("HubUserLabelledRequestStopsASpokesHolders", f.attackHubUserExpiry)
	t.Run("HubUserSquatsASpokeRequestsHubName", f.attackSquat)
	t.Run("HashedNameCollisionDeletesAnothersHubRequest", f.attackHashCollision)
	t.Run("SpokeAdminsPowersAreNotTheHubs", f.attackSpokeAdmin)
	t.Run("EditRefusedByTheHubFreezesTheSpokesGrant", f.attackRefusedEdit)
	t.Run("HubUserSquatsTheSpokesHubLease", func(t *testing.T) { f.attackLeaseSquat(t, false) })
	t.Run("HubUserSquatsTheSpokesHubLeaseLabelled", func(t *testing.T) { f.attackLeaseSquat(t, true) })
	t.Run("HubAdminDeletesAGrantedHubRequest", f.hubRequestDeleted)
}

// A hub admin deletes a granted spoke request's hub request (the hub no longer holds its grant;
// the hub refuses that until the stop is said, which she says herself):
// the spoke request has lost its grant (Released, HubRequestLost), and is not asked for again
// under the old grant's eyes.
func (f *installed) hubRequestDeleted(t *testing.T) {
	const ns = "attack-gone"
	r := f.room(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	f.startAgent(t)
	g.Expect(r.alice.Create(ctx, lockOn(ns, "alice-apply", "vpc"))).To(gomega.Succeed())
	granted(t, r.spokeView, ns, "alice-apply")
	hub := get(g, r.hubAdmin, ns, spoke.HubName(attackCluster, "alice-apply"))
	// Refused while the spoke may still show the grant (turnstile-fleet-stopped); an admin who
	// must end it at once says the stop herself, and deletes it.
	g.Expect(r.hubAdmin.Delete(ctx, hub)).To(gomega.MatchError(gomega.ContainSubstring("the hub hands it on only once that spoke has stopped its holder")))
	stopped := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, locksv1.AnnotationSpokeStopped, locksv1.StoppedToken(hub.Status.FencingToken))
	g.Expect(r.hubAdmin.Patch(ctx, hub, client.RawPatch(types.MergePatchType, []byte(stopped)))).To(gomega.Succeed())
	g.Expect(r.hubAdmin.Delete(ctx, hub)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		lr := get(g, r.spokeView, ns, "alice-apply")
		g.Expect(lr.Status.Phase).To(gomega.Equal(locksv1.PhaseReleased))
		c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
		g.Expect(c).NotTo(gomega.BeNil())
		g.Expect(c.Reason).To(gomega.Equal(spoke.ReasonHubRequestLost))
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	g.Consistently(func() error {
		var h locksv1.LockRequest
		return r.hubAdmin.Get(ctx, types.NamespacedName{Namespace: ns, Name: hub.Name}, &h)
	}).WithTimeout(3*time.Second).Should(gomega.MatchError(gomega.ContainSubstring("not found")), "the agent asks the hub for it again")
}

func install(t *testing.T) *installed {
	t.Helper()
	attackOnce.Do(func() { attackEnv, attackErr = startInstalled(t) })
	if attackErr != nil {
		t.Fatal(attackErr)
	}
	return attackEnv
}

func startInstalled(t *testing.T) (*installed, error) {
	f := &installed{}
	var err error
	if f.hub, err = framework.Start(""); err != nil {
		return nil, err
	}
	if f.spk, err = framework.Start(""); err != nil {
		return nil, err
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, err
	}
	for _, e := range []*framework.Env{f.hub, f.spk} {
		b, err := framework.BundleFor(e.Config)
		if err != nil {
			return nil, err
		}
		f.mutating = b.Mutating != ""
		if out, err := kubectlOn(t, e, "apply", "--server-side", "-k", b.Dir); err != nil {
			return nil, fmt.Errorf("install %s: %w: %s", b, err, out)
		}
	}
	if out, err := kubectlOn(t, f.hub, "apply", "--server-side", "-k", filepath.Join(root, "config", "fleet")); err != nil {
		return nil, fmt.Errorf("install config/fleet: %w: %s", err, out)
	}
	if out, err := kubectlOn(t, f.hub, "-n", spoke.FleetNamespace, "patch", "configmap", "turnstile-fleet-members", "--type=merge", "-p", `{"data":{"`+attackCluster+`":"{}"}}`); err != nil {
		return nil, fmt.Errorf("join %s: %w: %s", attackCluster, err, out)
	}
	f.spokeSA = rest.CopyConfig(f.hub.Config)
	f.spokeSA.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + spoke.FleetNamespace + ":" + spoke.LeaseName(attackCluster),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + spoke.FleetNamespace, "system:authenticated"}}
	if f.hubMgr, err = f.hub.StartManager(controller.SetupOptions{Queue: queue.DefaultConfig()}); err != nil {
		return nil, err
	}
	return f, nil
}

func kubectlOn(t *testing.T, e *framework.Env, args ...string) (string, error) {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := e.WriteKubeconfig(kubeconfig); err != nil {
		return "", err
	}
	out, err := exec.Command(e.Kubectl(), append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// as is a client of e that the API server authenticates as user.
func (f *installed) as(t *testing.T, e *framework.Env, user string) client.WithWatch {
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

// room is one attack's namespace, in both clusters, and its people: in the spoke alice and bob
// requesters and mallory a viewer; on the hub mallory a requester (and nothing else), and the
// spoke's agent bound as config/fleet says.
type room struct {
	ns                  string
	alice, bob          client.WithWatch // spoke
	mallorySpoke        client.WithWatch // spoke, viewer
	malloryHub          client.WithWatch // hub, requester
	spokeOnHub          client.WithWatch // the agent's identity on the hub
	hubAdmin, spokeView client.WithWatch
}

func (f *installed) room(t *testing.T, ns string) *room {
	t.Helper()
	ctx := context.Background()
	for _, e := range []*framework.Env{f.hub, f.spk} {
		if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	bindIn(t, f.spk, ns, "turnstile-requester", user("alice"), user("bob"))
	bindIn(t, f.spk, ns, "turnstile-viewer", user("mallory"))
	bindIn(t, f.hub, ns, "turnstile-requester", user("mallory"))
	bindIn(t, f.hub, ns, "turnstile-fleet-spoke",
		rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts:" + spoke.FleetNamespace})
	r := &room{ns: ns,
		alice: f.as(t, f.spk, "alice"), bob: f.as(t, f.spk, "bob"), mallorySpoke: f.as(t, f.spk, "mallory"),
		malloryHub: f.as(t, f.hub, "mallory"), hubAdmin: f.hub.Client, spokeView: f.spk.Client}
	sa, err := client.NewWithWatch(f.spokeSA, client.Options{Scheme: framework.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	r.spokeOnHub = sa
	// The policies are enforced (they load asynchronously): bob cannot name alice the owner in
	// the spoke; on the hub the spoke cannot write another cluster's request, and mallory cannot
	// name a holder's cluster.
	g := gomega.NewWithT(t)
	g.Eventually(func() error {
		return r.bob.Create(ctx, request(ns, "probe", "alice"), client.DryRunAll)
	}).WithTimeout(90*time.Second).Should(gomega.MatchError(gomega.ContainSubstring("spec.holder.owner must be your user name")), "the spoke's policies are enforced")
	g.Eventually(func() error {
		p := request(ns, "other.probe", "alice")
		p.Labels = map[string]string{spoke.LabelCluster: "other"}
		p.Spec.Holder.Cluster, p.Spec.Holder.Lease = "other", spoke.LeaseName("other")
		return r.spokeOnHub.Create(ctx, p, client.DryRunAll)
	}).WithTimeout(90*time.Second).Should(gomega.MatchError(gomega.ContainSubstring("turnstile-fleet-spoke")), "the hub's fleet policies are enforced")
	g.Eventually(func() error {
		p := request(ns, "probe", "mallory")
		p.Spec.Holder.Cluster = attackCluster
		return r.malloryHub.Create(ctx, p, client.DryRunAll)
	}).WithTimeout(90*time.Second).Should(gomega.MatchError(gomega.ContainSubstring("turnstile-fleet-hub-users")), "the hub's hub-users policy is enforced")
	return r
}

func user(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

// bindIn binds the shipped ClusterRole role to subjects in ns of e, and waits until RBAC says so.
func bindIn(t *testing.T, e *framework.Env, ns, role string, subjects ...rbacv1.Subject) {
	t.Helper()
	ctx := context.Background()
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

// startAgent runs the spoke's manager (SetupSpoke, the agent as the spoke's ServiceAccount on
// the hub, the workload controller) until the test ends.
func (f *installed) startAgent(t *testing.T) {
	t.Helper()
	cfg := rest.CopyConfig(f.spk.Config)
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
	if _, err := spoke.SetupWithManager(mgr, spoke.Options{Cluster: attackCluster, Hub: rest.CopyConfig(f.spokeSA), Settings: attackSettings}); err != nil {
		t.Fatal(err)
	}
	if err := workload.SetupWithManager(mgr, workload.WithIdentity("system:serviceaccount:turnstile-system:turnstile-controller-manager")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m, err := framework.Run(ctx, cancel, mgr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop() })
}

func lockOn(ns, name, path string) *locksv1.LockRequest {
	lr := request(ns, name, "")
	lr.Spec.Locks = []locksv1.LockTarget{{Repo: "acme/infra", Path: path, Workspace: "default"}}
	return lr
}

// granted waits until c shows the request ns/name granted (the hub's grant, in a spoke), and returns it.
func granted(t *testing.T, c client.Client, ns, name string) *locksv1.LockRequest {
	t.Helper()
	g := gomega.NewWithT(t)
	var out *locksv1.LockRequest
	g.Eventually(func(g gomega.Gomega) {
		out = get(g, c, ns, name)
		g.Expect(out.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted), "%s: %s", name, out.Status.BlockedBy)
	}).WithTimeout(60 * time.Second).Should(gomega.Succeed())
	return out
}

// lostWatch records every version of the spoke request ns/name that is not Granted (after it
// was), until stop; stop returns them, described.
func lostWatch(t *testing.T, c client.WithWatch, ns, name string) (stop func() []string) {
	t.Helper()
	w, err := c.Watch(context.Background(), &locksv1.LockRequestList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan []string, 1)
	go func() {
		var lost []string
		for ev := range w.ResultChan() {
			lr, ok := ev.Object.(*locksv1.LockRequest)
			if !ok || lr.Name != name {
				continue
			}
			if ev.Type == watch.Deleted || lr.Status.Phase != locksv1.PhaseGranted {
				why := ""
				if c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted); c != nil {
					why = c.Reason + ": " + c.Message
				}
				lost = append(lost, fmt.Sprintf("%s %s (%s)", ev.Type, lr.Status.Phase, why))
			}
		}
		done <- lost
	}()
	return func() []string { w.Stop(); return <-done }
}

// Attack 1, a spoke requester: bob takes a free key of alice's namespace with a short ttl. The
// hub is reachable all along; alice's grant is hers and lasts the default TTL. Whatever bob's
// own request becomes when its ttl runs out, alice's holder must keep running: in one cluster
// bob cannot release her lock (turnstile-lockrequest-changes).
func (f *installed) attackShortTTL(t *testing.T) {
	const ns = "attack-ttl"
	r := f.room(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	f.startAgent(t)

	g.Expect(r.alice.Create(ctx, lockOn(ns, "alice-apply", "vpc"))).To(gomega.Succeed())
	a := granted(t, r.spokeView, ns, "alice-apply")
	hubAlice := get(g, r.hubAdmin, ns, spoke.HubName(attackCluster, "alice-apply"))
	// Directly, bob cannot end her grant.
	mine := a.DeepCopy()
	mine.Spec.Release = true
	g.Expect(r.bob.Update(ctx, mine)).To(gomega.MatchError(gomega.ContainSubstring("turnstile-lockrequest-changes")))

	lost := lostWatch(t, r.spokeView, ns, "alice-apply")
	// Bob keeps a short grant in the namespace for 40s: a new request of 8s every 4s, each on a
	// key of its own (the agent holds each back, its stop deadline too near to let it go, so
	// it stays granted on the hub until its ttl ends). Alice is judged again at her own pace.
	n := 0
	g.Consistently(func(g gomega.Gomega) {
		n++
		short := lockOn(ns, fmt.Sprintf("bob-quick-%d", n), fmt.Sprintf("dns-%d", n))
		short.Spec.TTL = &metav1.Duration{Duration: 8 * time.Second}
		g.Expect(r.bob.Create(ctx, short)).To(gomega.Succeed())
		g.Expect(get(g, r.spokeView, ns, "alice-apply").Status.Phase).To(gomega.Equal(locksv1.PhaseGranted),
			"BREAK: bob's short ttls in the namespace stopped alice's holder (the agent's stop deadline is the earliest expiry of any grant in the namespace)")
	}).WithTimeout(40 * time.Second).WithPolling(4 * time.Second).Should(gomega.Succeed())
	g.Expect(lost()).To(gomega.BeEmpty(), "BREAK: bob's short ttls in the namespace stopped alice's holder")
	now := get(g, r.hubAdmin, ns, spoke.HubName(attackCluster, "alice-apply"))
	g.Expect(now.UID).To(gomega.Equal(hubAlice.UID))
	g.Expect(now.Spec.Release).To(gomega.BeFalse(), "BREAK: alice's hub grant was released by the agent")
	g.Expect(now.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
}

// Attack 2, a hub requester with no right in the spoke: mallory makes, on the hub, a request of
// her own with a short ttl, labelled fleet.turnstile.dev/cluster=<the spoke> (a label no policy
// keeps from her: docs/threat-model.md says so). The agent's hub cache selects by that label.
func (f *installed) attackHubUserExpiry(t *testing.T) {
	const ns = "attack-label"
	r := f.room(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	f.startAgent(t)

	g.Expect(r.alice.Create(ctx, lockOn(ns, "alice-apply", "vpc"))).To(gomega.Succeed())
	granted(t, r.spokeView, ns, "alice-apply")
	lost := lostWatch(t, r.spokeView, ns, "alice-apply")

	fake := lockOn(ns, "mallory-quick", "dns")
	fake.Labels = map[string]string{spoke.LabelCluster: attackCluster}
	fake.Spec.TTL = &metav1.Duration{Duration: 20 * time.Second}
	// Refused at admission (turnstile-fleet-reserved); the agent judges each holder by its own
	// grant's end anyway (ShortTTLInTheNamespaceStopsAnothersHolder).
	g.Expect(r.malloryHub.Create(ctx, fake)).To(gomega.MatchError(gomega.ContainSubstring("ValidatingAdmissionPolicy 'turnstile-fleet-reserved'")),
		"a hub requester labels her own request with a spoke's cluster")
	fake.Labels = nil
	g.Expect(r.malloryHub.Create(ctx, fake)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(get(g, r.hubAdmin, ns, "mallory-quick").Status.Phase).To(gomega.Equal(locksv1.PhaseExpired))
	}).WithTimeout(90 * time.Second).Should(gomega.Succeed())
	g.Expect(lost()).To(gomega.BeEmpty(), "BREAK: a hub user's short request stopped a spoke's holder")
	g.Consistently(func(g gomega.Gomega) {
		g.Expect(get(g, r.spokeView, ns, "alice-apply").Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
	}).WithTimeout(2 * time.Second).Should(gomega.Succeed())
	g.Expect(get(g, r.hubAdmin, ns, spoke.HubName(attackCluster, "alice-apply")).Spec.Release).To(gomega.BeFalse(), "BREAK: alice's hub grant was released by the agent")
}

// Attack 3, a hub requester who can read the spoke (a viewer there): bob's spoke request is
// made while the agent is away (a restart, an upgrade, a partition; in a live fleet, the
// milliseconds before the agent's create). Mallory makes on the hub a request of her own under
// bob's hub name, labelled with the spoke's cluster and annotated with bob's spoke UID and name,
// on a key nobody holds; carol holds the key bob asked for. The hub refuses it, dressed or not
// (turnstile-fleet-reserved, turnstile-fleet-names: a member's names are its spoke's). One made
// before the cluster joined the fleet is still there when it does: the agent must not take
// mallory's request for bob's: bob's spoke request must not show her grant (his Job would run
// while carol holds his key), nor her release; it says who holds the name (HubNameTaken).
func (f *installed) attackSquat(t *testing.T) {
	const ns = "attack-squat"
	r := f.room(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()

	carol := lockOn(ns, "carol-apply", "vpc")
	carol.Spec.Holder.Owner = "carol"
	g.Expect(r.hubAdmin.Create(ctx, carol)).To(gomega.Succeed())
	granted(t, r.hubAdmin, ns, "carol-apply")

	g.Expect(r.bob.Create(ctx, lockOn(ns, "bob-deploy", "vpc"))).To(gomega.Succeed())
	bob := get(g, r.mallorySpoke, ns, "bob-deploy") // mallory reads it: she is a viewer
	squat := lockOn(ns, spoke.HubName(attackCluster, bob.Name), "decoy")
	squat.Labels = map[string]string{spoke.LabelCluster: attackCluster}
	// bob's changeable fields as they are (ttl, priority, waitTimeout, reason: SpecUpdate's),
	// so the agent has nothing to carry over (the hub would refuse it that patch: the spoke
	// writes only requests of spec.holder.cluster its own).
	squat.Spec.TTL, squat.Spec.Priority, squat.Spec.WaitTimeout, squat.Spec.Reason = bob.Spec.TTL, bob.Spec.Priority, bob.Spec.WaitTimeout, bob.Spec.Reason
	squat.Annotations = map[string]string{
		spoke.AnnotationSpokeUID: string(bob.UID), spoke.AnnotationSpokeName: bob.Name,
		spoke.AnnotationSpokeGeneration: fmt.Sprint(bob.Generation),
	}
	// Both policies refuse it; the API server names one.
	g.Expect(r.malloryHub.Create(ctx, squat.DeepCopy())).To(gomega.MatchError(gomega.Or(
		gomega.ContainSubstring("ValidatingAdmissionPolicy 'turnstile-fleet-reserved'"), gomega.ContainSubstring("ValidatingAdmissionPolicy 'turnstile-fleet-names'"))),
		"a hub requester dresses her request as a spoke request's")
	squat.Labels, squat.Annotations = nil, nil
	g.Expect(r.malloryHub.Create(ctx, squat.DeepCopy())).To(gomega.MatchError(gomega.ContainSubstring("ValidatingAdmissionPolicy 'turnstile-fleet-names'")),
		"a hub requester takes a spoke request's hub name")

	// Before the cluster joined (or after it left), its names were anyone's: the agent's create
	// finds hers, and says so.
	members := func(value string) {
		t.Helper()
		if out, err := kubectlOn(t, f.hub, "-n", spoke.FleetNamespace, "patch", "configmap", "turnstile-fleet-members", "--type=merge",
			"-p", `{"data":{"`+attackCluster+`":`+value+`}}`); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	t.Cleanup(func() { members(`"{}"`) })
	members("null")
	g.Eventually(func() error { return r.malloryHub.Create(ctx, squat.DeepCopy(), client.DryRunAll) }).
		WithTimeout(60*time.Second).Should(gomega.Succeed(), "the hub lets anyone take the names of a cluster that is not a member")
	g.Expect(r.malloryHub.Create(ctx, squat)).To(gomega.Succeed())
	granted(t, r.hubAdmin, ns, squat.Name)
	members(`"{}"`)
	g.Eventually(func() error {
		return r.malloryHub.Create(ctx, lockOn(ns, spoke.HubName(attackCluster, "probe"), "decoy"), client.DryRunAll)
	}).WithTimeout(60*time.Second).Should(gomega.MatchError(gomega.ContainSubstring("ValidatingAdmissionPolicy 'turnstile-fleet-names'")), "the cluster joined again")

	f.startAgent(t)
	g.Eventually(func(g gomega.Gomega) {
		lr := get(g, r.spokeView, ns, "bob-deploy")
		c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionStalled)
		g.Expect(c).NotTo(gomega.BeNil())
		g.Expect(c.Reason).To(gomega.Equal(spoke.ReasonHubNameTaken))
		g.Expect(c.Message).To(gomega.ContainSubstring("created by mallory"))
	}).WithTimeout(60 * time.Second).Should(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) {
		lr := get(g, r.spokeView, ns, "bob-deploy")
		g.Expect(lr.Status.Phase).NotTo(gomega.Equal(locksv1.PhaseGranted),
			"BREAK: bob's spoke request shows mallory's hub grant (locks %v, token %d) while carol holds acme/infra/vpc", lr.Status.Locks, lr.Status.FencingToken)
	}).WithTimeout(5 * time.Second).Should(gomega.Succeed())
	g.Expect(get(g, r.hubAdmin, ns, squat.Name).Status.Phase).To(gomega.Equal(locksv1.PhaseGranted), "the agent leaves her request alone")
	// She cannot release or delete it now (turnstile-fleet-hub-users: a labelled request is
	// changed only by its spoke or an admin), but with bob's ttl copied it ends when its ttl
	// does, and bob's with it; and the agent releases it when bob's spoke request is released.
}

// Attack 4, a spoke requester: alice's request has a long name, so its hub name is shortened
// with a hash ("<cluster>.<head>-<16 hex>"). Bob names his own request the tail of that hub
// name: HubName(cluster, his) is alice's hub name, verbatim. The agent must not delete her hub
// request (her grant) for his.
func (f *installed) attackHashCollision(t *testing.T) {
	const ns = "attack-hash"
	r := f.room(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	f.startAgent(t)

	long := "apply-" + strings.Repeat("a", 240)
	g.Expect(r.alice.Create(ctx, lockOn(ns, long, "vpc"))).To(gomega.Succeed())
	a := granted(t, r.spokeView, ns, long)
	hubName := spoke.HubName(attackCluster, long)
	g.Expect(hubName).NotTo(gomega.Equal(attackCluster+"."+long), "alice's hub name is shortened")
	hubAlice := get(g, r.hubAdmin, ns, hubName)

	collide := strings.TrimPrefix(hubName, attackCluster+".")
	g.Expect(spoke.HubName(attackCluster, collide)).To(gomega.Equal(hubName), "bob's request's hub name is alice's")
	lost := lostWatch(t, r.spokeView, ns, long)
	g.Expect(r.bob.Create(ctx, lockOn(ns, collide, "dns"))).To(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) {
		var h locksv1.LockRequest
		err := r.hubAdmin.Get(ctx, types.NamespacedName{Namespace: ns, Name: hubName}, &h)
		g.Expect(err).NotTo(gomega.HaveOccurred(), "BREAK: alice's hub request is gone")
		g.Expect(h.UID).To(gomega.Equal(hubAlice.UID), "BREAK: the agent deleted alice's hub request for bob's (it was re-created)")
	}).WithTimeout(10 * time.Second).Should(gomega.Succeed())
	g.Expect(get(g, r.spokeView, ns, collide).Status.Conditions).To(gomega.ContainElement(gomega.HaveField("Reason", spoke.ReasonHubNameTaken)),
		"bob's request says its hub name is taken")
	// Bob deletes his request: the agent deletes the hub request made for it, none, not alice's.
	g.Expect(r.bob.Delete(ctx, get(g, r.spokeView, ns, collide))).To(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) {
		var h locksv1.LockRequest
		g.Expect(r.hubAdmin.Get(ctx, types.NamespacedName{Namespace: ns, Name: hubName}, &h)).To(gomega.Succeed(), "BREAK: bob's deletion deleted alice's hub request")
		g.Expect(h.UID).To(gomega.Equal(hubAlice.UID))
	}).WithTimeout(5 * time.Second).Should(gomega.Succeed())
	g.Expect(lost()).To(gomega.BeEmpty(), "BREAK: alice's spoke request lost its grant")
	g.Expect(get(g, r.spokeView, ns, long).Status.FencingToken).To(gomega.Equal(a.Status.FencingToken))
}

// Attack 5, a hub requester: before the spoke first uses her namespace on the hub, mallory
// creates the Lease the agent will need there, spoke-<cluster> (a requester may create Leases:
// runners' holder Leases). The spoke's users of that namespace must still be served.
func (f *installed) attackLeaseSquat(t *testing.T, labelled bool) {
	ns := fmt.Sprintf("attack-lease-%v", labelled)
	r := f.room(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: spoke.LeaseName(attackCluster)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("mallory"), LeaseDurationSeconds: ptr.To[int32](3600)}}
	if labelled {
		lease.Labels = map[string]string{workdir.LabelRole: spoke.RoleSpoke}
	}
	g.Expect(r.malloryHub.Create(ctx, lease)).To(gomega.MatchError(gomega.ContainSubstring("ValidatingAdmissionPolicy 'turnstile-fleet-reserved'")),
		"a hub requester creates the spoke's hub Lease (labelled %v)", labelled)

	f.startAgent(t)
	g.Expect(r.alice.Create(ctx, lockOn(ns, "alice-apply", "vpc"))).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		lr := get(g, r.spokeView, ns, "alice-apply")
		c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionStalled)
		if c != nil && c.Reason == spoke.ReasonFleetRefused {
			g.Expect(c.Message).To(gomega.BeEmpty(), "BREAK: mallory's Lease (labelled %v) keeps the spoke from the namespace", labelled)
		}
		g.Expect(lr.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
	}).WithTimeout(60 * time.Second).Should(gomega.Succeed())
}

// Attack 6, a spoke's namespace admin (turnstile-admin there, as the built-in admin role
// aggregates it): dana may bypass freezes and ask for any priority in the spoke, which are the
// spoke's to give, not the hub's. The agent, acting on the hub as the spoke (which has neither
// bypassfreeze nor prioritize there: config/fleet), must not carry them to the hub: the hub
// refuses the mirror, and the spoke request says so (FleetRefused) rather than wait.
func (f *installed) attackSpokeAdmin(t *testing.T) {
	const ns = "attack-admin"
	r := f.room(t, ns)
	bindIn(t, f.spk, ns, "turnstile-admin", user("dana"))
	dana := f.as(t, f.spk, "dana")
	g := gomega.NewWithT(t)
	ctx := context.Background()
	f.startAgent(t)

	bypass := lockOn(ns, "dana-bypass", "vpc")
	bypass.Spec.BypassFreeze = &locksv1.FreezeBypass{Reason: "hotfix"}
	critical := lockOn(ns, "dana-critical", "dns")
	critical.Spec.Priority = locksv1.PriorityCritical
	for _, lr := range []*locksv1.LockRequest{bypass, critical} {
		g.Expect(dana.Create(ctx, lr)).To(gomega.Succeed(), "the spoke's admin may (%s)", lr.Name)
	}
	for name, words := range map[string]string{"dana-bypass": "bypassfreeze permission", "dana-critical": "prioritize permission"} {
		g.Eventually(func(g gomega.Gomega) {
			lr := get(g, r.spokeView, ns, name)
			c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionStalled)
			g.Expect(c).NotTo(gomega.BeNil())
			g.Expect(c.Reason).To(gomega.Equal(spoke.ReasonFleetRefused))
			g.Expect(c.Message).To(gomega.ContainSubstring(words))
			g.Expect(lr.Status.Phase).To(gomega.Equal(locksv1.PhasePending))
		}).WithTimeout(60*time.Second).Should(gomega.Succeed(), name)
		var h locksv1.LockRequest
		err := r.hubAdmin.Get(ctx, types.NamespacedName{Namespace: ns, Name: spoke.HubName(attackCluster, name)}, &h)
		g.Expect(err).To(gomega.HaveOccurred(), "%s reached the hub", name)
	}
}

// Attack 7, a spoke's namespace admin again: dana's request is granted (ttl 20s); then she raises
// its priority to Critical, which the spoke lets her do and the hub refuses the spoke (no
// prioritize there). The hub's grant then ends (its ttl). Her spoke request must follow the
// hub: a holder whose hub grant has ended must not keep running in the spoke.
func (f *installed) attackRefusedEdit(t *testing.T) {
	const ns = "attack-edit"
	r := f.room(t, ns)
	bindIn(t, f.spk, ns, "turnstile-admin", user("dana"))
	dana := f.as(t, f.spk, "dana")
	g := gomega.NewWithT(t)
	ctx := context.Background()
	f.startAgent(t)

	lr := lockOn(ns, "dana-apply", "vpc")
	lr.Spec.TTL = &metav1.Duration{Duration: 20 * time.Second}
	g.Expect(dana.Create(ctx, lr)).To(gomega.Succeed())
	cur := granted(t, r.spokeView, ns, "dana-apply")
	g.Expect(dana.Patch(ctx, cur, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"priority":"Critical"}}`)))).To(gomega.Succeed())
	hubName := spoke.HubName(attackCluster, "dana-apply")
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(get(g, r.hubAdmin, ns, hubName).Status.Phase.IsFinal()).To(gomega.BeTrue())
	}).WithTimeout(90 * time.Second).Should(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(get(g, r.spokeView, ns, "dana-apply").Status.Phase).NotTo(gomega.Equal(locksv1.PhaseGranted),
			"BREAK: the hub's grant has ended (%s) and the spoke request still shows it", get(g, r.hubAdmin, ns, hubName).Status.Phase)
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	c := meta.FindStatusCondition(get(g, r.spokeView, ns, "dana-apply").Status.Conditions, locksv1.ConditionStalled)
	g.Expect(c).NotTo(gomega.BeNil())
	g.Expect(c.Reason).To(gomega.Equal(spoke.ReasonFleetRefused))
	g.Expect(c.Message).To(gomega.ContainSubstring("the hub refused this request's change (generation 2)"))
	g.Expect(c.Message).To(gomega.ContainSubstring("prioritize permission"))
}

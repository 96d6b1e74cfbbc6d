package hub_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/cache"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/fleet/hub"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// TestAttack2DelegatesRequestCountsAsKeepRunning (issue 45, second review; a hub user through
// the shipped roles): atlantis, a turnstile-delegate in a fleet namespace of the hub (a bot that
// takes locks for others), makes a request for a holder in cluster eu-west-1
// (spec.holder.cluster: the hub's turnstile-fleet-hub-users lets a delegate), as any delegate's
// request, with no holder Lease and without the keep-running opt-out. The hub gives it an end
// (the default ttl): it is no keep-running grant (queue.NoExpiry needs the annotation). The
// fleet view counts it as one all the same (hub.KeepsRunning reads only "a cluster and no
// Lease"): the Spoke's keepRunning, the gauge turnstile_fleet_spoke_keep_running, kubectl
// turnstile fleet's "held while cut off, keep-running" and, once the spoke is silent for 10
// minutes, the TurnstileKeepRunningHeldByLostSpoke alert, whose description tells an admin to
// release it by hand, say a spoke holds a lock past any partition that it does not hold.
func TestAttack2DelegatesRequestCountsAsKeepRunning(t *testing.T) {
	const ns, cluster = "attack2-delegate", "eu-west-1"
	e, err := framework.Start("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop() })
	bg := context.Background()
	g := gomega.NewWithT(t)
	dir := t.TempDir()
	admin := filepath.Join(dir, "hub.kubeconfig")
	if err := e.WriteKubeconfig(admin); err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) {
		t.Helper()
		out, err := exec.Command(e.Kubectl(), append([]string{"--kubeconfig", admin}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	b, err := framework.BundleFor(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "--server-side", "-k", b.Dir)
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "--server-side", "-k", filepath.Join(root, "config", "fleet"))
	kubectl("-n", hub.Namespace, "patch", "configmap", hub.MembersConfigMap, "--type=merge", "-p", `{"data":{"`+cluster+`":"{}"}}`)
	g.Expect(e.Client.Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(gomega.Succeed())
	kubectl("-n", ns, "create", "rolebinding", "atlantis", "--clusterrole=turnstile-delegate", "--user=atlantis")

	// The hub's manager as cmd/manager runs it on a hub: the lock controllers and the fleet view.
	cfg := rest.CopyConfig(e.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	copts := cache.Options()
	copts.ByObject = map[client.Object]ctrlcache.ByObject{hub.CacheObject(): hub.CacheOptions()}
	// A manager of its own beside the package's (start): controller names repeat in one process.
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: framework.Scheme, Cache: copts, NewCache: cache.New,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(bg)
	if err := controller.Setup(mctx, mgr, controller.SetupOptions{Queue: queue.DefaultConfig()}); err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := hub.NewSpokeReconciler(mgr.GetClient()).SetupWithManager(mctx, mgr); err != nil {
		cancel()
		t.Fatal(err)
	}
	m, err := framework.Run(mctx, cancel, mgr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop() })

	acfg := rest.CopyConfig(e.Config)
	acfg.Impersonate = rest.ImpersonationConfig{UserName: "atlantis"}
	ac, err := client.NewWithWatch(acfg, client.Options{Scheme: framework.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var atlantis client.WithWatch
	if b.Mutating == "" {
		atlantis = framework.FillAsUser(ac, "atlantis")
	} else {
		atlantis = ac
	}
	lr := &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plan-pr-100"},
		Spec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{{Repo: "acme/infra", Path: "vpc", Workspace: "default"}},
			Holder: locksv1.Holder{Owner: "alice", Cluster: cluster}}}
	g.Eventually(func() error { return atlantis.Create(bg, lr.DeepCopy()) }).WithTimeout(60*time.Second).WithPolling(500*time.Millisecond).
		Should(gomega.Succeed(), "a delegate makes a request for a holder in a member cluster")
	g.Eventually(func(g gomega.Gomega) {
		var h locksv1.LockRequest
		g.Expect(e.Client.Get(bg, client.ObjectKeyFromObject(lr), &h)).To(gomega.Succeed())
		g.Expect(h.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
		g.Expect(h.Status.ExpiresAt).NotTo(gomega.BeNil(), "it is no keep-running grant: it ends")
		g.Expect(queue.NoExpiry(&h)).To(gomega.BeFalse())
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())

	g.Eventually(func(g gomega.Gomega) {
		var sp locksv1.Spoke
		g.Expect(e.Client.Get(bg, types.NamespacedName{Name: cluster}, &sp)).To(gomega.Succeed())
		g.Expect(sp.Status.Holders).To(gomega.BeEquivalentTo(1), "the fleet view has counted it")
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
	var sp locksv1.Spoke
	g.Expect(e.Client.Get(bg, types.NamespacedName{Name: cluster}, &sp)).To(gomega.Succeed())
	g.Expect(sp.Status.KeepRunning).To(gomega.BeZero(),
		"BREAK: the fleet view counts a delegate's grant that ends (no keep-running annotation, expiresAt set) as a keep-running grant of spoke %s", cluster)
}

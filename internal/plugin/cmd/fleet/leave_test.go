package fleet

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/fleet/members"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/whoami"
)

// TestLeaveWithAKeepRunningGrant (issue 45, second review): a keep-running grant (the opt-out,
// fleet.turnstile.dev/on-partition: keep-running) names no hub Lease and has no end
// (queue.NoExpiry), so it never passes on by itself; once its cluster has left the fleet nobody
// there can release it (the members policy refuses its writes, its ServiceAccount is gone), and
// the hub's manager deletes its Spoke, so its keepRunning count and the
// TurnstileKeepRunningHeldByLostSpoke alert are gone with it. The review found leave doing
// exactly that and promising the locks pass on. So leave refuses, changing nothing, while the
// cluster holds one, and --release-keep-running (its workloads are stopped) releases it: bob,
// a hub requester waiting on the key, gets it. The hub is installed as the docs say (the
// admission bundle and config/fleet), the spoke is the kubeconfig join wrote, writing as its
// agent does.
func TestLeaveWithAKeepRunningGrant(t *testing.T) {
	const ns, cluster = "team-leave", "eu-west-1"
	env, err := framework.Start("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	g := gomega.NewWithT(t)
	dir := t.TempDir()
	admin := filepath.Join(dir, "hub.kubeconfig")
	if err := env.WriteKubeconfig(admin); err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) {
		t.Helper()
		out, err := exec.Command(env.Kubectl(), append([]string{"--kubeconfig", admin}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	b, err := framework.BundleFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "--server-side", "-k", b.Dir)
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "--server-side", "-k", filepath.Join(root, "config", "fleet"))
	kubectl("create", "namespace", ns)
	kubectl("-n", ns, "create", "rolebinding", "turnstile-fleet-spoke", "--clusterrole=turnstile-fleet-spoke", "--group=system:serviceaccounts:turnstile-fleet")
	kubectl("-n", ns, "create", "rolebinding", "bob", "--clusterrole=turnstile-requester", "--user=bob")
	mgr, err := env.StartManager(controller.SetupOptions{Queue: queue.DefaultConfig()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Stop() })

	path := filepath.Join(dir, cluster+".kubeconfig")
	if _, stderr, err := plugin(ctx, admin, "join", cluster, "-o", path); err != nil {
		t.Fatalf("join: %v\n%s", err, stderr)
	}
	kc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sp := asSpoke(t, kc)

	// The agent's hub request for a spoke request that opted out (its spoke user had the
	// keeprunning permission there): no hub Lease, the annotation.
	inSpoke := &locksv1.LockRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "job-migrate", UID: "0b5e7a3e-0000-4000-8000-000000000002", Generation: 1,
			Annotations: map[string]string{locksv1.AnnotationOnPartition: locksv1.OnPartitionKeepRunning}},
		Spec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{{Repo: "acme/infra", Path: "db", Workspace: "default"}}, Holder: locksv1.Holder{Owner: "alice"}},
	}
	hubReq := spoke.HubRequest(cluster, inSpoke)
	g.Expect(hubReq.Spec.Holder.Lease).To(gomega.BeEmpty(), "a keep-running hub request names no Lease")
	hubReq.Annotations[whoami.AnnotationCreatedBy] = "system:serviceaccount:" + spoke.FleetNamespace + ":" + spoke.LeaseName(cluster)
	g.Eventually(func() error { return sp.Create(ctx, hubReq.DeepCopy()) }).WithTimeout(60*time.Second).WithPolling(500*time.Millisecond).
		Should(gomega.Succeed(), "the hub accepts the spoke's keep-running request")
	g.Eventually(func(g gomega.Gomega) {
		var h locksv1.LockRequest
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(hubReq), &h)).To(gomega.Succeed())
		g.Expect(h.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
		g.Expect(h.Status.ExpiresAt).To(gomega.BeNil(), "a keep-running grant has no end")
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())

	// bob, a hub requester, waits on the key.
	bobCfg := rest.CopyConfig(env.Config)
	bobCfg.Impersonate = rest.ImpersonationConfig{UserName: "bob"}
	bc, err := client.NewWithWatch(bobCfg, client.Options{Scheme: framework.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var bob client.WithWatch
	if b.Mutating == "" {
		bob = framework.FillAsUser(bc, "bob")
	} else {
		bob = bc
	}
	bobReq := &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bob-migrate"},
		Spec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{{Repo: "acme/infra", Path: "db", Workspace: "default"}}}}
	g.Eventually(func() error { return bob.Create(ctx, bobReq.DeepCopy()) }).WithTimeout(60 * time.Second).WithPolling(500 * time.Millisecond).Should(gomega.Succeed())

	// Refused, nothing changed: the cluster is still a member and its request still granted.
	_, stderr, err := plugin(ctx, admin, "leave", cluster)
	if err == nil || !strings.Contains(err.Error(), "cluster eu-west-1 holds 1 keep-running grant(s) on the hub ("+ns+"/"+hubReq.Name+")") ||
		!strings.Contains(err.Error(), "--release-keep-running") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("leave with a keep-running grant: %v (stderr %q), want its refusal", err, stderr)
	}
	var cm corev1.ConfigMap
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: members.Namespace, Name: members.ConfigMap}, &cm)).To(gomega.Succeed())
	g.Expect(cm.Data).To(gomega.HaveKey(cluster), "a refused leave changes nothing")

	// With --release-keep-running: the grant is released and bob gets the key.
	_, stderr, err = plugin(ctx, admin, "leave", cluster, "--release-keep-running")
	if err != nil {
		t.Fatalf("leave --release-keep-running: %v\n%s", err, stderr)
	}
	t.Log(stderr)
	g.Expect(stderr).To(gomega.ContainSubstring("lockrequest " + ns + "/" + hubReq.Name + " released: a keep-running request of eu-west-1 (granted)"))
	g.Eventually(func(g gomega.Gomega) {
		var h locksv1.LockRequest
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(bobReq), &h)).To(gomega.Succeed())
		g.Expect(h.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted), "the key passes on once leave released the keep-running grant: %s", h.Status.BlockedBy)
	}).WithTimeout(30 * time.Second).WithPolling(500 * time.Millisecond).Should(gomega.Succeed())
}

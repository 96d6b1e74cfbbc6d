package release

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/onsi/gomega/format"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/crddiff"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/releasebuild"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
	"github.com/turnstile-dev/turnstile/internal/workload"
)

// TestCRDsKeepEveryServedVersion compares the previous release's CRDs with this one's, schema
// by schema (internal/testing/crddiff): an upgrade must not remove a field, change a default
// or tighten a validation that objects stored by the previous release passed. What a downgrade
// would undo (fields added since, which the older CRD prunes) is logged: docs/install.md says
// how downgrades treat them.
func TestCRDsKeepEveryServedVersion(t *testing.T) {
	prev, next := crds(t, previousRelease(t)), crds(t, headRelease(t))
	for name, old := range prev {
		cur, ok := next[name]
		if !ok {
			t.Errorf("CRD %s of the previous release is gone", name)
			continue
		}
		for _, c := range crddiff.Compare(old, cur) {
			t.Errorf("upgrade breaks %s: %s", name, c)
		}
		for _, c := range crddiff.Compare(cur, old) {
			t.Logf("a downgrade to the previous release would change %s: %s", name, c)
		}
	}
	t.Logf("compared %d CRDs field by field", len(prev))
}

// crds are a release's CRDs, from its install bundle.
func crds(t *testing.T, r releasebuild.Release) map[string]*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	objs, err := framework.ParseManifests(readFile(t, r.Bundle()))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, o := range objs {
		if o.Kind() != "CustomResourceDefinition" {
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(o, crd); err != nil {
			t.Fatal(err)
		}
		out[crd.Name] = crd
	}
	// ProjectLock, CommandLock and LockRequest since the first release; Spoke since the fleet's.
	for _, name := range []string{"projectlocks.locks.turnstile.dev", "commandlocks.locks.turnstile.dev", "lockrequests.locks.turnstile.dev"} {
		if out[name] == nil {
			t.Fatalf("%s has no CRD %s (it has %d)", r.Bundle(), name, len(out))
		}
	}
	return out
}

// TestUpgradeWithLocksHeld installs the previous release with helm, runs its manager (from its
// image) as the chart's two replicas, takes locks of every kind, upgrades to this release as
// a rollout does (helm upgrade, then each replica replaced by a new one that is a member before
// the old one stops), and checks that nothing held, queued or frozen changed, that no key was
// held twice and no token went down at any moment, and that the queues then go on in order
// with rising tokens under the new manager.
func TestUpgradeWithLocksHeld(t *testing.T) {
	upgradeWithLocksHeld(t, previousRelease(t), headRelease(t), true)
}

// TestDowngradeIsRefused goes the other way, from this release back to the previous one, with
// locks held: the previous release's manager cannot keep this one's state (it takes a gated
// Job's stamped request for the leftover of an earlier Job of that name and deletes it while
// the Job runs, so the Job's lock goes to the next waiter), so the compatibility floor
// (config/compatibility) refuses it. helm upgrade to the previous chart fails with the reason;
// the CRDs and the Deployment stay this release's; helm upgrade with this release's chart
// restores what the failed upgrade did change (its admission policies); and nothing held, queued or frozen moved, and the
// queues go on under this release's managers. docs/install.md, "Downgrades", says the same.
func TestDowngradeIsRefused(t *testing.T) {
	g := gomega.NewWithT(t)
	format.MaxLength = 0
	g.SetDefaultEventuallyTimeout(settle)
	g.SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	from, to := headRelease(t), previousRelease(t)
	bin := managerOf(t, from)
	c := startCluster(t)
	c.helm("install", "turnstile", from.Chart(), "-n", systemNS)
	c.waitInstalled(g)
	a, b := c.startManager(bin, "turnstile-a-"+from.Version), c.startManager(bin, "turnstile-b-"+from.Version)
	c.waitMembers(g, a, b)
	w := c.watch(t)
	s := c.takeLocks(g)
	before := c.snapshot(g)
	installed := c.installedState()

	t.Logf("downgrading to %s: helm upgrade with its chart", to.Version)
	out, err := c.helmErr("upgrade", "turnstile", to.Chart(), "-n", systemNS)
	if err == nil {
		t.Fatalf("helm upgrade to %s went through:\n%s", to.Version, out)
	}
	for _, want := range []string{
		"Turnstile refuses this downgrade: customresourcedefinitions lockrequests.locks.turnstile.dev was written by a Turnstile release of compatibility level 2, and this one has none",
		"Turnstile refuses this downgrade: deployments turnstile-controller-manager",
		`docs/install.md, "Downgrades"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("helm upgrade to %s failed without saying %q:\n%v", to.Version, want, err)
		}
	}
	g.Expect(c.installedState()).To(gomega.Equal(installed), "the CRDs and the Deployment after the refused downgrade")

	// helm rollback cannot: its patch is computed from the failed revision's manifest, which
	// lacks this release's new objects. helm upgrade computes it from the last deployed one.
	t.Logf("helm upgrade with %s's chart again", from.Version)
	c.helm("upgrade", "turnstile", from.Chart(), "-n", systemNS)
	c.waitInstalled(g)
	g.Expect(c.installedState()).To(gomega.Equal(installed), "the CRDs and the Deployment after the upgrade again")
	g.Consistently(func() string { return c.snapshot(g) }).WithTimeout(3*time.Second).WithPolling(250*time.Millisecond).
		Should(gomega.Equal(before), "the locks' state after the refused downgrade")
	s.goOn(t, g, c)
	w.check(t, s.released)
	for _, m := range []*managerProc{a, b} {
		if lines := m.p.ForbiddenLines(); len(lines) > 0 {
			t.Errorf("%s was forbidden something:\n%s", m.name, strings.Join(lines, "\n"))
		}
	}
}

// installedState is what a downgrade must not change: each CRD's schema and labels, and the
// Deployment's labels and pod template.
func (c *cluster) installedState() string {
	c.t.Helper()
	return c.kubectl("get", "crd/lockrequests.locks.turnstile.dev", "crd/projectlocks.locks.turnstile.dev", "crd/commandlocks.locks.turnstile.dev",
		"-o", "jsonpath={range .items[*]}{.metadata.name} {.metadata.labels} {.spec.versions}{\"\\n\"}{end}") +
		c.kubectl("-n", systemNS, "get", "deployment", "-l", "app.kubernetes.io/part-of=turnstile",
			"-o", "jsonpath={range .items[*]}{.metadata.name} {.metadata.labels} {.spec.template}{\"\\n\"}{end}")
}

const (
	systemNS = "turnstile-system"
	teamNS   = "team"
	settle   = 60 * time.Second
)

func upgradeWithLocksHeld(t *testing.T, from, to releasebuild.Release, toLogsVersion bool) {
	g := gomega.NewWithT(t)
	format.MaxLength = 0 // a changed state is printed whole: which lock, which token
	g.SetDefaultEventuallyTimeout(settle)
	g.SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	fromBin, toBin := managerOf(t, from), managerOf(t, to)
	c := startCluster(t)

	t.Logf("installing %s with helm", from.Version)
	c.helm("install", "turnstile", from.Chart(), "-n", systemNS)
	c.waitInstalled(g)
	a, b := c.startManager(fromBin, "turnstile-a-"+from.Version), c.startManager(fromBin, "turnstile-b-"+from.Version)
	c.waitMembers(g, a, b)

	w := c.watch(t)
	s := c.takeLocks(g)
	before := c.snapshot(g)
	t.Logf("state held by %s:\n%s", from.Version, before)

	start := time.Now()
	t.Logf("upgrading to %s: helm upgrade, then a rollout (maxSurge 1, maxUnavailable 0)", to.Version)
	c.helm("upgrade", "turnstile", to.Chart(), "-n", systemNS)
	c.waitInstalled(g)
	a2 := c.startManager(toBin, "turnstile-a-"+to.Version)
	c.waitMembers(g, a, b, a2)
	g.Expect(a.stop()).To(gomega.Succeed(), "%s stops cleanly", a.name)
	b2 := c.startManager(toBin, "turnstile-b-"+to.Version)
	c.waitMembers(g, b, a2, b2)
	g.Expect(b.stop()).To(gomega.Succeed(), "%s stops cleanly", b.name)
	c.waitMembers(g, a2, b2)
	t.Logf("rollout to %s done in %s", to.Version, time.Since(start).Round(time.Millisecond))
	for _, m := range []*managerProc{a2, b2} {
		if !toLogsVersion {
			break
		}
		g.Eventually(m.p.Log).Should(gomega.ContainSubstring(`"version":"`+to.Version+`"`), "%s runs %s", m.name, to.Version)
	}

	// Nothing held, queued or frozen changed, and it stays so under the new managers.
	g.Consistently(func() string { return c.snapshot(g) }).WithTimeout(3*time.Second).WithPolling(250*time.Millisecond).
		Should(gomega.Equal(before), "the locks' state after the upgrade")
	s.goOn(t, g, c)
	w.check(t, s.released)
	for _, m := range []*managerProc{a, b, a2, b2} {
		if lines := m.p.ForbiddenLines(); len(lines) > 0 {
			t.Errorf("%s was forbidden something:\n%s", m.name, strings.Join(lines, "\n"))
		}
	}
}

// managerOf is the release's manager for this machine, from its image's layers.
func managerOf(t *testing.T, r releasebuild.Release) string {
	t.Helper()
	return filepath.Join(openImage(t, r, runtime.GOARCH).root, "manager")
}

// cluster is a fresh control plane, and the helm release installed in it.
type cluster struct {
	t          *testing.T
	env        *framework.Env
	dir        string
	kubeconfig string
	ctx        context.Context
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	env, err := framework.StartBare("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c := &cluster{t: t, env: env, dir: t.TempDir(), ctx: context.Background()}
	c.kubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	if err := env.WriteKubeconfig(c.kubeconfig); err != nil {
		t.Fatal(err)
	}
	c.kubectl("create", "namespace", systemNS)
	c.kubectl("label", "namespace", systemNS, "pod-security.kubernetes.io/enforce=restricted")
	c.kubectl("create", "namespace", teamNS)
	return c
}

func (c *cluster) kubectl(args ...string) string {
	c.t.Helper()
	cmd := exec.Command(kubectl(c.t), append([]string{"--kubeconfig", c.kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (c *cluster) helm(args ...string) string {
	c.t.Helper()
	out, err := c.helmErr(args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

func (c *cluster) helmErr(args ...string) (string, error) {
	return runErr(root, []string{"HELM_CACHE_HOME=" + c.dir + "/helm", "HELM_CONFIG_HOME=" + c.dir + "/helm", "HELM_DATA_HOME=" + c.dir + "/helm"},
		helm(c.t), append(args, "--kubeconfig", c.kubeconfig)...)
}

// waitInstalled waits until the CRDs serve and a LockRequest passes admission (the policies'
// dispatcher learns a new kind from discovery a moment after the CRD is Established).
func (c *cluster) waitInstalled(g *gomega.WithT) {
	c.kubectl("wait", "--for=condition=Established", "--timeout=60s",
		"crd/lockrequests.locks.turnstile.dev", "crd/projectlocks.locks.turnstile.dev", "crd/commandlocks.locks.turnstile.dev")
	sample := filepath.Join(root, "config", "samples", "locks_v1alpha1_lockrequest.yaml")
	g.Eventually(func() error {
		_, err := runErr(root, nil, kubectl(c.t), "--kubeconfig", c.kubeconfig, "-n", teamNS, "create", "--dry-run=server", "-f", sample)
		return err
	}).Should(gomega.Succeed())
}

// managerProc is one replica: the release's manager binary with the args and env that the
// installed Deployment gives it, as its ServiceAccount.
type managerProc struct {
	name string
	p    *framework.Process
}

func (m *managerProc) stop() error { return m.p.Stop(10 * time.Second) }

// startManager runs binary as pod name of the installed Deployment (helm get manifest): its
// args with the listen addresses moved to free loopback ports, its env resolved for the pod,
// and a token of its ServiceAccount only.
func (c *cluster) startManager(binary, name string) *managerProc {
	c.t.Helper()
	objs, err := framework.ParseManifests(c.helm("get", "manifest", "turnstile", "-n", systemNS))
	if err != nil {
		c.t.Fatal(err)
	}
	var ctr corev1.Container
	var sa string
	for _, o := range objs {
		if o.Kind() == "Deployment" {
			spec := o.Path("spec", "template", "spec").(map[string]any)
			sa = spec["serviceAccountName"].(string)
			if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(spec["containers"].([]any)[0].(map[string]any), &ctr); err != nil {
				c.t.Fatal(err)
			}
		}
	}
	kubeconfig, err := c.env.WriteServiceAccountKubeconfig(c.ctx, c.dir, systemNS, sa)
	if err != nil {
		c.t.Fatal(err)
	}
	env, err := framework.ContainerEnv(ctr, systemNS, name)
	if err != nil {
		c.t.Fatal(err)
	}
	metricsAddr, err := framework.FreeLoopbackAddr()
	if err != nil {
		c.t.Fatal(err)
	}
	probeAddr, err := framework.FreeLoopbackAddr()
	if err != nil {
		c.t.Fatal(err)
	}
	args := framework.OutsideClusterArgs(ctr.Args, metricsAddr, probeAddr)
	p, err := framework.StartProcessLogFileEnv(binary, kubeconfig, filepath.Join(c.dir, name+".log"), env, args...)
	if err != nil {
		c.t.Fatal(err)
	}
	m := &managerProc{name: name, p: p}
	c.t.Cleanup(func() {
		_ = p.Kill()
		if c.t.Failed() {
			c.t.Logf("--- log of %s:\n%s", name, p.Log())
		}
	})
	return m
}

// waitMembers waits until exactly these replicas hold membership Leases, and each of them is
// running.
func (c *cluster) waitMembers(g *gomega.WithT, ms ...*managerProc) {
	var want []string
	for _, m := range ms {
		want = append(want, m.name)
	}
	sort.Strings(want)
	g.Eventually(func() ([]string, error) {
		for _, m := range ms {
			if err := m.p.Running(); err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
		}
		var leases metav1.PartialObjectMetadataList
		leases.SetGroupVersionKind(coordinationLeaseList)
		if err := c.env.Client.List(c.ctx, &leases, client.InNamespace(systemNS), client.MatchingLabels{"locks.turnstile.dev/role": "member"}); err != nil {
			return nil, err
		}
		// A replica's Lease is turnstile-member-<identity>, its identity the pod's name and a
		// suffix of its own process (a restarted pod is a new member).
		var names []string
		for _, l := range leases.Items {
			name := strings.TrimPrefix(l.Name, "turnstile-member-")
			if i := strings.LastIndex(name, "-"); i > 0 {
				name = name[:i]
			}
			names = append(names, name)
		}
		sort.Strings(names)
		return names, nil
	}).Should(gomega.Equal(want), "membership Leases")
}

// scenario is the locks taken before the upgrade.
type scenario struct {
	team     string
	released []string // requests this test released (the only ones that may leave Granted)
}

func (c *cluster) create(g *gomega.WithT, obj client.Object) {
	g.Expect(c.env.Client.Create(c.ctx, obj)).To(gomega.Succeed())
}

func (c *cluster) request(name string) *locksv1.LockRequest {
	lr := &locksv1.LockRequest{}
	_ = c.env.Client.Get(c.ctx, client.ObjectKey{Namespace: teamNS, Name: name}, lr)
	return lr
}

func (c *cluster) phase(name string) func() locksv1.LockRequestPhase {
	return func() locksv1.LockRequestPhase { return c.request(name).Status.Phase }
}

// waitingFor is the reason a request's Granted condition gives while it waits.
func (c *cluster) waitingFor(name string) func() string {
	return func() string {
		lr := c.request(name)
		if cond := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted); cond != nil && cond.Status == metav1.ConditionFalse {
			return string(lr.Status.Phase) + "/" + cond.Reason
		}
		return string(lr.Status.Phase)
	}
}

// takeLocks takes, in this order: an exclusive holder with two waiters queued behind it, two
// shared holders with an exclusive waiter, an apply holder granted before a freeze of apply and
// an apply request frozen by it, and two gated Jobs on one key (one running, one suspended).
func (c *cluster) takeLocks(g *gomega.WithT) *scenario {
	s := &scenario{team: teamNS}
	lock := func(name, path, owner string, pull int64) *wrappers.LockRequestWrapper {
		return wrappers.MakeLockRequest(name, teamNS).Lock("acme/infra", path, "default").Owner(owner, pull)
	}
	c.create(g, lock("h1", "upgrade/k1", "alice", 1).Obj())
	g.Eventually(c.phase("h1")).Should(gomega.Equal(locksv1.PhaseGranted))
	for i, name := range []string{"w1", "w2"} {
		c.create(g, lock(name, "upgrade/k1", []string{"bob", "carol"}[i], int64(2+i)).Obj())
		g.Eventually(c.waitingFor(name)).Should(gomega.Equal("Pending/" + locksv1.ReasonQueued))
	}
	c.create(g, lock("s1", "upgrade/k2", "dave", 4).Shared().Obj())
	c.create(g, lock("s2", "upgrade/k2", "erin", 5).Shared().Obj())
	g.Eventually(c.phase("s1")).Should(gomega.Equal(locksv1.PhaseGranted))
	g.Eventually(c.phase("s2")).Should(gomega.Equal(locksv1.PhaseGranted))
	c.create(g, lock("x1", "upgrade/k2", "frank", 6).Obj())
	g.Eventually(c.waitingFor("x1")).Should(gomega.Equal("Pending/" + locksv1.ReasonQueued))

	c.create(g, lock("g1", "upgrade/k4", "gina", 7).Command("apply").Obj())
	g.Eventually(c.phase("g1")).Should(gomega.Equal(locksv1.PhaseGranted))
	c.create(g, wrappers.MakeCommandLock("apply").Locked("upgrade window").Obj())
	c.create(g, lock("f1", "upgrade/k3", "hank", 8).Command("apply").Obj())
	g.Eventually(c.waitingFor("f1")).Should(gomega.Equal("Pending/" + locksv1.ReasonCommandLocked))

	for _, name := range []string{"j1", "j2"} {
		c.create(g, gatedJob(name))
		g.Eventually(c.phase(workload.RequestName("job", name))).ShouldNot(gomega.BeEmpty())
		if name == "j1" {
			g.Eventually(c.jobRunning(name)).Should(gomega.BeTrue(), "the first gated Job runs")
		}
	}
	g.Eventually(c.waitingFor(workload.RequestName("job", "j2"))).Should(gomega.Equal("Pending/" + locksv1.ReasonQueued))
	g.Expect(c.jobRunning("j2")()).To(gomega.BeFalse(), "the second gated Job stays suspended")
	return s
}

func gatedJob(name string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: name, Annotations: map[string]string{workload.AnnotationLock: "acme/infra:upgrade/jobs"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "apply", Image: "busybox", Command: []string{"sh", "-c", "echo applying"}}},
		}}},
	}
}

func (c *cluster) job(name string) *batchv1.Job {
	j := &batchv1.Job{}
	_ = c.env.Client.Get(c.ctx, client.ObjectKey{Namespace: teamNS, Name: name}, j)
	return j
}

// jobRunning: the Job is unsuspended and its Pods carry a fencing token.
func (c *cluster) jobRunning(name string) func() bool {
	return func() bool {
		j := c.job(name)
		return j.Spec.Suspend != nil && !*j.Spec.Suspend && j.Spec.Template.Annotations[workload.AnnotationFencingToken] != ""
	}
}

// snapshot is the state the upgrade must keep: every request's phase, token and reason; every lock's holders, token and queue order; every Job's suspension and token; the
// freeze.
func (c *cluster) snapshot(g *gomega.WithT) string {
	var lines []string
	var lrs locksv1.LockRequestList
	g.Expect(c.env.Client.List(c.ctx, &lrs, client.InNamespace(teamNS))).To(gomega.Succeed())
	for _, lr := range lrs.Items {
		// Not the queue position: its refresh is rate-limited, so a position may lag and be
		// refreshed by any manager; the locks' queues below give the order.
		lines = append(lines, fmt.Sprintf("request %s: token %d %s", lr.Name, lr.Status.FencingToken, c.waitingFor(lr.Name)()))
	}
	var pls locksv1.ProjectLockList
	g.Expect(c.env.Client.List(c.ctx, &pls, client.InNamespace(teamNS))).To(gomega.Succeed())
	for _, pl := range pls.Items {
		var holders, queue []string
		if pl.Status.Holder != nil {
			holders = append(holders, pl.Status.Holder.Owner)
		}
		for _, h := range pl.Status.SharedHolders {
			holders = append(holders, h.Owner)
		}
		for _, q := range pl.Status.Queue {
			queue = append(queue, q.Request)
		}
		lines = append(lines, fmt.Sprintf("lock %s/%s: holders %v token %d queue %v", pl.Spec.Repo, pl.Spec.Path, holders, pl.Status.FencingToken, queue))
	}
	for _, name := range []string{"j1", "j2"} {
		j := c.job(name)
		lines = append(lines, fmt.Sprintf("job %s: suspended %v token %q", name, *j.Spec.Suspend, j.Spec.Template.Annotations[workload.AnnotationFencingToken]))
	}
	cl := &locksv1.CommandLock{}
	g.Expect(c.env.Client.Get(c.ctx, client.ObjectKey{Name: "apply"}, cl)).To(gomega.Succeed())
	lines = append(lines, fmt.Sprintf("commandlock apply: locked %v reason %q", cl.Spec.Locked, cl.Spec.Reason))
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// goOn drives every queue forward under the new managers: each release hands the lock to the
// next waiter in its order with a higher token; the thaw lets the frozen request in; the first
// Job's completion lets the second run.
func (s *scenario) goOn(t *testing.T, g *gomega.WithT, c *cluster) {
	release := func(name string) {
		t.Helper()
		c.kubectl("-n", teamNS, "patch", "lockrequest", name, "--type=merge", "-p", `{"spec":{"release":true}}`)
		s.released = append(s.released, name)
		g.Eventually(c.phase(name)).Should(gomega.Equal(locksv1.PhaseReleased), "%s is released", name)
	}
	token := func(name string) int64 { return c.request(name).Status.FencingToken }
	grantedAfter := func(name string, prev int64) {
		t.Helper()
		g.Eventually(c.phase(name)).Should(gomega.Equal(locksv1.PhaseGranted), "%s is granted", name)
		g.Expect(token(name)).To(gomega.BeNumerically(">", prev), "%s's token rises above %d", name, prev)
	}
	release("h1")
	grantedAfter("w1", token("h1"))
	g.Expect(c.phase("w2")()).To(gomega.Equal(locksv1.PhasePending), "w2 waits behind w1: the order is kept")
	release("w1")
	grantedAfter("w2", token("w1"))

	release("s1")
	g.Consistently(c.phase("x1")).WithTimeout(time.Second).Should(gomega.Equal(locksv1.PhasePending), "x1 waits while s2 still shares the lock")
	release("s2")
	grantedAfter("x1", max(token("s1"), token("s2")))

	g.Expect(c.waitingFor("f1")()).To(gomega.Equal("Pending/"+locksv1.ReasonCommandLocked), "the freeze holds")
	g.Expect(c.phase("g1")()).To(gomega.Equal(locksv1.PhaseGranted), "an apply granted before the freeze keeps its grant")
	c.kubectl("patch", "commandlock", "apply", "--type=merge", "-p", `{"spec":{"locked":false}}`)
	g.Eventually(c.phase("f1")).Should(gomega.Equal(locksv1.PhaseGranted), "the thaw lets the frozen apply in")

	j1 := workload.RequestName("job", "j1")
	before := token(j1)
	c.completeJob(g, "j1")
	s.released = append(s.released, j1)
	g.Eventually(c.phase(j1)).Should(gomega.Equal(locksv1.PhaseReleased), "the completed Job's lock is released")
	g.Eventually(c.jobRunning("j2")).Should(gomega.BeTrue(), "the second Job runs")
	g.Expect(token(workload.RequestName("job", "j2"))).To(gomega.BeNumerically(">", before))

	// A new request on the first key queues behind w2 and gets the next token.
	c.create(g, wrappers.MakeLockRequest("n1", teamNS).Lock("acme/infra", "upgrade/k1", "default").Owner("ivan", 9).Obj())
	g.Eventually(c.waitingFor("n1")).Should(gomega.Equal("Pending/" + locksv1.ReasonQueued))
	release("w2")
	grantedAfter("n1", token("w2"))
}

// completeJob writes what the Job controller would when the Job's Pod succeeds (no Job
// controller runs here).
func (c *cluster) completeJob(g *gomega.WithT, name string) {
	j := c.job(name)
	now := metav1.Now()
	j.Status.StartTime, j.Status.CompletionTime, j.Status.Succeeded = &now, &now, 1
	j.Status.Conditions = append(j.Status.Conditions,
		batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now},
		batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now})
	g.Expect(c.env.Client.Status().Update(c.ctx, j)).To(gomega.Succeed())
}

// watcher sees every change of the requests and locks from before the upgrade to the end:
// the invariant checker (no key held by two identities at once), and this test's own watch of
// tokens (a key's never goes down; a granted request's never changes) and of grants (none is
// lost: a request leaves Granted only when the test released it).
type watcher struct {
	ic     *framework.InvariantChecker
	cancel context.CancelFunc
	done   chan struct{}
	seen   []string // violations
	events int
}

func (c *cluster) watch(t *testing.T) *watcher {
	t.Helper()
	ic, err := framework.StartInvariantChecker(c.ctx, c.env.Client, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	w := &watcher{ic: ic, cancel: cancel, done: make(chan struct{})}
	lrWatch, err := c.env.Client.Watch(ctx, &locksv1.LockRequestList{})
	if err != nil {
		t.Fatal(err)
	}
	plWatch, err := c.env.Client.Watch(ctx, &locksv1.ProjectLockList{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		keyToken := map[string]int64{}
		granted := map[string]int64{}
		lrs, pls := lrWatch.ResultChan(), plWatch.ResultChan()
		for lrs != nil || pls != nil {
			select {
			case ev, ok := <-lrs:
				if !ok {
					lrs = nil
					continue
				}
				if lr, isLR := ev.Object.(*locksv1.LockRequest); isLR {
					w.events++
					w.request(lr, granted)
				}
			case ev, ok := <-pls:
				if !ok {
					pls = nil
					continue
				}
				if pl, isPL := ev.Object.(*locksv1.ProjectLock); isPL {
					w.events++
					key := pl.Spec.Repo + "/" + pl.Spec.Path + "/" + pl.Spec.Workspace
					if tok := pl.Status.FencingToken; tok != 0 && tok < keyToken[key] {
						w.seen = append(w.seen, fmt.Sprintf("lock %s: token went down from %d to %d", key, keyToken[key], tok))
					} else if tok != 0 {
						keyToken[key] = tok
					}
				}
			}
		}
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

// request checks one request event: a granted request keeps its token, and leaves Granted only
// by a release (checked against the test's own releases at the end).
func (w *watcher) request(lr *locksv1.LockRequest, granted map[string]int64) {
	name := lr.Namespace + "/" + lr.Name
	prev, wasGranted := granted[name]
	switch {
	case lr.Status.Phase == locksv1.PhaseGranted && wasGranted && lr.Status.FencingToken != prev:
		w.seen = append(w.seen, fmt.Sprintf("request %s: granted with token %d, then %d", name, prev, lr.Status.FencingToken))
	case lr.Status.Phase == locksv1.PhaseGranted:
		granted[name] = lr.Status.FencingToken
	case wasGranted:
		delete(granted, name)
		w.seen = append(w.seen, "left Granted: "+lr.Name+" "+string(lr.Status.Phase))
	}
}

func (w *watcher) stop() {
	if w.cancel == nil {
		return
	}
	w.cancel()
	<-w.done
	w.ic.Stop()
	w.cancel = nil
}

// check stops watching and fails on any violation, and on any request that left Granted
// without the test releasing it (a lost lock).
func (w *watcher) check(t *testing.T, released []string) {
	t.Helper()
	w.stop()
	for _, v := range w.ic.Violations() {
		t.Errorf("invariant: %s", v)
	}
	for _, v := range w.seen {
		if name, ok := strings.CutPrefix(v, "left Granted: "); ok {
			if slices.Contains(released, strings.Fields(name)[0]) {
				continue
			}
			v = "a lock was lost: " + name + " left Granted, and the test did not release it"
		}
		t.Error(v)
	}
	events, grants := w.ic.Stats()
	t.Logf("watched %d request events (%d grants) and %d events of this test's own watch", events, grants, w.events)
}

var coordinationLeaseList = schema.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "LeaseList"}

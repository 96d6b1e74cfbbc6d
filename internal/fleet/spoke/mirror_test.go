package spoke_test

import (
	"bytes"
	"context"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	plugincmd "github.com/turnstile-dev/turnstile/internal/plugin/cmd"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/util"
	"github.com/turnstile-dev/turnstile/internal/testing/netcut"
)

// hubLock is the hub's one ProjectLock in ns (the key the tests' requests name).
func hubLock(g gomega.Gomega, ns string) *locksv1.ProjectLock {
	var list locksv1.ProjectLockList
	g.Expect(hub.Client.List(context.Background(), &list, client.InNamespace(ns))).To(gomega.Succeed())
	g.Expect(list.Items).To(gomega.HaveLen(1))
	return &list.Items[0]
}

// expectProjectLockMirror expects the spoke's object of hub's name to be its mirror and returns it.
func (s *testSpoke) expectProjectLockMirror(g gomega.Gomega, h *locksv1.ProjectLock) {
	var m locksv1.ProjectLock
	g.Expect(s.Client.Get(context.Background(), client.ObjectKeyFromObject(h), &m)).To(gomega.Succeed())
	g.Expect(m.Labels).To(gomega.HaveKeyWithValue(locksv1.LabelMirror, locksv1.MirrorHub))
	g.Expect(m.Spec).To(gomega.Equal(h.Spec))
	g.Expect(equality.Semantic.DeepEqual(m.Status, h.Status)).To(gomega.BeTrue(), "the mirror's status is the hub's")
	g.Expect(m.Finalizers).To(gomega.BeEmpty())
}

func (s *testSpoke) commandLock(g gomega.Gomega, name string) *locksv1.CommandLock {
	var m locksv1.CommandLock
	g.Expect(s.Client.Get(context.Background(), client.ObjectKey{Name: name}, &m)).To(gomega.Succeed())
	return &m
}

// why runs kubectl turnstile why (the plugin's own command) against the spoke.
func (s *testSpoke) why(t *testing.T, ns, name string) string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "spoke.kubeconfig")
	if err := s.WriteKubeconfig(kc); err != nil {
		t.Fatal(err)
	}
	g := util.NewGlobals()
	root := plugincmd.NewCmdRoot(g)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"why", name, "-n", ns, "--kubeconfig", kc})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("why: %v\n%s", err, out.String())
	}
	return out.String()
}

// TestMirrorsShowTheHubsTruth: the hub's ProjectLocks and CommandLocks appear in the spoke as
// read-only mirrors, follow the hub, are put back when a spoke user edits or deletes them (and
// nothing of that reaches the hub), and go when the hub's go; why in the spoke explains a
// request with them.
func TestMirrorsShowTheHubsTruth(t *testing.T) {
	const ns = "team-mirror"
	t.Parallel()
	spk := fleet(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	m := spk.start(t)
	defer func() { _ = m.Stop() }()

	holder := request(ns, "alice-apply", "alice")
	g.Expect(hub.Client.Create(ctx, holder)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(get(g, hub.Client, ns, "alice-apply").Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
		spk.expectProjectLockMirror(g, hubLock(g, ns))
	}).Should(gomega.Succeed())

	// A spoke request queues behind the hub's holder: the mirror shows both, as the hub has them.
	g.Expect(spk.Client.Create(ctx, request(ns, "bob-apply", "bob"))).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		h := hubLock(g, ns)
		g.Expect(h.Status.Queue).To(gomega.HaveLen(1))
		spk.expectProjectLockMirror(g, h)
	}).Should(gomega.Succeed())

	// A spoke user strips the mirror's label and deletes it: the agent puts it back.
	h := hubLock(g, ns)
	g.Expect(spk.Client.Patch(ctx, &locksv1.ProjectLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: h.Name}},
		client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"fleet.turnstile.dev/mirror":null}}}`)))).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) { spk.expectProjectLockMirror(g, hubLock(g, ns)) }).Should(gomega.Succeed())
	g.Expect(spk.Client.Delete(ctx, &locksv1.ProjectLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: h.Name}})).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) { spk.expectProjectLockMirror(g, hubLock(g, ns)) }).Should(gomega.Succeed())

	// A hub CommandLock scoped to this cluster: mirrored, dated, without its write freeze.
	cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "deploy"},
		Spec: locksv1.CommandLockSpec{Locked: true, Reason: "EU weekend", Clusters: &locksv1.ClusterScope{Names: []string{spk.cluster}}}}
	g.Expect(hub.Client.Create(ctx, cl)).To(gomega.Succeed())
	defer func() { _ = hub.Client.Delete(ctx, cl) }()
	g.Eventually(func(g gomega.Gomega) {
		var h locksv1.CommandLock
		g.Expect(hub.Client.Get(ctx, client.ObjectKey{Name: "deploy"}, &h)).To(gomega.Succeed())
		g.Expect(h.Status.Conditions).NotTo(gomega.BeEmpty())
		mc := spk.commandLock(g, "deploy")
		g.Expect(mc.Labels).To(gomega.HaveKeyWithValue(locksv1.LabelMirror, locksv1.MirrorHub))
		g.Expect(mc.Annotations).To(gomega.HaveKeyWithValue(locksv1.AnnotationMirrorCluster, spk.cluster))
		g.Expect(mc.Annotations).To(gomega.HaveKey(locksv1.AnnotationHubSeenAt))
		g.Expect(mc.Spec).To(gomega.Equal(h.Spec))
		g.Expect(equality.Semantic.DeepEqual(mc.Status, h.Status)).To(gomega.BeTrue(), "the mirror's status is the hub's")
	}).Should(gomega.Succeed())

	// A spoke CommandLock that is no mirror, of a name the hub does not have, is the spoke
	// user's: the agent leaves it alone (it freezes nothing: nothing in a spoke decides).
	own := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "spoke-own"}}
	g.Expect(spk.Client.Create(ctx, own)).To(gomega.Succeed())
	defer func() { _ = spk.Client.Delete(ctx, own) }()
	g.Consistently(func(g gomega.Gomega) { spk.commandLock(g, "spoke-own") }).WithTimeout(3 * time.Second).Should(gomega.Succeed())

	// A spoke user thaws the mirror: the agent freezes it again, and the hub's stays frozen.
	g.Expect(spk.Client.Patch(ctx, &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "deploy"}},
		client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"locked":false}}`)))).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) { g.Expect(spk.commandLock(g, "deploy").Spec.Locked).To(gomega.BeTrue()) }).Should(gomega.Succeed())
	var hubCL locksv1.CommandLock
	g.Expect(hub.Client.Get(ctx, client.ObjectKey{Name: "deploy"}, &hubCL)).To(gomega.Succeed())
	g.Expect(hubCL.Spec.Locked).To(gomega.BeTrue())
	g.Expect(hubCL.Generation).To(gomega.Equal(int64(1)), "nothing a spoke user writes reaches the hub")

	// Why in the spoke: a deploy request is frozen by the hub's CommandLock, as last seen.
	dep := request(ns, "carol-deploy", "carol")
	dep.Spec.Locks[0].Path = "dns"
	dep.Spec.Command = "deploy"
	g.Expect(spk.Client.Create(ctx, dep)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(get(g, spk.Client, ns, "carol-deploy").Status.BlockedBy).To(gomega.Equal("commandlock/deploy"))
	}).Should(gomega.Succeed())
	out := spk.why(t, ns, "carol-deploy")
	g.Expect(out).To(gomega.ContainSubstring("commandlock/deploy freezes it (it freezes clusters " + spk.cluster + "; cluster " + spk.cluster + " is one): EU weekend"))
	g.Expect(out).To(gomega.MatchRegexp(`the hub's CommandLock, as last seen from the hub at \d{4}-\d\d-\d\dT`))
	out = spk.why(t, ns, "bob-apply")
	g.Expect(out).To(gomega.ContainSubstring("alice"), "why reads the holder from the ProjectLock mirror:\n%s", out)

	// A namespace the spoke makes after the hub's keys in it: it gets their mirrors then.
	const late = "team-mirror-late"
	g.Expect(hub.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: late}})).To(gomega.Succeed())
	g.Expect(hub.Client.Create(ctx, request(late, "dave-apply", "dave"))).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(get(g, hub.Client, late, "dave-apply").Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
	}).Should(gomega.Succeed())
	g.Expect(spk.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: late}})).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) { spk.expectProjectLockMirror(g, hubLock(g, late)) }).Should(gomega.Succeed())

	// Gone on the hub, gone in the spoke.
	g.Expect(hub.Client.Delete(ctx, cl)).To(gomega.Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(spk.Client.Get(ctx, client.ObjectKey{Name: "deploy"}, &locksv1.CommandLock{}))
	}).Should(gomega.BeTrue())
	for _, name := range []string{"alice-apply"} {
		g.Expect(hub.Client.Delete(ctx, &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(gomega.Succeed())
	}
	g.Expect(spk.Client.Delete(ctx, request(ns, "bob-apply", "bob"))).To(gomega.Succeed())
	g.Expect(spk.Client.Delete(ctx, dep)).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		var hl, sl locksv1.ProjectLockList
		g.Expect(hub.Client.List(ctx, &hl, client.InNamespace(ns))).To(gomega.Succeed())
		g.Expect(spk.Client.List(ctx, &sl, client.InNamespace(ns))).To(gomega.Succeed())
		g.Expect(sl.Items).To(gomega.HaveLen(len(hl.Items)))
		for i := range hl.Items {
			spk.expectProjectLockMirror(g, &hl.Items[i])
		}
	}).Should(gomega.Succeed())
}

// TestMirrorsStayWhileCutOff: cut off from the hub, the spoke keeps the last mirrors it saw (a
// thaw on the hub does not reach it, and a spoke user's deletion is put back from the last
// seen); once the network heals, the hub's truth arrives.
func TestMirrorsStayWhileCutOff(t *testing.T) {
	const ns = "team-mirror-cut"
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
	m := spk.startWith(t, through, skew.Settings{})
	defer func() { p.Pass(); _ = m.Stop() }()

	cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "migrate"}, Spec: locksv1.CommandLockSpec{Locked: true, Reason: "weekend"}}
	g.Expect(hub.Client.Create(ctx, cl)).To(gomega.Succeed())
	defer func() { _ = hub.Client.Delete(ctx, cl) }()
	g.Eventually(func(g gomega.Gomega) {
		mc := spk.commandLock(g, "migrate")
		g.Expect(mc.Spec.Locked).To(gomega.BeTrue())
		g.Expect(mc.Annotations).To(gomega.HaveKey(locksv1.AnnotationHubSeenAt))
	}).Should(gomega.Succeed())

	cutAt := time.Now()
	p.Cut()
	g.Expect(hub.Client.Patch(ctx, cl, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"locked":false}}`)))).To(gomega.Succeed())
	g.Expect(spk.Client.Delete(ctx, &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "migrate"}})).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		mc := spk.commandLock(g, "migrate")
		g.Expect(mc.Spec.Locked).To(gomega.BeTrue(), "the freeze as last seen")
		at := spoke.HubSeenAt(mc)
		g.Expect(at.IsZero()).To(gomega.BeFalse(), "dated when the hub was last read")
		g.Expect(at.After(cutAt)).To(gomega.BeFalse(), "dated before the cut, not when put back")
	}).Should(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) {
		g.Expect(spk.commandLock(g, "migrate").Spec.Locked).To(gomega.BeTrue())
	}).WithTimeout(3 * time.Second).Should(gomega.Succeed())

	p.Pass()
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(spk.commandLock(g, "migrate").Spec.Locked).To(gomega.BeFalse())
	}).WithTimeout(2 * time.Minute).Should(gomega.Succeed())
}

package spoke_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
)

// laggingHub is the agent's hub cache as a watch that lags shows it: while it serves a copy of
// one hub request, Reconcile reads that copy, whatever the real cache underneath has heard since.
type laggingHub struct {
	client.Reader
	mu    sync.Mutex
	key   client.ObjectKey
	stale *locksv1.LockRequest
}

func (l *laggingHub) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	l.mu.Lock()
	stale := l.stale
	l.mu.Unlock()
	if lr, ok := obj.(*locksv1.LockRequest); ok && stale != nil && key == l.key {
		stale.DeepCopyInto(lr)
		return nil
	}
	return l.Reader.Get(ctx, key, obj, opts...)
}

// serve makes the cache show lr for its key from now on; nil: the real cache again.
func (l *laggingHub) serve(lr *locksv1.LockRequest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stale = lr.DeepCopy()
}

// A hub grant is let go in the spoke only once read live from the hub: a spoke request queued
// behind the hub's holder is granted on the hub while the agent's hub cache lags; an admin ends
// that grant on the hub (force-release, or deletes the hub request) and the key passes to the
// next holder; the lagging cache then shows the old grant. The spoke request never shows
// Granted (its workload is never let go) while the cache lies, and once the cache catches up it
// ends as the hub says.
func TestGrantLetGoOnlyAsReadLiveFromTheHub(t *testing.T) {
	t.Parallel()
	t.Run("ForceReleasedOnTheHub", func(t *testing.T) {
		t.Parallel()
		letGoLive(t, "team-live-release", func(ctx context.Context, g gomega.Gomega, hubReq *locksv1.LockRequest) {
			g.Expect(hub.Client.Patch(ctx, hubReq, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"release":true}}`)))).To(gomega.Succeed())
		}, func(g gomega.Gomega, spk *testSpoke, ns string, grant *locksv1.LockRequest) {
			g.Expect(get(g, spk.Client, ns, "bob-apply").Status.Phase).To(gomega.Equal(locksv1.PhaseReleased))
		})
	})
	t.Run("DeletedOnTheHub", func(t *testing.T) {
		t.Parallel()
		letGoLive(t, "team-live-delete", func(ctx context.Context, g gomega.Gomega, hubReq *locksv1.LockRequest) {
			g.Expect(hub.Client.Delete(ctx, hubReq)).To(gomega.Succeed())
		}, func(g gomega.Gomega, spk *testSpoke, ns string, grant *locksv1.LockRequest) {
			// Asked for anew (it never held the grant in the spoke): queued behind carol.
			lr := get(g, spk.Client, ns, "bob-apply")
			g.Expect(lr.Status.Phase).To(gomega.Equal(locksv1.PhasePending))
			g.Expect(lr.Status.BlockedBy).To(gomega.ContainSubstring("carol"))
			g.Expect(get(g, hub.Client, ns, grant.Name).UID).NotTo(gomega.Equal(grant.UID))
		})
	})
}

// letGoLive runs the scenario of TestGrantLetGoOnlyAsReadLiveFromTheHub in namespace ns: end
// ends the hub's grant of bob's hub request, and after checks the spoke request once the cache
// no longer lags.
func letGoLive(t *testing.T, ns string, end func(context.Context, gomega.Gomega, *locksv1.LockRequest), after func(gomega.Gomega, *testSpoke, string, *locksv1.LockRequest)) {
	spk := fleet(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	hubName := spoke.HubName(spk.cluster, "bob-apply")
	lag := &laggingHub{key: client.ObjectKey{Namespace: ns, Name: hubName}}
	m := spk.startAgent(t, spoke.Options{Cluster: spk.cluster, Hub: rest.CopyConfig(hub.Config)}, func(a *spoke.Agent) {
		a.WrapHubCache(func(r client.Reader) client.Reader { lag.Reader = r; return lag })
	})
	defer func() { _ = m.Stop() }()

	// alice holds the key on the hub; bob (in the spoke) waits behind her, carol (on the hub)
	// behind him.
	alice := request(ns, "alice-apply", "alice")
	g.Expect(hub.Client.Create(ctx, alice)).To(gomega.Succeed())
	granted(t, hub.Client, ns, "alice-apply")
	stop := spk.neverGranted(t, ns, "bob-apply")
	g.Expect(spk.Client.Create(ctx, request(ns, "bob-apply", "bob"))).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		lr := get(g, spk.Client, ns, "bob-apply")
		g.Expect(lr.Status.Phase).To(gomega.Equal(locksv1.PhasePending))
		g.Expect(lr.Status.BlockedBy).To(gomega.ContainSubstring("alice"))
	}).Should(gomega.Succeed())
	g.Expect(hub.Client.Create(ctx, request(ns, "carol-apply", "carol"))).To(gomega.Succeed())
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(get(g, hub.Client, ns, "carol-apply").Status.QueuePosition).To(gomega.Equal(int32(2)))
	}).Should(gomega.Succeed())

	// The cache lags from here: it shows bob's hub request waiting while the hub grants it.
	lag.serve(get(g, hub.Client, ns, hubName))
	g.Expect(hub.Client.Patch(ctx, alice, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"release":true}}`)))).To(gomega.Succeed())
	var grant *locksv1.LockRequest
	g.Eventually(func(g gomega.Gomega) {
		grant = get(g, hub.Client, ns, hubName)
		g.Expect(grant.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
		g.Expect(grant.Status.FencingToken).NotTo(gomega.BeZero())
	}).Should(gomega.Succeed())

	// An admin ends that grant on the hub, and the key passes to carol.
	end(ctx, g, grant.DeepCopy())
	granted(t, hub.Client, ns, "carol-apply")

	// Only now does the lagging cache show bob's grant; a spoke user's touch wakes the agent,
	// as the watch's late event would.
	lag.serve(grant)
	poke := request(ns, "bob-apply", "bob")
	g.Expect(spk.Client.Patch(ctx, poke, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"example.com/poke":"1"}}}`)))).To(gomega.Succeed())
	g.Consistently(func(g gomega.Gomega) {
		lr := get(g, spk.Client, ns, "bob-apply")
		g.Expect(lr.Status.Phase).To(gomega.Equal(locksv1.PhasePending), "a grant the hub ended was let go from a lagging cache")
		g.Expect(lr.Status.FencingToken).To(gomega.BeZero())
	}).WithTimeout(4 * time.Second).Should(gomega.Succeed())

	// The cache catches up: the request ends as the hub says.
	lag.serve(nil)
	g.Eventually(func(g gomega.Gomega) { after(g, spk, ns, grant) }).Should(gomega.Succeed())
	g.Expect(stop()).To(gomega.BeTrue(), "the spoke request showed Granted: a grant the hub had ended was let go")
}

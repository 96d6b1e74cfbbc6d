package spoke_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
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

// A spoke's grant ended on the hub passes on only once its spoke has stopped it: a spoke
// request queued behind the hub's holder is granted on the hub while the agent's hub cache
// lags; an admin force-releases that grant on the hub; the lagging cache shows the grant, not
// its end, and the spoke lets it go. The hub keeps the key for it meanwhile: the next holder
// (carol, on the hub) is not granted while the spoke shows the grant. Once the cache catches up,
// the agent stops the holder (EndedOnHub), says so on the hub request, and only then is carol
// granted, with a token above the spoke's. A spoke that is gone (its agent stopped) passes it on
// when its hub Lease lapses.
func TestAGrantEndedOnTheHubPassesOnOnceItsSpokeStoppedIt(t *testing.T) {
	t.Parallel()
	t.Run("ReleasedOnTheHubWhileTheSpokesViewLags", func(t *testing.T) {
		t.Parallel()
		const ns = "team-ended-lag"
		spk := fleet(t, ns)
		g := gomega.NewWithT(t)
		ctx := context.Background()
		hubName := spoke.HubName(spk.cluster, "bob-apply")
		lag := &laggingHub{key: client.ObjectKey{Namespace: ns, Name: hubName}}
		m := spk.startAgent(t, spoke.Options{Cluster: spk.cluster, Hub: rest.CopyConfig(hub.Config)}, func(a *spoke.Agent) {
			a.WrapHubCache(func(r client.Reader) client.Reader { lag.Reader = r; return lag })
		})
		defer func() { _ = m.Stop() }()
		grant := bobGrantedBehindAlice(t, spk, ns, lag)

		// An admin force-releases bob's grant on the hub: carol is not granted, the key waits for
		// bob's spoke.
		g.Expect(hub.Client.Patch(ctx, grant.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"release":true}}`)))).To(gomega.Succeed())
		overlap := noOverlap(t, spk, ns)
		g.Consistently(func(g gomega.Gomega) {
			g.Expect(get(g, hub.Client, ns, "carol-apply").Status.Phase).To(gomega.Equal(locksv1.PhasePending), "the key passed on before bob's spoke stopped bob")
		}).WithTimeout(3 * time.Second).Should(gomega.Succeed())

		// The lagging view shows bob's grant, not its end: the spoke lets it go, and still the
		// key waits.
		lag.serve(grant)
		poke(t, spk, ns, "bob-apply")
		g.Eventually(func(g gomega.Gomega) {
			g.Expect(get(g, spk.Client, ns, "bob-apply").Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
		}).Should(gomega.Succeed())
		g.Consistently(func(g gomega.Gomega) {
			g.Expect(get(g, hub.Client, ns, "carol-apply").Status.Phase).To(gomega.Equal(locksv1.PhasePending), "the key passed on while bob's spoke showed bob's grant")
		}).WithTimeout(2 * time.Second).Should(gomega.Succeed())

		// The view catches up with the release, and no further (it shows the grant released, not
		// what the hub writes after): bob is stopped, the hub hears so, carol is granted after him.
		lag.serve(get(g, hub.Client, ns, hubName))
		poke(t, spk, ns, "bob-apply")
		carol := granted(t, hub.Client, ns, "carol-apply")
		bob := get(g, spk.Client, ns, "bob-apply")
		g.Expect(bob.Status.Phase).To(gomega.Equal(locksv1.PhaseReleased), "carol holds the key while bob's spoke shows %s", bob.Status.Phase)
		g.Expect(meta.FindStatusCondition(bob.Status.Conditions, locksv1.ConditionGranted).Reason).To(gomega.Equal(spoke.ReasonEndedOnHub))
		lag.serve(nil)
		g.Expect(carol.Status.FencingToken).To(gomega.BeNumerically(">", grant.Status.FencingToken))
		g.Expect(get(g, hub.Client, ns, hubName).Annotations).To(gomega.HaveKeyWithValue(locksv1.AnnotationSpokeStopped, locksv1.StoppedToken(grant.Status.FencingToken)))
		g.Expect(overlap()).To(gomega.BeEmpty(), "bob (in the spoke) and carol (on the hub) both held the key")
	})
	t.Run("TheSpokeIsGone", func(t *testing.T) {
		t.Parallel()
		const ns = "team-ended-gone"
		spk := fleet(t, ns)
		g := gomega.NewWithT(t)
		ctx := context.Background()
		lag := &laggingHub{key: client.ObjectKey{Namespace: ns, Name: spoke.HubName(spk.cluster, "bob-apply")}}
		lease := 12 * time.Second
		m := spk.startAgent(t, spoke.Options{Cluster: spk.cluster, Hub: rest.CopyConfig(hub.Config), Settings: skew.Settings{Lease: lease, Grace: time.Second, MaxSkew: 2 * time.Second}},
			func(a *spoke.Agent) {
				a.WrapHubCache(func(r client.Reader) client.Reader { lag.Reader = r; return lag })
			})
		grant := bobGrantedBehindAlice(t, spk, ns, lag)
		g.Expect(m.Stop()).To(gomega.Succeed())
		released := time.Now()
		g.Expect(hub.Client.Patch(ctx, grant.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"release":true}}`)))).To(gomega.Succeed())
		g.Consistently(func(g gomega.Gomega) {
			g.Expect(get(g, hub.Client, ns, "carol-apply").Status.Phase).To(gomega.Equal(locksv1.PhasePending))
		}).WithTimeout(3*time.Second).Should(gomega.Succeed(), "the key passed on while bob's spoke may still show bob's grant")
		granted(t, hub.Client, ns, "carol-apply")
		g.Expect(time.Since(released)).To(gomega.BeNumerically("<", lease+15*time.Second), "passed on once the spoke's hub Lease lapsed")
	})
}

// bobGrantedBehindAlice sets up the scene in ns: alice holds the key on the hub, bob (in the
// spoke) waits behind her, carol (on the hub) behind him; then, with the agent's view of bob's
// hub request held back by lag (it shows him waiting), alice releases and the hub grants bob.
// It returns bob's hub request, granted, as the hub has it.
func bobGrantedBehindAlice(t *testing.T, spk *testSpoke, ns string, lag *laggingHub) *locksv1.LockRequest {
	t.Helper()
	g := gomega.NewWithT(t)
	ctx := context.Background()
	hubName := spoke.HubName(spk.cluster, "bob-apply")
	alice := request(ns, "alice-apply", "alice")
	g.Expect(hub.Client.Create(ctx, alice)).To(gomega.Succeed())
	granted(t, hub.Client, ns, "alice-apply")
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
	lag.serve(get(g, hub.Client, ns, hubName))
	g.Expect(hub.Client.Patch(ctx, alice, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"release":true}}`)))).To(gomega.Succeed())
	var grant *locksv1.LockRequest
	g.Eventually(func(g gomega.Gomega) {
		grant = get(g, hub.Client, ns, hubName)
		g.Expect(grant.Status.Phase).To(gomega.Equal(locksv1.PhaseGranted))
		g.Expect(grant.Status.FencingToken).NotTo(gomega.BeZero())
	}).Should(gomega.Succeed())
	return grant
}

// poke touches the spoke request ns/name, as the watch's late event would wake the agent.
func poke(t *testing.T, spk *testSpoke, ns, name string) {
	t.Helper()
	p := request(ns, name, "")
	v := strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := spk.Client.Patch(context.Background(), p, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"example.com/poke":"`+v+`"}}}`))); err != nil {
		t.Fatal(err)
	}
}

// noOverlap watches bob-apply in the spoke and carol-apply on the hub in ns until stop, and
// returns the moments both showed Granted at once (each watch's latest version of each).
func noOverlap(t *testing.T, spk *testSpoke, ns string) (stop func() []string) {
	t.Helper()
	var mu sync.Mutex
	var bob, carol bool
	var both []string
	watchOne := func(c client.WithWatch, name string, held *bool) func() {
		w, err := c.Watch(context.Background(), &locksv1.LockRequestList{}, client.InNamespace(ns))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ev := range w.ResultChan() {
				lr, ok := ev.Object.(*locksv1.LockRequest)
				if !ok || lr.Name != name {
					continue
				}
				mu.Lock()
				*held = ev.Type != watch.Deleted && lr.Status.Phase == locksv1.PhaseGranted
				if bob && carol {
					both = append(both, fmt.Sprintf("%s: %s %s (token %d)", time.Now().Format(time.StampMilli), name, lr.Status.Phase, lr.Status.FencingToken))
				}
				mu.Unlock()
			}
		}()
		return func() { w.Stop(); <-done }
	}
	stopBob := watchOne(spk.Client, "bob-apply", &bob)
	stopCarol := watchOne(hub.Client, "carol-apply", &carol)
	return func() []string {
		stopBob()
		stopCarol()
		mu.Lock()
		defer mu.Unlock()
		return both
	}
}

// A hub request an older agent made (no fleet.turnstile.dev/confirms-stops: the hub hands its
// release on at once) is marked by this agent at its next look, so the hub awaits its stops from
// then on; a final one is left as it is.
func TestAnOlderAgentsHubRequestIsMarked(t *testing.T) {
	t.Parallel()
	const ns = "team-older-agent"
	spk := fleet(t, ns)
	g := gomega.NewWithT(t)
	ctx := context.Background()
	m := spk.startAgent(t, spoke.Options{Cluster: spk.cluster, Hub: rest.CopyConfig(hub.Config)}, nil)
	defer func() { _ = m.Stop() }()
	g.Expect(spk.Client.Create(ctx, request(ns, "dora-apply", "dora"))).To(gomega.Succeed())
	hubName := spoke.HubName(spk.cluster, "dora-apply")
	granted(t, hub.Client, ns, hubName)
	// As an older agent made it: without the mark.
	unmark := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, locksv1.AnnotationConfirmsStops)
	g.Expect(hub.Client.Patch(ctx, request(ns, hubName, ""), client.RawPatch(types.MergePatchType, []byte(unmark)))).To(gomega.Succeed())
	poke(t, spk, ns, "dora-apply")
	g.Eventually(func(g gomega.Gomega) {
		g.Expect(get(g, hub.Client, ns, hubName).Annotations).To(gomega.HaveKeyWithValue(locksv1.AnnotationConfirmsStops, "true"))
	}).Should(gomega.Succeed())
}

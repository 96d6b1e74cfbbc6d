// Package safety attacks Turnstile's grant protocol with managers whose caches lag behind the
// API server by amounts the test chooses (internal/testing/lag), and checks its promises against
// the store after every step: one key is never held by two identities, a key's fencing token
// never goes down, and Drained means drained. The reconcilers are the real ones, driven one
// reconcile at a time against a real kube-apiserver and etcd; only their caches are the test's.
//
// holes_test.go holds one named regression test per interleaving that broke the promise before
// (issue #12); sim_test.go is the seeded random simulation.
package safety

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/lag"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

var (
	ctx     = context.Background()
	env     *framework.Env
	k8s     client.WithWatch
	history *lag.History
)

// TestSafety runs the specs in two shards side by side, each a process with its own control plane
// and history (framework.RunSuiteInShards): the seeded simulation in one, the other specs in the
// other. TURNSTILE_TEST_SHARDS=1 runs them all in this process.
func TestSafety(t *testing.T) { framework.RunSuiteInShards(t, "Safety suite", 2) }

var _ = BeforeSuite(func() {
	// The reconcilers log through controller-runtime's logger (the simulation's membership
	// changes among them): to the spec's output, shown when a spec fails.
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter)))
	env = framework.StartEnv()
	k8s = env.Client
	var err error
	history, err = lag.Start(ctx, k8s)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(history.Stop)
})

func newNamespace() string { return framework.CreateNamespace(ctx, k8s, "safety-") }

// syncHistory waits until the recorded history holds every write made so far, so that a view
// moved to its end sees the store as it is.
func syncHistory() {
	GinkgoHelper()
	Expect(history.Sync(ctx)).To(Succeed())
}

// manager is one Turnstile manager of the attack: the real reconcilers, reading through their
// own lagging view, deciding by their own clock (real time plus a skew).
type manager struct {
	name    string
	view    *lag.View
	skew    time.Duration     // how far its clock is off
	ahead   time.Duration     // how far simulated time is ahead of real time, for every manager
	simNow  *time.Time        // when set, the simulation's clock, which replaces real time
	flags   queue.FreezeFlags // its operator flags (--disable-apply, --disable-global-apply-lock)
	clock   *clocktesting.FakeClock
	metrics *controller.Metrics
	locks   *controller.LockReconciler
	cmds    *controller.CommandLockReconciler
}

func newManager(name string, skew time.Duration, cfg queue.Config) *manager {
	m := &manager{name: name, view: lag.NewView(history, k8s), skew: skew}
	m.clock = clocktesting.NewFakeClock(time.Now().Add(skew))
	m.restart(cfg)
	return m
}

// restart replaces the reconcilers, as a new process would have them: nothing remembered. The
// view is kept; the caller decides how stale the new process's cache starts.
func (m *manager) restart(cfg queue.Config) {
	m.metrics = controller.NewMetrics(nil)
	m.locks = controller.NewLockReconciler(m.view, k8s, nopRecorder{},
		controller.WithClock(m.clock), controller.WithConfig(cfg), controller.WithMetrics(m.metrics), controller.WithFreezeFlags(m.flags))
	m.cmds = controller.NewCommandLockReconciler(m.view, k8s, nopRecorder{}, controller.WithMetrics(m.metrics), controller.WithClock(m.clock),
		controller.WithFreezeFlags(m.flags))
}

// tick sets the manager's clock to real time (or the simulation's) plus time simulated ahead,
// plus its skew.
func (m *manager) tick() {
	now := time.Now()
	if m.simNow != nil {
		now = *m.simNow
	}
	m.clock.SetTime(now.Add(m.ahead + m.skew))
}

// reconcileKey runs one reconcile of a lock key.
func (m *manager) reconcileKey(key types.NamespacedName) (reconcile.Result, error) {
	m.tick()
	return m.locks.Reconcile(ctx, reconcile.Request{NamespacedName: key})
}

// reconcileCommand runs one reconcile of a CommandLock.
func (m *manager) reconcileCommand(name string) (reconcile.Result, error) {
	m.tick()
	return m.cmds.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
}

// decide reconciles key and expects no error (a lost race is a requeue, not an error).
func (m *manager) decide(key types.NamespacedName) {
	GinkgoHelper()
	_, err := m.reconcileKey(key)
	Expect(err).NotTo(HaveOccurred(), "%s reconciling %s", m.name, key)
}

type nopRecorder struct{}

func (nopRecorder) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...interface{}) {
}

func keyOf(ns string, t locksv1.LockTarget) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: lockkey.Name(t)}
}

func target(path string) locksv1.LockTarget {
	return locksv1.LockTarget{Repo: "acme/infra", Path: path, Workspace: "default"}
}

func getRequest(ns, name string) *locksv1.LockRequest {
	GinkgoHelper()
	var lr locksv1.LockRequest
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &lr)).To(Succeed())
	return &lr
}

func phase(ns, name string) locksv1.LockRequestPhase { return getRequest(ns, name).Status.Phase }

// expectSafe checks the store against every promise.
func expectSafe(inv *lag.Invariants, ns, when string) {
	GinkgoHelper()
	v, err := inv.Check(ctx, ns)
	Expect(err).NotTo(HaveOccurred())
	Expect(v).To(BeEmpty(), "after %s", when)
}

// settle lets every manager catch up and decide every key until nothing changes, checking the
// store after each round. It returns when a full round wrote nothing.
func settle(inv *lag.Invariants, ns string, keys []types.NamespacedName, ms ...*manager) {
	GinkgoHelper()
	for round := 0; round < 50; round++ {
		syncHistory()
		before := history.Mark()
		for _, m := range ms {
			m.view.CatchUp()
			for _, k := range keys {
				m.decide(k)
				expectSafe(inv, ns, fmt.Sprintf("settling: %s decided %s", m.name, k))
			}
		}
		syncHistory()
		if history.Mark() == before {
			return
		}
	}
	Fail("the managers did not settle within 50 rounds")
}

// invariants is the store's checker as the safety specs use it: identities compared field by
// field, and a write the API server answered as a no-op counted as a violation.
func invariants() *lag.Invariants {
	inv := lag.NewInvariants(k8s)
	inv.Structural = true
	inv.NoOps = history
	return inv
}

// create creates a request and records it in the history the lagging views replay.
func create(w *wrappers.LockRequestWrapper) {
	GinkgoHelper()
	Expect(k8s.Create(ctx, w.Obj())).To(Succeed())
	syncHistory()
}

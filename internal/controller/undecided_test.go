package controller_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// writeGate holds some status writes of LockRequests, as an API server too loaded to answer
// them for seconds (or at all) would: a write its rule picks waits until the test lets it
// through (permits) or opens the gate. Every other write goes through at once.
type writeGate struct {
	mu      sync.Mutex
	rule    func(*locksv1.LockRequest) bool // which writes wait; nil: none
	once    bool                            // only the first write the rule picks waits
	waiting chan string                     // a write started waiting
	permits chan struct{}                   // one permit lets one write through
	open    chan struct{}                   // closed: every write goes through
}

func newWriteGate() *writeGate {
	return &writeGate{waiting: make(chan string, 100), permits: make(chan struct{}), open: make(chan struct{})}
}

// holdRefreshes makes the writes that leave one of names Pending wait: position refreshes.
func (g *writeGate) holdRefreshes(names ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rule = func(lr *locksv1.LockRequest) bool {
		return lr.Status.Phase == locksv1.PhasePending && slices.Contains(names, lr.Name)
	}
}

// holdPending makes every write that leaves one of names Pending wait: first statuses and
// position refreshes.
func (g *writeGate) holdPending(names ...string) { g.holdRefreshes(names...) }

// hangFirstGrant makes the first write that grants name wait until the gate opens: a worker
// hung in a write.
func (g *writeGate) hangFirstGrant(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.once = true
	g.rule = func(lr *locksv1.LockRequest) bool { return lr.Name == name && lr.Status.Phase == locksv1.PhaseGranted }
}

func (g *writeGate) holds(o client.Object) bool {
	lr, ok := o.(*locksv1.LockRequest)
	if !ok {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.rule == nil || !g.rule(lr) {
		return false
	}
	if g.once {
		g.rule = nil
	}
	return true
}

func (g *writeGate) wait(ctx context.Context, o client.Object) {
	if !g.holds(o) {
		return
	}
	select {
	case g.waiting <- o.GetName():
	default:
	}
	select {
	case <-g.permits:
	case <-g.open:
	case <-ctx.Done():
	}
}

// startGatedManager stops the suite's manager and starts one whose status writes pass gate,
// with o; the suite's manager comes back at cleanup.
func startGatedManager(gate *writeGate, o controller.SetupOptions) *framework.Manager {
	GinkgoHelper()
	Expect(mgr.Stop()).To(Succeed())
	gated, err := env.StartManager(o, func(mo *ctrl.Options) {
		mo.NewClient = func(cfg *rest.Config, co client.Options) (client.Client, error) {
			c, err := client.New(cfg, co)
			return gatedClient{Client: c, gate: gate}, err
		}
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		close(gate.open)
		Expect(gated.Stop()).To(Succeed())
		var err error
		mgr, err = env.StartManager(options)
		Expect(err).NotTo(HaveOccurred())
	})
	return gated
}

// gatedClient is a manager's client whose status writes pass through a refreshGate.
type gatedClient struct {
	client.Client
	gate *writeGate
}

func (c gatedClient) Status() client.SubResourceWriter {
	return gatedStatus{SubResourceWriter: c.Client.Status(), gate: c.gate}
}

type gatedStatus struct {
	client.SubResourceWriter
	gate *writeGate
}

func (s gatedStatus) Update(ctx context.Context, o client.Object, opts ...client.SubResourceUpdateOption) error {
	s.gate.wait(ctx, o)
	return s.SubResourceWriter.Update(ctx, o, opts...)
}

// containsAll says whether got holds every one of want.
func containsAll(got, want []string) bool {
	for _, w := range want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}

// receiveNames takes n names of writes that started waiting at g, each within timeout.
func receiveNames(g *writeGate, n int) []string {
	GinkgoHelper()
	var names []string
	for range n {
		var name string
		Eventually(g.waiting, timeout).Should(Receive(&name), "waiting writes so far: %v", names)
		names = append(names, name)
	}
	return names
}

// cachedBy waits until m's cache shows what ok asks of namespace ns's requests.
func cachedBy(m *framework.Manager, ns string, ok func([]locksv1.LockRequest) bool) {
	GinkgoHelper()
	Eventually(func() bool {
		var list locksv1.LockRequestList
		Expect(m.Client.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		return ok(list.Items)
	}, timeout, interval).Should(BeTrue())
}

var _ = Describe("Keys with work are decided before waiters are told their positions", Ordered, func() {
	var (
		gate  *writeGate
		gated *framework.Manager
	)
	BeforeAll(func() {
		gate = newWriteGate()
		// A write rate (--position-refresh-rate) that allows every refresh of the hand-off.
		o := options
		o.PositionRefreshRate = 1000
		gated = startGatedManager(gate, o)
	})

	It("lets a release and a new request past the position refreshes of a deep queue it is writing", func() {
		ns := newNamespace()
		create(req("a", ns).Owner("alice", 1).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		var waiters []string
		for i := range 10 {
			name := fmt.Sprintf("b%02d", i+1)
			waiters = append(waiters, name)
			create(req(name, ns).Owner("bob", int64(i+2)).Obj())
			expectPhase(ns, name, locksv1.PhasePending)
		}
		// Every position written: the key is quiet before the gate closes.
		for i, name := range waiters {
			Eventually(condOf(ns, name), timeout, interval).Should(HaveSuffix(fmt.Sprintf("position %d of %d", i+1, len(waiters))))
		}

		// The hand-off from a to b01 moves the nine other waiters up: their refreshes wait at
		// the gate, as writes to a loaded API server do, a batch of them at once.
		gate.holdRefreshes(waiters[1:]...)
		release(ns, "a")
		inFlight := receiveNames(gate, 8)
		expectPhase(ns, "b01", locksv1.PhaseGranted)

		// New work for the key while the batch is in flight: b01 releases, c asks.
		release(ns, "b01")
		create(req("c", ns).Owner("carol", 99).Obj())
		cachedBy(gated, ns, func(lrs []locksv1.LockRequest) bool {
			released, asked := false, false
			for _, lr := range lrs {
				released = released || (lr.Name == "b01" && lr.Spec.Release)
				asked = asked || lr.Name == "c"
			}
			return released && asked
		})
		for range inFlight {
			gate.permits <- struct{}{}
		}

		// The last refresh would wait at the gate: the key is decided past it.
		expectPhase(ns, "b01", locksv1.PhaseReleased)
		expectPhase(ns, "b02", locksv1.PhaseGranted)
		expectPhase(ns, "c", locksv1.PhasePending)
	})
})

var _ = Describe("The waiters of a plan are told at once", Ordered, func() {
	var (
		gate  *writeGate
		gated *framework.Manager
	)
	BeforeAll(func() {
		gate = newWriteGate()
		gated = startGatedManager(gate, options)
	})

	It("writes the first statuses of a burst of new requests together, not one after another", func() {
		ns := newNamespace()
		create(req("a", ns).Owner("alice", 1).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)

		// A burst of new requests whose first statuses wait at the gate. The first, c1, holds
		// the key's worker while the others arrive.
		burst := []string{"c1", "c2", "c3", "c4", "c5", "c6"}
		gate.holdPending(burst...)
		create(req("c1", ns).Owner("carol", 11).Obj())
		Expect(receiveNames(gate, 1)).To(Equal([]string{"c1"}))
		for i, name := range burst[1:] {
			create(req(name, ns).Owner("carol", int64(12+i)).Obj())
		}
		cachedBy(gated, ns, func(lrs []locksv1.LockRequest) bool { return len(lrs) == 1+len(burst) })
		gate.permits <- struct{}{}

		// The next plan's five first statuses are in flight together: all five reach the gate
		// while none is let through. c1's position refresh ("1 of 6") may go out in the same
		// batch, in any order among them.
		var inFlight []string
		for !containsAll(inFlight, burst[1:]) {
			Expect(len(inFlight)).To(BeNumerically("<", len(burst)), "writes at the gate: %v", inFlight)
			inFlight = append(inFlight, receiveNames(gate, 1)...)
		}
		Expect(burst).To(ContainElements(inFlight), "only the burst's statuses are held")
		for range inFlight {
			gate.permits <- struct{}{}
		}
		for _, name := range burst {
			expectPhase(ns, name, locksv1.PhasePending)
		}
	})
})

var _ = Describe("The watchdog", Ordered, func() {
	// A short bound, so the spec is quick: users have the flag (--undecided-key-bound).
	const bound = 2 * time.Second
	var gate *writeGate
	BeforeAll(func() {
		gate = newWriteGate()
		o := options
		o.UndecidedBound = bound
		startGatedManager(gate, o)
	})

	It("decides, from a live read, a key whose worker hangs in a write, and says so", func() {
		ns := newNamespace()
		create(req("a", ns).Owner("alice", 1).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		create(req("b", ns).Owner("bob", 2).Obj())
		expectPhase(ns, "b", locksv1.PhasePending)

		// The hand-off to b: its grant write hangs, and the worker with it. The ProjectLock
		// lists b; b does not know: the key has work no worker will do.
		gate.hangFirstGrant("b")
		release(ns, "a")
		Eventually(gate.waiting, timeout).Should(Receive(Equal("b")))
		expectPhase(ns, "a", locksv1.PhaseReleased)

		Eventually(phaseOf(ns, "b"), 3*bound+timeout, interval).Should(Equal(locksv1.PhaseGranted), "the watchdog should grant b")
		pl := projectLock(ns, vpc)
		Expect(get(ns, "b").Status.FencingToken).To(Equal(pl.Status.FencingToken))
		Eventually(func() []string {
			var evs eventsv1.EventList
			Expect(k8s.List(ctx, &evs, client.InNamespace(ns))).To(Succeed())
			var out []string
			for _, e := range evs.Items {
				if e.Reason == controller.ReasonUndecided && e.Regarding.Name == pl.Name {
					out = append(out, e.Note)
				}
			}
			return out
		}, timeout, interval).Should(ContainElement(And(
			ContainSubstring("the grant of b (listed by the ProjectLock, not written)"),
			ContainSubstring("held by a worker"),
			ContainSubstring("decided from a live read"))))
	})
})

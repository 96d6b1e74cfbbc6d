package controller_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/deadlock"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// Shared timeouts: hand-off takes milliseconds; these leave room for a loaded CI machine.
const (
	timeout  = 10 * time.Second
	interval = 20 * time.Millisecond
)

var (
	env     *framework.Env
	k8s     client.WithWatch
	mgr     *framework.Manager
	ctx     = context.Background()
	options controller.SetupOptions
)

// TestControllers runs the specs in two shards side by side, each a process with its own control
// plane and manager (framework.RunSuiteInShards): many specs wait on the manager's clocks (TTLs,
// leases, window edges), and the churns' API servers each get a core. TURNSTILE_TEST_SHARDS=1
// runs them all in this process, as before; -ginkgo.focus and co. select specs as usual, in whatever shard they land.
func TestControllers(t *testing.T) { framework.RunSuiteInShards(t, "Controller Suite", 2) }

// testOptions are the manager's options in this suite: production defaults, with the clocks
// that tests wait for shortened.
func testOptions() controller.SetupOptions {
	cfg := queue.DefaultConfig()
	cfg.AgingStep = 3 * time.Second
	cfg.QueueCap = 60
	return controller.SetupOptions{
		Queue:          cfg,
		Workers:        8,
		Retention:      4 * time.Second,
		DeadlockPolicy: deadlock.PolicyNewest,
		DeadlockScan:   2 * time.Second,
		UndecidedBound: undecidedBound,
	}
}

// undecidedBound is the suite's --undecided-key-bound: a third of the default, so the bound the
// churn specs assert (undecidedLimit) is tight.
const undecidedBound = 10 * time.Second

// undecidedLimit is the longest a key with work may go undecided, as a client sees it: the
// watchdog looks every third of the bound and finds it past the bound, then decides it; a
// decision on a loaded API server takes a few writes of up to a second each.
const undecidedLimit = 2 * undecidedBound

var _ = BeforeSuite(func() {
	// TURNSTILE_TEST_LOG=FILE writes the managers' logs there, at TURNSTILE_TEST_LOG_V (the key
	// trace is at 2): to follow a key that stood still. Each shard writes FILE.shardN.
	if path := os.Getenv("TURNSTILE_TEST_LOG"); path != "" {
		f, err := os.Create(path)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(f.Close)
		v, _ := strconv.Atoi(os.Getenv("TURNSTILE_TEST_LOG_V"))
		ctrl.SetLogger(zap.New(zap.WriteTo(f), zap.Level(zapcore.Level(-v)), func(o *zap.Options) { o.TimeEncoder = zapcore.RFC3339NanoTimeEncoder }))
	}
	env = framework.StartEnv()
	k8s = env.Client
	options = testOptions()
	var err error
	mgr, err = env.StartManager(options)
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if mgr != nil {
		Expect(mgr.Stop()).To(Succeed())
	}
})

// newNamespace creates a fresh namespace for one spec.
func newNamespace() string { return framework.CreateNamespace(ctx, k8s, "lock-") }

func create(objs ...client.Object) {
	GinkgoHelper()
	for _, o := range objs {
		Expect(k8s.Create(ctx, o)).To(Succeed())
	}
}

func get(ns, name string) *locksv1.LockRequest {
	GinkgoHelper()
	var lr locksv1.LockRequest
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &lr)).To(Succeed())
	return &lr
}

func projectLock(ns string, t locksv1.LockTarget) *locksv1.ProjectLock {
	GinkgoHelper()
	var pl locksv1.ProjectLock
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: lockkey.Name(t)}, &pl)).To(Succeed())
	return &pl
}

// phaseOf polls a request's phase.
func phaseOf(ns, name string) func() locksv1.LockRequestPhase {
	return framework.PhaseOf(ctx, k8s, ns, name)
}

// condOf polls a request's Granted condition as "Status/Reason: message".
func condOf(ns, name string) func() string {
	return func() string {
		var lr locksv1.LockRequest
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &lr); err != nil {
			return "error: " + err.Error()
		}
		c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
		if c == nil {
			return "<none>"
		}
		return fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message)
	}
}

func expectPhase(ns, name string, want locksv1.LockRequestPhase) {
	GinkgoHelper()
	Eventually(phaseOf(ns, name), timeout, interval).Should(Equal(want), "phase of %s", name)
}

func consistentlyPhase(ns, name string, want locksv1.LockRequestPhase, d time.Duration) {
	GinkgoHelper()
	Consistently(phaseOf(ns, name), d, interval).Should(Equal(want), "phase of %s", name)
}

func deleteRequest(ns, name string) {
	GinkgoHelper()
	Expect(k8s.Delete(ctx, &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})).To(Succeed())
}

func release(ns, name string) {
	GinkgoHelper()
	lr := get(ns, name)
	patch := client.MergeFrom(lr.DeepCopy())
	lr.Spec.Release = true
	Expect(k8s.Patch(ctx, lr, patch)).To(Succeed())
}

// aliceHoldsBobWaits is the usual start: alice's request a holds vpc, bob's b waits for it.
func aliceHoldsBobWaits(ns string) {
	GinkgoHelper()
	create(req("a", ns).Owner("alice", 1).Obj())
	expectPhase(ns, "a", locksv1.PhaseGranted)
	create(req("b", ns).Owner("bob", 2).Obj())
	expectPhase(ns, "b", locksv1.PhasePending)
}

package sharding_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/cache"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/sharding"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// Shared timeouts: membership changes take a lapse (2 s here); these leave room for load.
const (
	timeout  = 20 * time.Second
	interval = 20 * time.Millisecond
	renew    = 500 * time.Millisecond
	lapse    = 2 * time.Second
)

var (
	ctx = context.Background()
	env *framework.Env
	k8s client.Client
)

func TestRouting(t *testing.T) { framework.RunSuite(t, "Sharding suite") }

var _ = BeforeSuite(func() {
	env = framework.StartEnv()
	k8s = env.Client
})

func newNamespace() string { return framework.CreateNamespace(ctx, k8s, "sharding-") }

// replica is one manager in this process, active-active, its membership Leases in ns.
type replica struct {
	members *sharding.Membership
	cancel  context.CancelFunc
	done    chan error
	stopped sync.Once
}

func startReplica(id, ns string, backup time.Duration, configure ...func(*rest.Config)) *replica {
	GinkgoHelper()
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	for _, c := range configure {
		c(cfg)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 framework.Scheme,
		Cache:                  cache.Options(),
		NewCache:               cache.New,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	members := sharding.New(sharding.Config{Identity: id, Namespace: ns, Renew: renew, Lapse: lapse, Backup: backup},
		mgr.GetClient(), mgr.GetCache(), nil)
	Expect(mgr.Add(members)).To(Succeed())
	rctx, cancel := context.WithCancel(ctx)
	Expect(controller.Setup(rctx, mgr, controller.SetupOptions{Router: members, Workers: 2, Queue: queue.DefaultConfig()})).To(Succeed())
	r := &replica{members: members, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- mgr.Start(rctx) }()
	DeferCleanup(r.stop)
	return r
}

// stop ends the replica as SIGTERM does: its membership Lease is deleted on the way out.
func (r *replica) stop() {
	r.stopped.Do(func() {
		r.cancel()
		Eventually(r.done, timeout).Should(Receive(BeNil()))
	})
}

// ghost is a member no manager stands behind: a membership Lease the test renews, as a replica
// that hung or lost its network would have left it.
type ghost struct {
	lease *coordinationv1.Lease
	stop  chan struct{}
	done  chan struct{}
}

func startGhost(id, ns string) *ghost {
	GinkgoHelper()
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sharding.LeaseName(id),
		Labels: map[string]string{sharding.LabelRole: sharding.RoleMember}}}
	l.Spec.HolderIdentity = &id
	now := metav1.NewMicroTime(time.Now())
	l.Spec.RenewTime = &now
	Expect(k8s.Create(ctx, l)).To(Succeed())
	g := &ghost{lease: l, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer GinkgoRecover()
		defer close(g.done)
		t := time.NewTicker(renew)
		defer t.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-t.C:
				now := metav1.NewMicroTime(time.Now())
				g.lease.Spec.RenewTime = &now
				Expect(k8s.Update(ctx, g.lease)).To(Succeed())
			}
		}
	}()
	DeferCleanup(g.hang)
	return g
}

// hang stops renewing, as a crash would.
func (g *ghost) hang() {
	select {
	case <-g.stop:
	default:
		close(g.stop)
	}
	<-g.done
}

func liveOf(r *replica) func() []string { return r.members.Live }

// keyOwnedBy finds a lock target whose key the rendezvous hash gives to want among members, and,
// when then is given, to then once want has left the members.
func keyOwnedBy(ns, want string, members []string, then ...string) locksv1.LockTarget {
	GinkgoHelper()
	rest := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == want })
	for i := range 1000 {
		t := locksv1.LockTarget{Repo: "acme/infra", Path: fmt.Sprintf("stack-%d", i), Workspace: "default"}
		key := ns + "/" + lockkey.Name(t)
		if sharding.Owner(members, key) == want && (len(then) == 0 || sharding.Owner(rest, key) == then[0]) {
			return t
		}
	}
	Fail("no key owned by " + want)
	return locksv1.LockTarget{}
}

func request(ns, name string, t locksv1.LockTarget) *locksv1.LockRequest {
	return wrappers.MakeLockRequest(name, ns).Lock(t.Repo, t.Path, t.Workspace).Owner("alice", 1).Obj()
}

func phase(ns, name string) func() locksv1.LockRequestPhase {
	return func() locksv1.LockRequestPhase {
		var lr locksv1.LockRequest
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &lr); err != nil {
			return ""
		}
		return lr.Status.Phase
	}
}

var _ = Describe("Membership", func() {
	It("sees replicas join, leave gracefully at once, and lapse when they stop renewing", func() {
		ns := newNamespace()
		a := startReplica("a", ns, 300*time.Millisecond)
		b := startReplica("b", ns, 300*time.Millisecond)
		Eventually(liveOf(a), timeout, interval).Should(Equal([]string{"a", "b"}))
		Eventually(liveOf(b), timeout, interval).Should(Equal([]string{"a", "b"}))

		g := startGhost("c", ns)
		Eventually(liveOf(a), timeout, interval).Should(Equal([]string{"a", "b", "c"}))
		g.hang()
		Eventually(liveOf(a), timeout, interval).Should(Equal([]string{"a", "b"}))

		b.stop()
		var lease coordinationv1.Lease
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: sharding.LeaseName("b")}, &lease)
		Expect(err).To(MatchError(ContainSubstring("not found")), "a replica that stops deletes its membership Lease")
		Eventually(liveOf(a), timeout, interval).Should(Equal([]string{"a"}))
	})
})

var _ = Describe("Routing", func() {
	// The backup delay is an hour: a key another live member owns is never decided here by
	// the delay, only once this replica owns it.
	const never = time.Hour

	It("decides its own keys at once and another member's keys only once that member is gone", func() {
		ns := newNamespace()
		r := startReplica("r", ns, never)
		leaver := startGhost("leaver", ns)
		hung := startGhost("hung", ns)
		all := []string{"hung", "leaver", "r"}
		Eventually(liveOf(r), timeout, interval).Should(Equal(all))

		mine := keyOwnedBy(ns, "r", all)
		// Once the leaver has gone, its key is r's (not hung's, which stays a member until it lapses).
		ofLeaver := keyOwnedBy(ns, "leaver", all, "r")
		ofHung := keyOwnedBy(ns, "hung", all)
		for name, t := range map[string]locksv1.LockTarget{"mine": mine, "of-leaver": ofLeaver, "of-hung": ofHung} {
			Expect(k8s.Create(ctx, request(ns, name, t))).To(Succeed())
		}
		Eventually(phase(ns, "mine"), timeout, interval).Should(Equal(locksv1.PhaseGranted))
		Consistently(phase(ns, "of-leaver"), 2*time.Second, interval).Should(BeEmpty(), "another live member's key waits for the backup delay")
		Expect(phase(ns, "of-hung")()).To(BeEmpty())

		// A graceful leave: the Lease is deleted and the key is decided as soon as that is seen.
		leaver.hang()
		Expect(k8s.Delete(ctx, leaver.lease)).To(Succeed())
		Eventually(phase(ns, "of-leaver"), timeout, interval).Should(Equal(locksv1.PhaseGranted))
		Expect(phase(ns, "of-hung")()).To(BeEmpty())

		// A hung member: its key is decided once its Lease lapses.
		hung.hang()
		Eventually(phase(ns, "of-hung"), timeout, interval).Should(Equal(locksv1.PhaseGranted))
	})
})

var _ = Describe("Backups", func() {
	It("decide a dead owner's key after the backup delay, but leave position refreshes to the owner", func() {
		ns := newNamespace()
		r := startReplica("r", ns, 200*time.Millisecond)
		owner := startGhost("owner", ns)
		all := []string{"owner", "r"}
		Eventually(liveOf(r), timeout, interval).Should(Equal(all))

		// The owner is a member that does nothing: r decides its key as a backup.
		t := keyOwnedBy(ns, "owner", all)
		for _, name := range []string{"a", "b", "c"} {
			lr := request(ns, name, t)
			lr.Spec.Holder = locksv1.Holder{Owner: name, Pull: 1}
			Expect(k8s.Create(ctx, lr)).To(Succeed())
			if name == "a" {
				Eventually(phase(ns, "a"), timeout, interval).Should(Equal(locksv1.PhaseGranted), "the backup grants")
			}
		}
		position := func(name string) func() int32 {
			return func() int32 {
				var lr locksv1.LockRequest
				if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &lr); err != nil {
					return -1
				}
				return lr.Status.QueuePosition
			}
		}
		Eventually(position("c"), timeout, interval).Should(BeEquivalentTo(2), "the backup writes a waiter's first status")

		// b leaves the queue: c's position changes, which only a refresh would write.
		var b locksv1.LockRequest
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "b"}, &b)).To(Succeed())
		Expect(k8s.Delete(ctx, &b)).To(Succeed())
		Eventually(func() bool {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "b"}, &b)
			return err != nil
		}, timeout, interval).Should(BeTrue(), "the backup lets b go")
		Consistently(position("c"), 2*time.Second, interval).Should(BeEquivalentTo(2), "a backup does not refresh positions")

		// The owner goes: r owns the key and refreshes c's position.
		owner.hang()
		Expect(k8s.Delete(ctx, owner.lease)).To(Succeed())
		Eventually(position("c"), timeout, interval).Should(BeEquivalentTo(1))
	})
})

var _ = Describe("Backups and a working owner", func() {
	It("leave a key alone for one more backup delay while its owner is seen deciding it, then decide it", func() {
		// The backup delay is long against the owner's writes (every 50 ms), so only a stall
		// of a whole second in them would let the backup in early.
		const backup = time.Second
		ns := newNamespace()
		r := startReplica("r", ns, backup)
		startGhost("owner", ns)
		all := []string{"owner", "r"}
		Eventually(liveOf(r), timeout, interval).Should(Equal(all))

		t := keyOwnedBy(ns, "owner", all)
		Expect(k8s.Create(ctx, request(ns, "a", t))).To(Succeed())
		Eventually(phase(ns, "a"), timeout, interval).Should(Equal(locksv1.PhaseGranted), "nobody decides the key: the backup does")

		// The test plays an owner at work: it writes the key's ProjectLock status (a condition
		// no controller writes) as fast as a busy key's decisions come.
		writing, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(stopped)
			key := client.ObjectKey{Namespace: ns, Name: lockkey.Name(t)}
			for n := 0; ; n++ {
				select {
				case <-writing:
					return
				case <-time.After(50 * time.Millisecond):
				}
				var pl locksv1.ProjectLock
				if err := k8s.Get(ctx, key, &pl); err != nil {
					continue
				}
				meta.SetStatusCondition(&pl.Status.Conditions, metav1.Condition{Type: "OwnerAtWork", Status: metav1.ConditionTrue,
					Reason: "Deciding", Message: time.Now().Format(time.RFC3339Nano)})
				if err := k8s.Status().Update(ctx, &pl); err != nil && !apierrors.IsConflict(err) {
					Expect(err).NotTo(HaveOccurred())
				}
			}
		}()
		DeferCleanup(func() {
			select {
			case <-writing:
			default:
				close(writing)
			}
			<-stopped
		})

		deferrals := testutil.ToFloat64(sharding.BackupDeferrals)
		lr := request(ns, "b", t)
		lr.Spec.Holder.Owner = "bob"
		Expect(k8s.Create(ctx, lr)).To(Succeed())
		Eventually(func() float64 { return testutil.ToFloat64(sharding.BackupDeferrals) }, timeout, interval).Should(BeNumerically(">", deferrals),
			"a backup leaves a new waiter to the owner that is deciding its key, for one more backup delay")
		// The owner never writes b's status, though it keeps deciding the key: a backup defers
		// once only, so b is not kept waiting on an owner that writes but does not serve it.
		Eventually(phase(ns, "b"), timeout, interval).Should(Equal(locksv1.PhasePending), "the backup decides the key after its one deferral")
	})
})

// hangLockWrites makes a replica hung rather than dead: every write of its to the
// locks.turnstile.dev API blocks until release is closed (or the write's context ends), while
// its reads, its watches and its membership Lease renewals (coordination.k8s.io) go through, so
// the others keep seeing it as a live member that owns its keys.
func hangLockWrites(release <-chan struct{}) func(*rest.Config) {
	return func(cfg *rest.Config) {
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(req *http.Request) (*http.Response, error) {
				if req.Method != http.MethodGet && strings.HasPrefix(req.URL.Path, "/apis/"+locksv1.GroupVersion.Group+"/") {
					select {
					case <-release:
					case <-req.Context().Done():
						return nil, req.Context().Err()
					}
				}
				return rt.RoundTrip(req)
			})
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

var _ = Describe("Backups and a hung owner", func() {
	It("decide a hung owner's key although a multi-lock request's other key stays busy", func() {
		// Hole B of #26: the backup deferred to any status change of a request naming the key,
		// so a busy other key refreshing a multi-lock waiter's position kept postponing the
		// hand-off of the hung owner's key for as long as it stayed busy.
		const backup = time.Second
		ns := newNamespace()
		release := make(chan struct{})
		startReplica("hung", ns, backup, hangLockWrites(release))
		r := startReplica("r", ns, backup)
		DeferCleanup(func() { close(release) }) // before the replicas stop (cleanups run last first)
		all := []string{"hung", "r"}
		Eventually(liveOf(r), timeout, interval).Should(Equal(all))

		// k is the hung replica's; busy is r's and comes first in canonical order, so a request
		// for both waits in busy's queue first.
		k := keyOwnedBy(ns, "hung", all)
		var busy locksv1.LockTarget
		for i := range 1000 {
			t := locksv1.LockTarget{Repo: "acme/infra", Path: fmt.Sprintf("busy-%d", i), Workspace: "default"}
			if sharding.Owner(all, ns+"/"+lockkey.Name(t)) == "r" && lockkey.Refs([]locksv1.LockTarget{k, t})[0].Name == lockkey.Name(t) {
				busy = t
				break
			}
		}
		Expect(busy.Path).NotTo(BeEmpty(), "no key of r's sorts before %v", k)
		create := func(name, owner string, targets ...locksv1.LockTarget) {
			GinkgoHelper()
			w := wrappers.MakeLockRequest(name, ns).Owner(owner, 1)
			for _, t := range targets {
				w = w.Lock(t.Repo, t.Path, t.Workspace)
			}
			Expect(k8s.Create(ctx, w.Obj())).To(Succeed())
		}

		create("alice", "alice", k)
		Eventually(phase(ns, "alice"), timeout, interval).Should(Equal(locksv1.PhaseGranted), "r grants on k as its backup")
		create("xavier", "xavier", busy)
		Eventually(phase(ns, "xavier"), timeout, interval).Should(Equal(locksv1.PhaseGranted))
		create("bob", "bob", k)
		Eventually(phase(ns, "bob"), timeout, interval).Should(Equal(locksv1.PhasePending))
		create("dave", "dave", k, busy)
		Eventually(phase(ns, "dave"), timeout, interval).Should(Equal(locksv1.PhasePending))

		// busy stays busy: waiters come and go behind dave, and r, its owner, refreshes dave's
		// "position 1 of n" as they do.
		stop, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(stopped)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				w := wrappers.MakeLockRequest(fmt.Sprintf("w-%d", i), ns).Owner(fmt.Sprintf("w%d", i), 1).Lock(busy.Repo, busy.Path, busy.Workspace).Obj()
				Expect(k8s.Create(ctx, w)).To(Succeed())
				if i > 0 {
					prev := &locksv1.LockRequest{}
					prev.Namespace, prev.Name = ns, fmt.Sprintf("w-%d", i-1)
					Expect(client.IgnoreNotFound(k8s.Delete(ctx, prev))).To(Succeed())
				}
			}
		}()
		DeferCleanup(func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
			<-stopped
		})
		blocked := func() string {
			var lr locksv1.LockRequest
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "dave"}, &lr); err != nil {
				return ""
			}
			c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
			if c == nil {
				return ""
			}
			return c.Message
		}
		first := blocked()
		Eventually(blocked, timeout, interval).ShouldNot(Equal(first), "r refreshes dave's place in busy's queue")

		// alice lets k go. Its owner is hung: r must hand k to bob as a backup.
		var a locksv1.LockRequest
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "alice"}, &a)).To(Succeed())
		patch := client.MergeFrom(a.DeepCopy())
		a.Spec.Release = true
		released := time.Now()
		Expect(k8s.Patch(ctx, &a, patch)).To(Succeed())
		Eventually(phase(ns, "bob"), timeout, interval).Should(Equal(locksv1.PhaseGranted),
			"the hung owner's key is handed on by a backup while another key stays busy")
		// Information, not an assertion: the bound is two backup delays plus the API's latency.
		GinkgoWriter.Printf("hand-off of the hung owner's key: %s after the release (backup delay %s)\n", time.Since(released).Round(10*time.Millisecond), backup)
		Expect(phase(ns, "alice")()).To(Equal(locksv1.PhaseReleased))
	})
})

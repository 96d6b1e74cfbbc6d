package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/pkg/client"
)

var (
	ctx = context.Background()
	env *framework.Env
	k8s ctrlclient.WithWatch
)

func TestClient(t *testing.T) { framework.RunSuite(t, "Go client suite") }

var _ = BeforeSuite(func() {
	env = framework.StartEnv()
	k8s = env.Client
	mgr, err := env.StartManager(controller.SetupOptions{Queue: queue.DefaultConfig(), Retention: time.Hour})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(mgr.Stop)
})

var vpc = []locksv1.LockTarget{{Repo: "acme/infra", Path: "modules/vpc", Workspace: "default"}}

func newClient() *client.Client {
	return client.New(k8s, framework.CreateNamespace(ctx, k8s, "client-"))
}

var _ = Describe("The Go client", func() {
	It("acquires, hands off to a blocked Acquire, and releases keeping the record", func() {
		tc := newClient()
		a, err := tc.Acquire(ctx, client.Request{Name: "a", Locks: vpc, Holder: locksv1.Holder{Owner: "alice", Pull: 1}})
		Expect(err).NotTo(HaveOccurred())
		Expect(a.FencingToken).To(BeNumerically(">", 0))
		Expect(a.ExpiresAt.Sub(a.GrantedAt)).To(Equal(30 * time.Minute))

		got := make(chan *client.Lock, 1)
		go func() {
			defer GinkgoRecover()
			b, err := tc.Acquire(ctx, client.Request{Name: "b", Locks: vpc, Holder: locksv1.Holder{Owner: "bob", Pull: 2}})
			Expect(err).NotTo(HaveOccurred())
			got <- b
		}()
		Consistently(got, time.Second).ShouldNot(Receive(), "bob must wait while alice holds the lock")
		Expect(a.Release(ctx)).To(Succeed())
		var b *client.Lock
		Eventually(got, 10*time.Second).Should(Receive(&b))
		Expect(b.FencingToken).To(BeNumerically(">", a.FencingToken))

		var rec locksv1.LockRequest
		Expect(k8s.Get(ctx, a.Key(), &rec)).To(Succeed())
		Expect(rec.Status.Phase).To(Equal(locksv1.PhaseReleased))
		Expect(a.Release(ctx)).To(Succeed(), "releasing twice is fine")
		Expect(b.Delete(ctx)).To(Succeed())
	})

	It("fails TryAcquire with ErrBusy and the holder's name, and leaves nothing queued", func() {
		tc := newClient()
		a, err := tc.Acquire(ctx, client.Request{Locks: vpc, Holder: locksv1.Holder{Owner: "alice", Pull: 1}})
		Expect(err).NotTo(HaveOccurred())
		_, err = tc.TryAcquire(ctx, client.Request{Name: "try", Locks: vpc, Holder: locksv1.Holder{Owner: "bob", Pull: 2}})
		Expect(err).To(MatchError(client.ErrBusy))
		var nge *client.NotGrantedError
		Expect(errors.As(err, &nge)).To(BeTrue())
		Expect(nge.Message).To(ContainSubstring("alice"))
		Expect(apierrors.IsNotFound(k8s.Get(ctx, ctrlclient.ObjectKey{Namespace: a.Namespace, Name: "try"}, &locksv1.LockRequest{}))).To(BeTrue())
	})

	It("gives up when the context ends and deletes its queued request", func() {
		tc := newClient()
		_, err := tc.Acquire(ctx, client.Request{Locks: vpc, Holder: locksv1.Holder{Owner: "alice", Pull: 1}})
		Expect(err).NotTo(HaveOccurred())
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		_, err = tc.Acquire(short, client.Request{Name: "impatient", Locks: vpc, Holder: locksv1.Holder{Owner: "bob", Pull: 2}})
		Expect(err).To(MatchError(context.DeadlineExceeded))
		err = k8s.Get(ctx, ctrlclient.ObjectKey{Namespace: tc.Namespace(), Name: "impatient"}, &locksv1.LockRequest{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the abandoned request must be deleted, got %v", err)
	})

	It("fails with ErrTimeout when the server-side waitTimeout elapses", func() {
		tc := newClient()
		_, err := tc.Acquire(ctx, client.Request{Locks: vpc, Holder: locksv1.Holder{Owner: "alice", Pull: 1}})
		Expect(err).NotTo(HaveOccurred())
		wait := time.Second
		_, err = tc.Acquire(ctx, client.Request{Locks: vpc, Holder: locksv1.Holder{Owner: "bob", Pull: 2}, WaitTimeout: &wait})
		Expect(err).To(MatchError(client.ErrTimeout))
	})

	It("renews a grant and reports a lost one as ErrLost", func() {
		tc := newClient()
		a, err := tc.Acquire(ctx, client.Request{Locks: vpc, Holder: locksv1.Holder{Owner: "alice", Pull: 1}, TTL: 3 * time.Second})
		Expect(err).NotTo(HaveOccurred())
		exp, err := a.Renew(ctx, time.Hour)
		Expect(err).NotTo(HaveOccurred())
		Expect(exp).To(BeTemporally(">", a.GrantedAt.Add(50*time.Minute)))

		// Over the operator's maximum: refused, and the grant keeps its expiry.
		kept, err := a.Renew(ctx, 3*time.Hour)
		Expect(err).To(MatchError(client.ErrInvalid))
		Expect(err.Error()).To(ContainSubstring("renewal refused"))
		Expect(kept).To(Equal(exp))

		// An admin force-unlocks: the holder learns it lost the lock.
		var pls locksv1.ProjectLockList
		Expect(k8s.List(ctx, &pls, ctrlclient.InNamespace(a.Namespace))).To(Succeed())
		Expect(pls.Items).To(HaveLen(1))
		Expect(k8s.Delete(ctx, &pls.Items[0])).To(Succeed())
		Eventually(func() error { _, err := a.Renew(ctx, time.Hour); return err }, 10*time.Second, 50*time.Millisecond).
			Should(MatchError(client.ErrLost))
		Expect(a.Release(ctx)).To(MatchError(client.ErrLost))
	})

	It("defaults the owner to the caller's identity (SelfSubjectReview), not $USER", func() {
		GinkgoT().Setenv("USER", "somebody-else")
		ns := newClient().Namespace()
		cfg := rest.CopyConfig(env.Config)
		// alice as the API server authenticates her (impersonated by the envtest admin); the
		// group only lets her create the request without RBAC set up.
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "alice", Groups: []string{"system:masters"}}
		asAlice, err := ctrlclient.NewWithWatch(cfg, ctrlclient.Options{Scheme: framework.Scheme})
		Expect(err).NotTo(HaveOccurred())
		Expect(client.WhoAmI(ctx, asAlice)).To(Equal("alice"))

		lr, err := client.New(asAlice, ns).Create(ctx, client.Request{Name: "mine", Locks: vpc, Holder: locksv1.Holder{Pull: 7}})
		Expect(err).NotTo(HaveOccurred())
		Expect(lr.Spec.Holder).To(Equal(locksv1.Holder{Owner: "alice", Pull: 7}))
		var stored locksv1.LockRequest
		Expect(k8s.Get(ctx, ctrlclient.ObjectKeyFromObject(lr), &stored)).To(Succeed())
		Expect(stored.Spec.Holder.Owner).To(Equal("alice"))

		named, err := client.New(asAlice, ns).Create(ctx, client.Request{Name: "for-bob", Locks: vpc, Holder: locksv1.Holder{Owner: "bob"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(named.Spec.Holder.Owner).To(Equal("bob"), "an owner given is kept (the admission policies judge it)")
	})

	It("tells a holder waiting on WaitLost the moment its grant is taken away", func() {
		tc := newClient()
		a, err := tc.Acquire(ctx, client.Request{Locks: vpc, Holder: locksv1.Holder{Owner: "alice", Pull: 1}})
		Expect(err).NotTo(HaveOccurred())
		lost := make(chan error, 1)
		go func() { lost <- a.WaitLost(ctx) }()
		Consistently(lost, time.Second).ShouldNot(Receive(), "the grant stands")

		var pls locksv1.ProjectLockList
		Expect(k8s.List(ctx, &pls, ctrlclient.InNamespace(a.Namespace))).To(Succeed())
		Expect(pls.Items).To(HaveLen(1))
		Expect(k8s.Delete(ctx, &pls.Items[0])).To(Succeed())
		var err2 error
		Eventually(lost, 10*time.Second).Should(Receive(&err2))
		Expect(err2).To(MatchError(client.ErrLost))
		Expect(err2.Error()).To(ContainSubstring("force-unlocked"))

		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		b, err := tc.Acquire(ctx, client.Request{Locks: vpc, Holder: locksv1.Holder{Owner: "bob", Pull: 2}})
		Expect(err).NotTo(HaveOccurred())
		Expect(b.WaitLost(short)).To(MatchError(context.DeadlineExceeded), "a grant that stands outlives the context")
		Expect(b.Delete(ctx)).To(Succeed())
		Expect(b.WaitLost(ctx)).To(MatchError(client.ErrReleased), "a deleted request has let go")
	})

	It("reports a request deleted while it waits as released", func() {
		tc := newClient()
		_, err := tc.Acquire(ctx, client.Request{Locks: vpc, Holder: locksv1.Holder{Owner: "alice", Pull: 1}})
		Expect(err).NotTo(HaveOccurred())
		waiter, err := tc.Create(ctx, client.Request{Name: "w", Locks: vpc, Holder: locksv1.Holder{Owner: "bob", Pull: 2}})
		Expect(err).NotTo(HaveOccurred())
		done := make(chan error, 1)
		told := make(chan string, 100)
		report := client.OnChange(func(lr *locksv1.LockRequest) {
			if c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted); c != nil {
				told <- c.Message
			}
		})
		go func() { _, err := tc.Wait(ctx, "w", report); done <- err }()
		Eventually(told, 10*time.Second).Should(Receive(Equal("locked by pull #1 (alice); position 1 of 1")), "the waiter's report comes from the watch")
		Consistently(done, time.Second).ShouldNot(Receive(), "w waits")
		Expect(k8s.Delete(ctx, waiter)).To(Succeed())
		var werr error
		Eventually(done, 10*time.Second).Should(Receive(&werr))
		Expect(werr).To(MatchError(client.ErrReleased))
		Expect(werr.Error()).To(ContainSubstring("deleted while waiting"))

		_, err = tc.Wait(ctx, "nobody")
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "waiting for a request that does not exist: %v", err)
	})
})

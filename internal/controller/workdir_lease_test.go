package controller_test

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/pkg/workdir"
)

// partitionable is a real client that can be cut off from the API server, as a runner behind a
// broken network would be.
func partitionable(cut *atomic.Bool) client.WithWatch {
	errCut := errors.New("network partition (test)")
	return interceptor.NewClient(k8s, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if cut.Load() {
				return errCut
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if cut.Load() {
				return errCut
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if cut.Load() {
				return errCut
			}
			return c.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if cut.Load() {
				return errCut
			}
			return c.Delete(ctx, obj, opts...)
		},
	})
}

// A runner embeds pkg/workdir: guards for its working directories and a heartbeat Lease that
// its LockRequests name in spec.holder.lease. These specs run the heartbeat against the real
// API server and the manager.
var _ = Describe("A runner's workdir heartbeat Lease as the holder Lease", func() {
	var (
		ns     string
		cut    atomic.Bool
		guards *workdir.Guards
		lost   chan error
		hb     *workdir.Heartbeat
		stopHB context.CancelFunc
		hbDone chan error
	)
	vpcDir := workdir.Key{Repo: "acme/infra", Pull: 1, Workspace: "default", Path: "modules/vpc"}

	BeforeEach(func() {
		ns = newNamespace()
		cut.Store(false)
		guards = workdir.NewGuards()
		lost = make(chan error, 1)
		var err error
		hb, err = workdir.NewHeartbeat(partitionable(&cut), guards,
			workdir.WithNamespace(ns), workdir.WithLeaseName("runner-0"), workdir.WithIdentity("runner-0"),
			workdir.WithLeaseDuration(3*time.Second),
			workdir.WithOnLost(func(err error) {
				select {
				case lost <- err:
				default:
				}
			}))
		Expect(err).NotTo(HaveOccurred())
		var hbCtx context.Context
		hbCtx, stopHB = context.WithCancel(ctx)
		hbDone = make(chan error, 1)
		go func() { hbDone <- hb.Run(hbCtx) }()
		DeferCleanup(func() {
			stopHB()
			// Cut off, the heartbeat cannot delete its Lease; that error is expected here.
			GinkgoWriter.Println("heartbeat stopped:", <-hbDone)
		})
		Eventually(hb.Healthy, timeout, interval).Should(BeTrue())
	})

	It("frees the lock when the runner is cut off, and the runner knows its guards are gone", func() {
		unlock, err := guards.TryLock(vpcDir, "apply")
		Expect(err).NotTo(HaveOccurred())
		defer unlock()
		create(req("a", ns).Owner("alice", 1).Lease(hb.Lease().Name).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		create(req("b", ns).Owner("bob", 2).Obj())
		Eventually(condOf(ns, "b"), timeout, interval).Should(HavePrefix("False/Queued"))

		cut.Store(true)
		Eventually(finishReason(ns, "a"), timeout, interval).Should(Equal("Released/HolderLost"))
		expectPhase(ns, "b", locksv1.PhaseGranted)

		// The runner's side of the same lapse: reported, and no new command may start.
		Eventually(lost, timeout).Should(Receive(MatchError(workdir.ErrLeaseLost)))
		Expect(hb.Healthy()).To(BeFalse())
		_, err = guards.TryLock(workdir.Key{Repo: "acme/infra", Pull: 1, Workspace: "default", Path: "modules/dns"}, "plan")
		Expect(err).To(MatchError(workdir.ErrLeaseLost))
	})

	It("frees the lock at once on the runner's clean shutdown, which deletes its Lease", func() {
		create(req("a", ns).Owner("alice", 1).Lease(hb.Lease().Name).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		create(req("b", ns).Owner("bob", 2).Obj())
		Eventually(condOf(ns, "b"), timeout, interval).Should(HavePrefix("False/Queued"))

		stopHB()
		Expect(<-hbDone).To(Succeed())
		hbDone <- nil // for the cleanup
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: hb.Lease().Name}, &coordinationv1.Lease{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the heartbeat should delete its Lease on shutdown, got %v", err)
		Eventually(finishReason(ns, "a"), timeout, interval).Should(Equal("Released/HolderLost"))
		expectPhase(ns, "b", locksv1.PhaseGranted)
	})
})

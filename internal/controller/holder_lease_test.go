package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// holderLease creates a Lease the way a runner would: renewed now, lapsing after d.
func holderLease(ns, name string, d time.Duration) *coordinationv1.Lease {
	GinkgoHelper()
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("runner-" + name),
			LeaseDurationSeconds: ptr.To(int32(d / time.Second)),
			AcquireTime:          ptr.To(metav1.NowMicro()),
			RenewTime:            ptr.To(metav1.NowMicro()),
		},
	}
	create(lease)
	return lease
}

// renew keeps a Lease renewed every period until the spec ends or stop is closed.
func renew(lease *coordinationv1.Lease, period time.Duration) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(stopped)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				var l coordinationv1.Lease
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(lease), &l); err != nil {
					continue
				}
				l.Spec.RenewTime = ptr.To(metav1.NowMicro())
				_ = k8s.Update(ctx, &l) // a conflict is retried on the next tick
			}
		}
	}()
	stop = func() {
		select {
		case <-done:
		default:
			close(done)
		}
		<-stopped
	}
	DeferCleanup(stop)
	return stop
}

func finishReason(ns, name string) func() string {
	return func() string {
		lr := get(ns, name)
		c := meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionGranted)
		if c == nil {
			return string(lr.Status.Phase)
		}
		return string(lr.Status.Phase) + "/" + c.Reason
	}
}

var _ = Describe("Holder Leases", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("releases a holder whose Lease stops being renewed, within the lease duration, and grants the next waiter", func() {
		lease := holderLease(ns, "runner-1", 3*time.Second)
		stop := renew(lease, 500*time.Millisecond)
		create(req("a", ns).Owner("alice", 1).Lease("runner-1").Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		create(req("b", ns).Owner("bob", 2).Obj())
		Eventually(condOf(ns, "b"), timeout, interval).Should(HavePrefix("False/Queued"))

		// While renewed, the grant stays for longer than the lease duration.
		consistentlyPhase(ns, "a", locksv1.PhaseGranted, 4*time.Second)

		// The runner dies: renewals stop.
		stop()
		var last coordinationv1.Lease
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(lease), &last)).To(Succeed())
		lapse := last.Spec.RenewTime.Add(3 * time.Second)

		Eventually(finishReason(ns, "a"), timeout, interval).Should(Equal("Released/HolderLost"))
		a := get(ns, "a")
		Expect(a.Status.FinishedAt).NotTo(BeNil())
		// Measured by the manager's clock (finishedAt, whole seconds) against the Lease's own
		// renewTime, not by the test's polling.
		Expect(a.Status.FinishedAt.Sub(lapse)).To(BeNumerically("<=", time.Second),
			"released %s after the lease lapsed", a.Status.FinishedAt.Sub(lapse))
		Expect(a.Status.FinishedAt.Time).NotTo(BeTemporally("<", lapse.Truncate(time.Second)), "released before the lease lapsed")
		Expect(condOf(ns, "a")()).To(ContainSubstring("holder Lease " + ns + "/runner-1 lapsed"))

		expectPhase(ns, "b", locksv1.PhaseGranted)
		Expect(get(ns, "b").Status.FencingToken).To(BeNumerically(">", a.Status.FencingToken))
	})

	It("keeps a grant whose Lease keeps renewing until its TTL", func() {
		lease := holderLease(ns, "runner-2", 2*time.Second)
		renew(lease, 300*time.Millisecond)
		create(req("a", ns).Owner("alice", 1).Lease("runner-2").TTL(5 * time.Second).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		Eventually(finishReason(ns, "a"), timeout, interval).Should(Equal("Expired/Expired"))
		a := get(ns, "a")
		Expect(a.Status.FinishedAt.Sub(a.Status.GrantedAt.Time)).To(BeNumerically(">=", 5*time.Second))
	})

	It("releases the holder at once when its Lease is deleted", func() {
		lease := holderLease(ns, "runner-3", time.Hour)
		create(req("a", ns).Owner("alice", 1).Lease("runner-3").Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		create(req("b", ns).Owner("bob", 2).Obj())
		Eventually(condOf(ns, "b"), timeout, interval).Should(HavePrefix("False/Queued"))

		Expect(k8s.Delete(ctx, lease)).To(Succeed())
		Eventually(finishReason(ns, "a"), timeout, interval).Should(Equal("Released/HolderLost"))
		Expect(condOf(ns, "a")()).To(ContainSubstring("holder Lease " + ns + "/runner-3 does not exist"))
		expectPhase(ns, "b", locksv1.PhaseGranted)
	})

	It("does not grant a waiter whose holder is already gone", func() {
		create(req("a", ns).Owner("alice", 1).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		holderLease(ns, "runner-4", time.Second)
		create(req("b", ns).Owner("bob", 2).Lease("runner-4").Obj())
		create(req("c", ns).Owner("carol", 3).Lease("no-such-lease").Obj())

		Eventually(finishReason(ns, "c"), timeout, interval).Should(Equal("Released/HolderLost"))
		Eventually(finishReason(ns, "b"), timeout, interval).Should(Equal("Released/HolderLost"))
		Expect(get(ns, "b").Status.GrantedAt).To(BeNil())
		Expect(get(ns, "c").Status.GrantedAt).To(BeNil())
		Expect(get(ns, "a").Status.Phase).To(Equal(locksv1.PhaseGranted))
	})
})

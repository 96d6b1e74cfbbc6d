package controller_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
	"github.com/turnstile-dev/turnstile/internal/queue"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

var vpc = locksv1.LockTarget{Repo: "acme/infra", Path: "modules/vpc", Workspace: "default"}

func req(name, ns string) *LockRequestWrapper {
	return MakeLockRequest(name, ns).Lock(vpc.Repo, vpc.Path, vpc.Workspace)
}

var _ = Describe("Grant engine", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("grants an uncontended request with a token and an expiry, and shows the holder", func() {
		create(req("a", ns).Owner("alice", 100).TTL(30 * time.Minute).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		lr := get(ns, "a")
		Expect(lr.Status.FencingToken).To(BeNumerically(">", 0))
		Expect(lr.Status.GrantedAt).NotTo(BeNil())
		Expect(lr.Status.ExpiresAt.Sub(lr.Status.GrantedAt.Time)).To(Equal(30 * time.Minute))
		Expect(meta.IsStatusConditionTrue(lr.Status.Conditions, locksv1.ConditionReady)).To(BeTrue())
		Expect(lr.Status.Locks).To(ConsistOf(locksv1.LockStatus{Key: "acme/infra/modules/vpc/default", Name: lockkey.Name(vpc), Held: true, FencingToken: lr.Status.FencingToken}))

		pl := projectLock(ns, vpc)
		Expect(pl.Status.Holder).NotTo(BeNil())
		Expect(pl.Status.Holder.Owner).To(Equal("alice"))
		Expect(pl.Status.Holder.Pull).To(BeEquivalentTo(100))
		Expect(pl.Status.Holder.Requests).To(ConsistOf(locksv1.HolderRequest{Name: "a", UID: string(lr.UID)}))
		Expect(pl.Status.FencingToken).To(Equal(lr.Status.FencingToken))
		Expect(meta.IsStatusConditionTrue(pl.Status.Conditions, locksv1.ConditionLocked)).To(BeTrue())
	})

	It("counts the writes of each plan: the create, then the ProjectLock and the grant", func() {
		reg := withMetrics()
		writes := metric(reg, "turnstile_plan_writes")
		create(req("a", ns).Owner("alice", 100).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		// One plan creates the ProjectLock, the next writes it and the grant; waiters' first
		// statuses, if a reconcile saw the request before, add to that.
		Eventually(writes, timeout, interval).Should(BeNumerically(">=", 3))
	})

	It("caches requests without managedFields, and its status writes keep the stored ones", func() {
		create(req("a", ns).Owner("alice", 100).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		managers := func(lr *locksv1.LockRequest) []string {
			var out []string
			for _, f := range lr.ManagedFields {
				out = append(out, string(f.Operation)+"/"+f.Subresource)
			}
			return out
		}
		// The creator's entry survives the controller's status writes from a stripped copy, and
		// the controller's own status entry is there too.
		Expect(managers(get(ns, "a"))).To(ContainElements("Update/", "Update/status"))

		var cached locksv1.LockRequest
		Eventually(func() string {
			Expect(mgr.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a"}, &cached)).To(Succeed())
			return string(cached.Status.Phase)
		}, timeout, interval).Should(Equal(string(locksv1.PhaseGranted)))
		Expect(cached.ManagedFields).To(BeNil())
	})

	It("queues a contended request behind the holder, says who holds it, and hands off on delete", func() {
		create(req("a", ns).Owner("alice", 100).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		create(req("b", ns).Owner("bob", 101).Obj())
		Eventually(condOf(ns, "b"), timeout, interval).Should(Equal("False/Queued: locked by pull #100 (alice); position 1 of 1"))
		b := get(ns, "b")
		Expect(b.Status.Phase).To(Equal(locksv1.PhasePending))
		Expect(b.Status.QueuePosition).To(BeEquivalentTo(1))
		Expect(b.Status.BlockedBy).To(Equal("locked by pull #100 (alice)"))
		Expect(meta.IsStatusConditionTrue(b.Status.Conditions, locksv1.ConditionReconciling)).To(BeTrue())
		Eventually(func() []locksv1.QueueEntry { return projectLock(ns, vpc).Status.Queue }, timeout, interval).
			Should(Equal([]locksv1.QueueEntry{{Request: "b", Owner: "bob", Pull: 101, Priority: locksv1.PriorityNormal}}))

		tokenA := get(ns, "a").Status.FencingToken
		deleteRequest(ns, "a")
		expectPhase(ns, "b", locksv1.PhaseGranted)
		Expect(get(ns, "b").Status.FencingToken).To(BeNumerically(">", tokenA))
		Expect(projectLock(ns, vpc).Status.Holder.Owner).To(Equal("bob"))
	})

	It("releases with spec.release, keeps the record, and hands off", func() {
		create(req("a", ns).Owner("alice", 1).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		create(req("b", ns).Owner("bob", 2).Obj())
		expectPhase(ns, "b", locksv1.PhasePending)
		release(ns, "a")
		expectPhase(ns, "a", locksv1.PhaseReleased)
		expectPhase(ns, "b", locksv1.PhaseGranted)
		a := get(ns, "a")
		Expect(a.Status.FinishedAt).NotTo(BeNil())
		Expect(a.Status.Locks[0].Held).To(BeFalse())
		Expect(meta.FindStatusCondition(a.Status.Conditions, locksv1.ConditionGranted).Reason).To(Equal(locksv1.ReasonReleased))
	})

	It("orders the queue by priority, then first come first served, even within one second", func() {
		// Under the production aging step, not the suite's 3 s: on a loaded machine the hand-offs
		// below take longer than two steps, and by then low has rightly aged to High beside the
		// Normal requests (aged too, never above High) and, first come, goes before n2.
		withManager(func(o *controller.SetupOptions) { o.Queue.AgingStep = queue.DefaultConfig().AgingStep })
		create(req("holder", ns).Owner("h", 1).Obj())
		expectPhase(ns, "holder", locksv1.PhaseGranted)
		// Created back to back: most share a creationTimestamp second.
		order := []struct {
			name string
			prio locksv1.Priority
		}{
			{"low", locksv1.PriorityLow}, {"n1", locksv1.PriorityNormal}, {"n2", locksv1.PriorityNormal},
			{"n3", locksv1.PriorityNormal}, {"crit", locksv1.PriorityCritical}, {"high", locksv1.PriorityHigh},
		}
		for i, o := range order {
			create(req(o.name, ns).Owner(o.name, int64(10+i)).Priority(o.prio).Obj())
			expectPhase(ns, o.name, locksv1.PhasePending)
		}
		want := []string{"crit", "high", "n1", "n2", "n3", "low"}
		prev := "holder"
		gone := map[string]bool{}
		for _, next := range want {
			deleteRequest(ns, prev)
			gone[prev] = true
			expectPhase(ns, next, locksv1.PhaseGranted)
			for _, other := range want {
				if other != next && !gone[other] {
					Expect(get(ns, other).Status.Phase).NotTo(Equal(locksv1.PhaseGranted), "only %s may hold the lock", next)
				}
			}
			prev = next
		}
	})

	It("ages a waiting Low request so later Normal requests do not starve it", func() {
		// The suite's aging step is 3s.
		create(req("holder", ns).Owner("h", 1).Obj())
		expectPhase(ns, "holder", locksv1.PhaseGranted)
		create(req("low", ns).Owner("l", 2).Priority(locksv1.PriorityLow).Obj())
		expectPhase(ns, "low", locksv1.PhasePending)
		// One aging step later the ProjectLock shows low at Normal: only then does normal arrive.
		Eventually(func() []locksv1.QueueEntry { return projectLock(ns, vpc).Status.Queue }, timeout, interval).
			Should(Equal([]locksv1.QueueEntry{{Request: "low", Owner: "l", Pull: 2, Priority: locksv1.PriorityNormal}}))
		create(req("normal", ns).Owner("n", 3).Obj())
		expectPhase(ns, "normal", locksv1.PhasePending)
		Eventually(func() []locksv1.QueueEntry { return projectLock(ns, vpc).Status.Queue }, timeout, interval).Should(HaveLen(2))
		Expect(projectLock(ns, vpc).Status.Queue[0]).To(Equal(locksv1.QueueEntry{Request: "low", Owner: "l", Pull: 2, Priority: locksv1.PriorityNormal}))
		deleteRequest(ns, "holder")
		expectPhase(ns, "low", locksv1.PhaseGranted)
		Expect(get(ns, "normal").Status.Phase).To(Equal(locksv1.PhasePending))
	})

	It("expires a grant at its TTL and passes the lock on", func() {
		create(req("a", ns).Owner("alice", 1).TTL(2 * time.Second).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		create(req("b", ns).Owner("bob", 2).Obj())
		expectPhase(ns, "b", locksv1.PhasePending)
		expectPhase(ns, "a", locksv1.PhaseExpired)
		Expect(condOf(ns, "a")()).To(HavePrefix("False/Expired:"))
		expectPhase(ns, "b", locksv1.PhaseGranted)
	})

	It("renews a grant when spec.ttl is raised", func() {
		create(req("a", ns).Owner("alice", 1).TTL(3 * time.Second).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		lr := get(ns, "a")
		patch := client.MergeFrom(lr.DeepCopy())
		lr.Spec.TTL = &metav1.Duration{Duration: time.Hour}
		Expect(k8s.Patch(ctx, lr, patch)).To(Succeed())
		// A renewal runs the new ttl from when the controller sees it (status.renewedAt).
		Eventually(func() time.Duration {
			l := get(ns, "a")
			if l.Status.RenewedAt == nil {
				return 0
			}
			return l.Status.ExpiresAt.Sub(l.Status.RenewedAt.Time)
		}, timeout, interval).Should(Equal(time.Hour))
		consistentlyPhase(ns, "a", locksv1.PhaseGranted, 4*time.Second)
	})

	It("refuses a renewal over the operator's maximum and keeps the grant as it was", func() {
		create(req("a", ns).Owner("alice", 1).TTL(time.Minute).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		lr := get(ns, "a")
		expires := lr.Status.ExpiresAt.Time
		patch := client.MergeFrom(lr.DeepCopy())
		lr.Spec.TTL = &metav1.Duration{Duration: options.Queue.MaxTTL + time.Hour}
		Expect(k8s.Patch(ctx, lr, patch)).To(Succeed())
		Eventually(condOf(ns, "a"), timeout, interval).Should(ContainSubstring(
			fmt.Sprintf("renewal refused: spec.ttl %s is over this operator's maximum of %s", options.Queue.MaxTTL+time.Hour, options.Queue.MaxTTL)))
		lr = get(ns, "a")
		Expect(lr.Status.Phase).To(Equal(locksv1.PhaseGranted))
		Expect(lr.Status.ExpiresAt.Time).To(Equal(expires))
	})

	It("fails at once with waitTimeout 0s when busy, and with Timeout when the wait elapses", func() {
		create(req("a", ns).Owner("alice", 1).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		create(req("now", ns).Owner("bob", 2).WaitTimeout(0).Obj())
		expectPhase(ns, "now", locksv1.PhaseFailed)
		Expect(condOf(ns, "now")()).To(ContainSubstring("False/Busy: acme/infra/modules/vpc/default is busy and waitTimeout is 0s: locked by pull #1 (alice)"))
		Expect(meta.IsStatusConditionTrue(get(ns, "now").Status.Conditions, locksv1.ConditionStalled)).To(BeTrue())

		create(req("later", ns).Owner("carol", 3).WaitTimeout(time.Second).Obj())
		expectPhase(ns, "later", locksv1.PhasePending)
		expectPhase(ns, "later", locksv1.PhaseFailed)
		Expect(condOf(ns, "later")()).To(HavePrefix("False/Timeout:"))

		free := MakeLockRequest("free", ns).Lock("acme/other", ".", "default").Owner("dave", 4).WaitTimeout(0).Obj()
		create(free)
		expectPhase(ns, "free", locksv1.PhaseGranted)
	})

	It("grants the holder's own identity at once (plan, then apply)", func() {
		create(req("plan", ns).Owner("alice", 7).Command("plan").Obj())
		expectPhase(ns, "plan", locksv1.PhaseGranted)
		create(req("other", ns).Owner("bob", 8).Obj())
		expectPhase(ns, "other", locksv1.PhasePending)
		create(req("apply", ns).Owner("alice", 7).Command("apply").Obj())
		expectPhase(ns, "apply", locksv1.PhaseGranted)
		Expect(get(ns, "apply").Status.FencingToken).To(Equal(get(ns, "plan").Status.FencingToken))
		Eventually(func() int { return len(projectLock(ns, vpc).Status.Holder.Requests) }, timeout, interval).Should(Equal(2))
		// The key passes on only when both of alice's requests are gone.
		deleteRequest(ns, "plan")
		consistentlyPhase(ns, "other", locksv1.PhasePending, time.Second)
		deleteRequest(ns, "apply")
		expectPhase(ns, "other", locksv1.PhaseGranted)
	})

	It("takes several targets in canonical order and is Granted only with all of them", func() {
		k1 := locksv1.LockTarget{Repo: "acme/infra", Path: "a", Workspace: "default"}
		k2 := locksv1.LockTarget{Repo: "acme/infra", Path: "b", Workspace: "default"}
		create(MakeLockRequest("hold-b", ns).Lock(k2.Repo, k2.Path, k2.Workspace).Owner("bob", 2).Obj())
		expectPhase(ns, "hold-b", locksv1.PhaseGranted)
		// Spec order b, a: still acquired a first.
		create(MakeLockRequest("multi", ns).Lock(k2.Repo, k2.Path, k2.Workspace).Lock(k1.Repo, k1.Path, k1.Workspace).Owner("alice", 1).Obj())
		Eventually(func() []bool {
			lr := get(ns, "multi")
			var held []bool
			for _, l := range lr.Status.Locks {
				held = append(held, l.Held)
			}
			return held
		}, timeout, interval).Should(Equal([]bool{false, true}))
		consistentlyPhase(ns, "multi", locksv1.PhasePending, 500*time.Millisecond)
		Expect(projectLock(ns, k1).Status.Holder.Owner).To(Equal("alice"))
		deleteRequest(ns, "hold-b")
		expectPhase(ns, "multi", locksv1.PhaseGranted)
		Expect(projectLock(ns, k2).Status.Holder.Owner).To(Equal("alice"))
		// Releasing the multi-lock request frees both keys.
		deleteRequest(ns, "multi")
		Eventually(func() bool {
			return projectLock(ns, k1).Status.Holder == nil && projectLock(ns, k2).Status.Holder == nil
		}, timeout, interval).Should(BeTrue())
	})

	It("cannot deadlock two multi-lock requests that name the same keys in opposite orders", func() {
		// Without canonical ordering, x takes k1 and y takes k2 and each waits forever.
		for i := 0; i < 5; i++ {
			x := MakeLockRequest(fmt.Sprintf("x%d", i), ns).Lock("acme/infra", "k1", "default").Lock("acme/infra", "k2", "default").Owner("x", int64(i+1)).Obj()
			y := MakeLockRequest(fmt.Sprintf("y%d", i), ns).Lock("acme/infra", "k2", "default").Lock("acme/infra", "k1", "default").Owner("y", int64(i+1)).Obj()
			create(x, y)
			Eventually(func() int {
				n := 0
				for _, name := range []string{x.Name, y.Name} {
					if phaseOf(ns, name)() == locksv1.PhaseGranted {
						n++
					}
				}
				return n
			}, timeout, interval).Should(Equal(1), "exactly one of the pair holds both keys")
			first, second := x.Name, y.Name
			if phaseOf(ns, y.Name)() == locksv1.PhaseGranted {
				first, second = second, first
			}
			deleteRequest(ns, first)
			expectPhase(ns, second, locksv1.PhaseGranted)
			deleteRequest(ns, second)
		}
	})

	It("locks two projects in one directory and workspace independently", func() {
		create(MakeLockRequest("p1", ns).Lock("acme/infra", "shared", "default", "app").Owner("alice", 1).Obj())
		create(MakeLockRequest("p2", ns).Lock("acme/infra", "shared", "default", "db").Owner("bob", 2).Obj())
		expectPhase(ns, "p1", locksv1.PhaseGranted)
		expectPhase(ns, "p2", locksv1.PhaseGranted)
		create(MakeLockRequest("p3", ns).Lock("acme/infra", "shared", "default", "app").Owner("carol", 3).Obj())
		expectPhase(ns, "p3", locksv1.PhasePending)
		consistentlyPhase(ns, "p3", locksv1.PhasePending, 500*time.Millisecond)
	})

	It("force-unlocks when an admin deletes the ProjectLock, and keeps tokens increasing", func() {
		create(req("a", ns).Owner("alice", 1).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		create(req("b", ns).Owner("bob", 2).Obj())
		expectPhase(ns, "b", locksv1.PhasePending)
		tokenA := get(ns, "a").Status.FencingToken
		Expect(k8s.Delete(ctx, projectLock(ns, vpc))).To(Succeed())
		expectPhase(ns, "a", locksv1.PhaseReleased)
		Expect(condOf(ns, "a")()).To(HavePrefix("False/ForceUnlocked:"))
		expectPhase(ns, "b", locksv1.PhaseGranted)
		tokenB := get(ns, "b").Status.FencingToken
		Expect(tokenB).To(BeNumerically(">", tokenA))
		Expect(projectLock(ns, vpc).Status.FencingToken).To(Equal(tokenB))

		// Delete the (now idle) lock with every request gone: the token still increases.
		deleteRequest(ns, "b")
		Eventually(func() bool { return projectLock(ns, vpc).Status.Holder == nil }, timeout, interval).Should(BeTrue())
		Expect(k8s.Delete(ctx, projectLock(ns, vpc))).To(Succeed())
		create(req("c", ns).Owner("carol", 3).Obj())
		expectPhase(ns, "c", locksv1.PhaseGranted)
		Expect(get(ns, "c").Status.FencingToken).To(BeNumerically(">", tokenB))
	})

	It("force-unlocks a holder nobody waits behind and leaves the ProjectLock deleted", func() {
		create(req("a", ns).Owner("alice", 1).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		Expect(k8s.Delete(ctx, projectLock(ns, vpc))).To(Succeed())
		expectPhase(ns, "a", locksv1.PhaseReleased)
		Expect(condOf(ns, "a")()).To(HavePrefix("False/ForceUnlocked:"))
		gone := func() bool {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: lockkey.Name(vpc)}, &locksv1.ProjectLock{})
			return apierrors.IsNotFound(err)
		}
		// The holder is told first; the finalizer goes in the write after.
		Eventually(gone, timeout, interval).Should(BeTrue(), "the force-unlocked ProjectLock must go once its holder was told")
		Consistently(gone, time.Second, interval).Should(BeTrue(), "an idle key's ProjectLock must not come back after a force-unlock")
	})

	It("fails a request with QueueFull when the key's queue is at its cap", func() {
		create(req("holder", ns).Owner("h", 1).Obj())
		expectPhase(ns, "holder", locksv1.PhaseGranted)
		for i := 0; i < options.Queue.QueueCap; i++ {
			create(req(fmt.Sprintf("w%02d", i), ns).Owner("w", int64(100+i)).Obj())
		}
		Eventually(func() int32 { return projectLock(ns, vpc).Status.QueueLength }, timeout, interval).Should(BeEquivalentTo(options.Queue.QueueCap))
		create(req("one-too-many", ns).Owner("late", 999).Obj())
		expectPhase(ns, "one-too-many", locksv1.PhaseFailed)
		Expect(condOf(ns, "one-too-many")()).To(HavePrefix("False/QueueFull:"))
		Expect(projectLock(ns, vpc).Status.QueueLength).To(BeEquivalentTo(options.Queue.QueueCap))
	})

	It("fails a ttl over the operator's maximum with reason Invalid", func() {
		create(req("long", ns).Owner("alice", 1).TTL(options.Queue.MaxTTL + time.Hour).Obj())
		expectPhase(ns, "long", locksv1.PhaseFailed)
		Expect(condOf(ns, "long")()).To(ContainSubstring("False/Invalid: spec.ttl 3h0m0s is over this operator's maximum of 2h0m0s"))
	})

	It("deletes finished requests after the retention period", func() {
		create(req("a", ns).Owner("alice", 1).Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		release(ns, "a")
		expectPhase(ns, "a", locksv1.PhaseReleased)
		Eventually(func() bool {
			var lr locksv1.LockRequest
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a"}, &lr))
		}, options.Retention+timeout, 100*time.Millisecond).Should(BeTrue())
	})
})

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
	"github.com/turnstile-dev/turnstile/internal/queue"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// CommandLocks are cluster-scoped and freeze commands for every namespace, so each spec here
// deletes the ones it makes and its requests before the next spec runs (specs run one at a time).

const applyFrozenMsg = "Apply commands are locked globally: maintenance window"

// freeze creates the CommandLock name, locked with reason (until: optional), and deletes it after
// the spec. It returns once the manager has seen it (its Locked condition says so).
func freeze(name, reason string, until *metav1.Time) *locksv1.CommandLock {
	GinkgoHelper()
	cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: name}}
	cl.Spec = locksv1.CommandLockSpec{Locked: true, Reason: reason, Until: until}
	Expect(k8s.Create(ctx, cl)).To(Succeed())
	DeferCleanup(deleteCommandLock, name)
	Eventually(clCond(name, locksv1.ConditionLocked), timeout, interval).Should(HavePrefix("True/Frozen: "))
	return cl
}

// deleteCommandLock deletes a CommandLock and waits until the manager no longer sees it.
func deleteCommandLock(name string) {
	GinkgoHelper()
	err := k8s.Delete(ctx, &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: name}})
	Expect(client.IgnoreNotFound(err)).To(Succeed())
	Eventually(func() bool {
		gone := apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: name}, &locksv1.CommandLock{}))
		if mgr != nil {
			gone = gone && apierrors.IsNotFound(mgr.Client.Get(ctx, client.ObjectKey{Name: name}, &locksv1.CommandLock{}))
		}
		return gone
	}, timeout, interval).Should(BeTrue(), "commandlock %s is gone", name)
}

// lockApply patches spec.locked of the apply CommandLock, as an admin does with kubectl patch.
func lockApply(locked bool) {
	GinkgoHelper()
	cl := commandLock("apply")
	patch := client.MergeFrom(cl.DeepCopy())
	cl.Spec.Locked = locked
	Expect(k8s.Patch(ctx, cl, patch)).To(Succeed())
}

func commandLock(name string) *locksv1.CommandLock {
	GinkgoHelper()
	var cl locksv1.CommandLock
	Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, &cl)).To(Succeed())
	return &cl
}

// clCond polls a CommandLock condition as "Status/Reason: message".
func clCond(name, typ string) func() string {
	return func() string {
		var cl locksv1.CommandLock
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &cl); err != nil {
			return "error: " + err.Error()
		}
		c := meta.FindStatusCondition(cl.Status.Conditions, typ)
		if c == nil {
			return "<none>"
		}
		return fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message)
	}
}

// clCounts polls a CommandLock's status counters as "active=N blocked=M".
func clCounts(name string) func() string {
	return func() string {
		var cl locksv1.CommandLock
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &cl); err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("active=%d blocked=%d", cl.Status.ActiveHolders, cl.Status.BlockedRequests)
	}
}

var _ = Describe("CommandLock freezes", func() {
	var ns string
	BeforeEach(func() {
		ns = newNamespace()
		// The local control plane deletes no namespaces: delete the requests, or a granted apply
		// left here would count as an active holder in later specs' CommandLocks.
		DeferCleanup(func() {
			Expect(k8s.DeleteAllOf(ctx, &locksv1.LockRequest{}, client.InNamespace(ns))).To(Succeed())
		})
	})

	// at is a request for the key acme/infra/<path>/default.
	at := func(name, path string) *LockRequestWrapper {
		return MakeLockRequest(name, ns).Lock("acme/infra", path, "default")
	}

	It("freezes nothing while no CommandLock exists", func() {
		for _, name := range []string{"apply", locksv1.CommandAll} {
			Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: name}, &locksv1.CommandLock{}))).To(BeTrue(), "no commandlock %s", name)
		}
		create(at("a", "a").Owner("alice", 1).Command("apply").Obj(), at("p", "p").Owner("bob", 2).Command("plan").Obj())
		expectPhase(ns, "a", locksv1.PhaseGranted)
		expectPhase(ns, "p", locksv1.PhaseGranted)
	})

	It("wakes a CommandLock on its requests' events only while it exists", func() {
		r := controller.NewCommandLockReconciler(mgr.Client, nil, nil)
		commands := func(lr *locksv1.LockRequest) func() []string {
			return func() []string {
				var names []string
				for _, q := range controller.RequestCommands(r, ctx, lr) {
					names = append(names, q.Name)
				}
				return names
			}
		}
		apply := at("a", "a").Owner("alice", 1).Command("apply").Obj()
		Expect(commands(apply)()).To(BeEmpty(), "no CommandLock: a request's event wakes none")
		Expect(commands(at("n", "n").Owner("alice", 1).Obj())()).To(BeEmpty(), "a request with no command")

		freeze("apply", "maintenance window", nil)
		Expect(commands(apply)()).To(Equal([]string{"apply"}), "the manager's cache has it, so the mapping does")
		freeze(locksv1.CommandAll, "maintenance window", nil)
		Eventually(commands(apply), timeout, interval).Should(Equal([]string{"apply", locksv1.CommandAll}))
		Expect(commands(at("p", "p").Owner("bob", 2).Command("plan").Obj())()).To(Equal([]string{locksv1.CommandAll}),
			"the freeze of all commands is woken by every command's requests")

		deleteCommandLock(locksv1.CommandAll)
		deleteCommandLock("apply")
		Expect(commands(apply)()).To(BeEmpty())
	})

	It("holds frozen applies with the freeze's reason, keeps their queue place, and grants them in order on thaw", func() {
		create(req("holder", ns).Owner("carol", 3).Command("plan").Obj())
		expectPhase(ns, "holder", locksv1.PhaseGranted)
		freeze("apply", "maintenance window", nil)
		Eventually(clCond("apply", locksv1.ConditionLocked), timeout, interval).Should(Equal("True/Frozen: " + applyFrozenMsg))

		By("applies wait with reason CommandLocked and the freeze's reason; a later plan queues behind them")
		create(req("apply-1", ns).Owner("alice", 1).Command("apply").Obj())
		Eventually(condOf(ns, "apply-1"), timeout, interval).Should(Equal("False/CommandLocked: " + applyFrozenMsg + "; position 1 of 1"))
		create(req("apply-2", ns).Owner("bob", 2).Command("apply").Obj())
		Eventually(condOf(ns, "apply-2"), timeout, interval).Should(Equal("False/CommandLocked: " + applyFrozenMsg + "; position 2 of 2"))
		create(req("plan", ns).Owner("dave", 4).Command("plan").Obj())
		Eventually(condOf(ns, "plan"), timeout, interval).Should(Equal("False/Queued: locked by pull #3 (carol); position 3 of 3"))
		a1 := get(ns, "apply-1")
		Expect(a1.Status.Phase).To(Equal(locksv1.PhasePending))
		Expect(a1.Status.BlockedBy).To(Equal("commandlock/apply"))
		Expect(a1.Status.QueuePosition).To(BeEquivalentTo(1))
		Expect(meta.IsStatusConditionTrue(a1.Status.Conditions, locksv1.ConditionReconciling)).To(BeTrue())

		By("the CommandLock counts the requests it blocks; no apply holds a lock, so it is drained")
		Eventually(clCounts("apply"), timeout, interval).Should(Equal("active=0 blocked=2"))
		Expect(clCond("apply", locksv1.ConditionDrained)()).To(Equal("True/NoActiveHolders: no granted request of this command is left"))

		By("thawing: the applies wait for the holder like anyone, in the places they took")
		lockApply(false)
		Eventually(clCond("apply", locksv1.ConditionLocked), timeout, interval).Should(Equal("False/Thawed: not frozen"))
		Eventually(condOf(ns, "apply-1"), timeout, interval).Should(Equal("False/Queued: locked by pull #3 (carol); position 1 of 3"))
		Eventually(clCounts("apply"), timeout, interval).Should(Equal("active=0 blocked=0"))
		Expect(phaseOf(ns, "apply-2")()).To(Equal(locksv1.PhasePending))

		By("hand-offs follow the queue: apply-1, apply-2, then the plan")
		prev := "holder"
		for _, next := range []string{"apply-1", "apply-2", "plan"} {
			deleteRequest(ns, prev)
			expectPhase(ns, next, locksv1.PhaseGranted)
			prev = next
		}
	})

	It("lets plans and already-granted holders through, and turns Drained when the last apply holder releases", func() {
		create(at("running", "a").Owner("alice", 1).Command("apply").Obj())
		expectPhase(ns, "running", locksv1.PhaseGranted)
		freeze("apply", "maintenance window", nil)

		By("the running apply keeps its grant; the freeze is not drained")
		Eventually(clCounts("apply"), timeout, interval).Should(Equal("active=1 blocked=0"))
		Expect(clCond("apply", locksv1.ConditionDrained)()).To(Equal("False/ActiveHolders: 1 granted request(s) of this command still hold their locks"))
		consistentlyPhase(ns, "running", locksv1.PhaseGranted, time.Second)

		By("a plan is granted, even on a free key where a frozen apply waits ahead of it")
		create(at("frozen", "b").Owner("bob", 2).Command("apply").Obj())
		Eventually(condOf(ns, "frozen"), timeout, interval).Should(HavePrefix("False/CommandLocked: " + applyFrozenMsg))
		create(at("plan", "b").Owner("carol", 3).Command("plan").Obj())
		expectPhase(ns, "plan", locksv1.PhaseGranted)
		Expect(phaseOf(ns, "frozen")()).To(Equal(locksv1.PhasePending))

		By("the running apply finishes: Drained")
		release(ns, "running")
		Eventually(clCond("apply", locksv1.ConditionDrained), timeout, interval).Should(Equal("True/NoActiveHolders: no granted request of this command is left"))
		Expect(clCounts("apply")()).To(Equal("active=0 blocked=1"))
	})

	It("fails a frozen apply with waitTimeout 0s at once, with reason CommandLocked", func() {
		freeze("apply", "maintenance window", nil)
		create(at("now", "a").Owner("alice", 1).Command("apply").WaitTimeout(0).Obj())
		expectPhase(ns, "now", locksv1.PhaseFailed)
		Expect(condOf(ns, "now")()).To(Equal("False/CommandLocked: " + applyFrozenMsg))
		lr := get(ns, "now")
		Expect(meta.FindStatusCondition(lr.Status.Conditions, locksv1.ConditionStalled)).To(HaveField("Reason", locksv1.ReasonCommandLocked))
		Expect(lr.Status.Locks[0].Held).To(BeFalse())

		By("the key stayed free: a plan takes it at once")
		create(at("plan", "a").Owner("bob", 2).Command("plan").WaitTimeout(0).Obj())
		expectPhase(ns, "plan", locksv1.PhaseGranted)
	})

	It("freezes every command with all, not requests without a command, and thaws when deleted", func() {
		freeze(locksv1.CommandAll, "upgrade", nil)
		allMsg := "All commands are locked globally: upgrade; position 1 of 1"
		for i, command := range []string{"plan", "apply", "destroy"} {
			create(at(command, command).Owner("alice", int64(i+1)).Command(command).Obj())
			Eventually(condOf(ns, command), timeout, interval).Should(Equal("False/CommandLocked: " + allMsg))
			Expect(get(ns, command).Status.BlockedBy).To(Equal("commandlock/all"))
		}
		create(at("no-command", "x").Owner("bob", 9).Obj())
		expectPhase(ns, "no-command", locksv1.PhaseGranted)
		Eventually(clCounts(locksv1.CommandAll), timeout, interval).Should(Equal("active=0 blocked=3"))

		By("a command's own CommandLock speaks before all")
		freeze("apply", "maintenance window", nil)
		create(at("apply-2", "apply-2").Owner("carol", 3).Command("apply").Obj())
		Eventually(condOf(ns, "apply-2"), timeout, interval).Should(Equal("False/CommandLocked: " + applyFrozenMsg + "; position 1 of 1"))
		deleteCommandLock("apply")

		By("deleting all thaws every command")
		deleteCommandLock(locksv1.CommandAll)
		for _, name := range []string{"plan", "apply", "destroy", "apply-2"} {
			expectPhase(ns, name, locksv1.PhaseGranted)
		}
	})

	It("thaws by itself at spec.until, with no event to wake it", func() {
		// High priority: a waiting Normal request is decided again at each aging step, which
		// would hide a missing requeue at the thaw.
		until := metav1.NewTime(time.Now().Add(3 * time.Second).Truncate(time.Second))
		cl := freeze("apply", "maintenance window", &until)
		create(at("a", "a").Owner("alice", 1).Command("apply").Priority(locksv1.PriorityHigh).Obj())
		Eventually(condOf(ns, "a"), timeout, interval).Should(HavePrefix("False/CommandLocked: " + applyFrozenMsg))

		expectPhase(ns, "a", locksv1.PhaseGranted)
		granted := get(ns, "a").Status.GrantedAt
		Expect(granted.Time).NotTo(BeTemporally("<", until.Time), "granted at %s, before the freeze ended at %s", granted, until)
		Eventually(clCond("apply", locksv1.ConditionLocked), timeout, interval).Should(Equal("False/Thawed: not frozen"))
		Expect(commandLock("apply").Spec.Locked).To(BeTrue(), "until thaws without touching spec.locked")
		Eventually(eventNotes(cl), timeout, interval).Should(ContainElement("Normal Thawed: apply commands may run again"))
	})

	It("reports freeze and thaw as Events, deleting a frozen CommandLock included", func() {
		cl := freeze("apply", "maintenance window", nil)
		Eventually(eventNotes(cl), timeout, interval).Should(Equal([]string{"Warning Frozen: " + applyFrozenMsg}))
		lockApply(false)
		Eventually(eventNotes(cl), timeout, interval).Should(Equal([]string{
			"Warning Frozen: " + applyFrozenMsg,
			"Normal Thawed: apply commands may run again",
		}))
		lockApply(true)
		Eventually(clCond("apply", locksv1.ConditionLocked), timeout, interval).Should(HavePrefix("True/"))
		deleteCommandLock("apply")
		// The second freeze repeats the first event word for word, which the event recorder may
		// fold into the first one's series; the deletion's thaw says what happened.
		Eventually(eventNotes(cl), timeout, interval).Should(ContainElement("Normal Thawed: apply was deleted: apply commands may run again"))
	})

	It("exports frozen commands and blocked requests as metrics", func() {
		reg := withMetrics()
		frozen := metric(reg, "turnstile_command_frozen", "command", "apply")
		blocked := metric(reg, "turnstile_command_blocked_requests", "command", "apply")
		Expect(frozen()).To(Equal(-1.0), "no series before the CommandLock exists")

		freeze("apply", "maintenance window", nil)
		create(at("a", "a").Owner("alice", 1).Command("apply").Obj(), at("b", "b").Owner("bob", 2).Command("apply").Obj())
		Eventually(frozen, timeout, interval).Should(Equal(1.0))
		Eventually(blocked, timeout, interval).Should(Equal(2.0))

		lockApply(false)
		Eventually(frozen, timeout, interval).Should(Equal(0.0))
		Eventually(blocked, timeout, interval).Should(Equal(0.0))
		expectPhase(ns, "a", locksv1.PhaseGranted)
		expectPhase(ns, "b", locksv1.PhaseGranted)

		deleteCommandLock("apply")
		Eventually(frozen, timeout, interval).Should(Equal(-1.0), "the series goes with the CommandLock")
		Expect(blocked()).To(Equal(-1.0))
	})

	DescribeTable("keeps Atlantis's flag precedence",
		func(flags queue.FreezeFlags, applyLock bool, wantApply, wantLocked string) {
			withManager(func(o *controller.SetupOptions) { o.Freeze = flags })
			cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "apply"}}
			cl.Spec = locksv1.CommandLockSpec{Locked: applyLock, Reason: "maintenance window"}
			Expect(k8s.Create(ctx, cl)).To(Succeed())
			DeferCleanup(deleteCommandLock, "apply")
			Eventually(clCond("apply", locksv1.ConditionLocked), timeout, interval).Should(Equal(wantLocked))

			create(at("apply", "a").Owner("alice", 1).Command("apply").Obj(), at("plan", "b").Owner("bob", 2).Command("plan").Obj())
			expectPhase(ns, "plan", locksv1.PhaseGranted)
			if wantApply == "Granted" {
				expectPhase(ns, "apply", locksv1.PhaseGranted)
				return
			}
			Eventually(condOf(ns, "apply"), timeout, interval).Should(Equal(wantApply))
			Eventually(clCounts("apply"), timeout, interval).Should(Equal("active=0 blocked=1"))
		},
		Entry("--disable-apply freezes apply with its CommandLock unlocked",
			queue.FreezeFlags{DisableApply: true}, false,
			"False/CommandLocked: Apply commands are disabled on this server (--disable-apply); position 1 of 1",
			"True/Frozen: Apply commands are disabled on this server (--disable-apply)"),
		Entry("--disable-apply wins over --disable-global-apply-lock",
			queue.FreezeFlags{DisableApply: true, DisableGlobalApplyLock: true}, true,
			"False/CommandLocked: Apply commands are disabled on this server (--disable-apply); position 1 of 1",
			"True/Frozen: Apply commands are disabled on this server (--disable-apply)"),
		Entry("--disable-global-apply-lock ignores a locked apply CommandLock",
			queue.FreezeFlags{DisableGlobalApplyLock: true}, true,
			"Granted", "False/Thawed: not frozen"),
	)
})

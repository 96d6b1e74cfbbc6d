package controller_test

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/controller"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// offsetClock is the real clock moved to another date: it runs at real speed, so the manager's
// requeues (real timers) fire when its clock reaches the time they were set for, and a spec can
// start seconds before a window's edge in any zone and season.
type offsetClock struct {
	clock.RealClock
	offset time.Duration
}

func (c offsetClock) Now() time.Time                  { return time.Now().Add(c.offset) }
func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// withClockAt runs the rest of the spec under a manager whose clock reads at now.
func withClockAt(at time.Time) {
	GinkgoHelper()
	withManager(func(o *controller.SetupOptions) { o.Clock = offsetClock{offset: time.Until(at)} })
}

// friday is the docs' example: no applies from Friday 16:00 to Monday 08:00, Europe/Berlin.
func friday() locksv1.FreezeWindow {
	return locksv1.FreezeWindow{Name: "friday", Schedule: "0 16 * * 5", Duration: metav1.Duration{Duration: 64 * time.Hour},
		TimeZone: "Europe/Berlin", Action: locksv1.WindowDeny}
}

// windowLock creates the CommandLock apply with windows (not locked by hand) and deletes it after
// the spec.
func windowLock(windows ...locksv1.FreezeWindow) {
	GinkgoHelper()
	const name = "apply"
	cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: name}}
	cl.Spec.Windows = windows
	Expect(k8s.Create(ctx, cl)).To(Succeed())
	DeferCleanup(deleteCommandLock, name)
}

// clWindows polls the apply CommandLock's judged windows as "name active next" lines.
func clWindows() func() string {
	return func() string {
		var cl locksv1.CommandLock
		if err := k8s.Get(ctx, client.ObjectKey{Name: "apply"}, &cl); err != nil {
			return "error: " + err.Error()
		}
		var out []string
		for _, w := range cl.Status.Windows {
			next := "-"
			if w.NextTransition != nil {
				next = w.NextTransition.UTC().Format(time.RFC3339)
			}
			line := w.Name + " " + map[locksv1.WindowState]string{locksv1.WindowOpen: "active", locksv1.WindowClosed: "inactive"}[w.State] + " " + next
			if w.Invalid != "" {
				line += " invalid: " + w.Invalid
			}
			out = append(out, line)
		}
		return strings.Join(out, "\n")
	}
}

// teamWindow labels namespace ns team=a and creates the apply CommandLock with the friday
// window for namespaces labelled so.
func teamWindow(ns string) {
	GinkgoHelper()
	var n corev1.Namespace
	Expect(k8s.Get(ctx, client.ObjectKey{Name: ns}, &n)).To(Succeed())
	n.Labels["team"] = "a"
	Expect(k8s.Update(ctx, &n)).To(Succeed())
	w := friday()
	w.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}
	windowLock(w)
}

var _ = Describe("CommandLock freeze windows", func() {
	var ns string
	berlin, _ := time.LoadLocation("Europe/Berlin")
	BeforeEach(func() {
		ns = newNamespace()
		DeferCleanup(func() {
			Expect(k8s.DeleteAllOf(ctx, &locksv1.LockRequest{}, client.InNamespace(ns))).To(Succeed())
		})
	})
	apply := func(name, namespace string) *LockRequestWrapper {
		return MakeLockRequest(name, namespace).Lock("acme/infra", name, "default").Command("apply").Owner(name, 1)
	}

	It("freezes at the window's opening by its requeue alone, until Monday 08:00 across the DST change", func() {
		// Friday 2027-03-26; the clocks go forward on Sunday the 28th.
		withClockAt(time.Date(2027, time.March, 26, 15, 59, 57, 0, berlin))
		windowLock(friday())
		Eventually(clWindows(), timeout, interval).Should(Equal("friday inactive 2027-03-26T15:00:00Z"))
		Expect(clCond("apply", locksv1.ConditionLocked)()).To(Equal("False/Thawed: not frozen"))

		// Nothing but the requeue at 16:00 wakes the CommandLock. Drained is confirmed only once
		// the window freeze is written, where grants read it: the opening write says
		// FreezeStarting, the next one drained.
		drained := drainedWritten("apply", func() {
			Eventually(clWindows(), timeout, interval).Should(Equal("friday active 2027-03-29T06:00:00Z"), "08:00 CEST")
			Expect(clCond("apply", locksv1.ConditionLocked)()).To(Equal(
				"True/Window: Apply commands are frozen by window friday of commandlock apply: Deny window in force until 2027-03-29T06:00:00Z"))
			Eventually(clCond("apply", locksv1.ConditionDrained), timeout, interval).Should(HavePrefix("True/NoActiveHolders"))
		})
		Expect(drained).To(ContainElement("False/FreezeStarting: a window freeze starts: drained is confirmed once it is written"))

		create(apply("a", ns).Obj(), MakeLockRequest("p", ns).Lock("acme/infra", "p", "default").Command("plan").Obj())
		Eventually(condOf(ns, "a"), timeout, interval).Should(Equal(
			"False/CommandLocked: Apply commands are frozen by window friday of commandlock apply: Deny window in force until 2027-03-29T06:00:00Z; position 1 of 1"))
		expectPhase(ns, "p", locksv1.PhaseGranted)
		consistentlyPhase(ns, "a", locksv1.PhasePending, time.Second)
		Eventually(clCounts("apply"), timeout, interval).Should(Equal("active=0 blocked=1"))
	})

	It("opens a window whose opening the clocks skip as they jump, by its requeue alone (issue 41)", func() {
		// 2026-03-29 01:59:57 CET: at 02:00 the clocks go to 03:00 CEST (01:00 UTC). A nightly
		// Deny window at 02:00 for 2h opens then, and lasts until 05:00 CEST (03:00 UTC).
		withClockAt(time.Date(2026, time.March, 29, 0, 59, 57, 0, time.UTC))
		windowLock(locksv1.FreezeWindow{Name: "nightly", Schedule: "0 2 * * *", Duration: metav1.Duration{Duration: 2 * time.Hour},
			TimeZone: "Europe/Berlin", Action: locksv1.WindowDeny})
		Eventually(clWindows(), timeout, interval).Should(Equal("nightly inactive 2026-03-29T01:00:00Z"), "the next opening is as the gap ends, not tomorrow")
		Eventually(clWindows(), timeout, interval).Should(Equal("nightly active 2026-03-29T03:00:00Z"), "opened at 03:00 CEST by the requeue, until 05:00 CEST")
		create(apply("a", ns).Obj())
		Eventually(condOf(ns, "a"), timeout, interval).Should(HavePrefix("False/CommandLocked: Apply commands are frozen by window nightly"))
	})

	It("thaws at the window's close by its requeue alone, and the waiting apply is granted then", func() {
		// Monday 2027-03-29 07:59:57 CEST, after the DST change.
		withClockAt(time.Date(2027, time.March, 29, 7, 59, 57, 0, berlin))
		windowLock(friday())
		Eventually(clCond("apply", locksv1.ConditionLocked), timeout, interval).Should(HavePrefix("True/Window: "))
		create(apply("a", ns).Obj())
		Eventually(condOf(ns, "a"), timeout, interval).Should(HavePrefix("False/CommandLocked: Apply commands are frozen by window friday"))

		expectPhase(ns, "a", locksv1.PhaseGranted)
		granted := get(ns, "a").Status.GrantedAt.Time
		Expect(granted).NotTo(BeTemporally("<", time.Date(2027, time.March, 29, 6, 0, 0, 0, time.UTC)), "granted before 08:00 CEST")
		Expect(clCond("apply", locksv1.ConditionLocked)()).To(Equal("False/Thawed: not frozen"))
		Expect(clWindows()()).To(Equal("friday inactive 2027-04-02T14:00:00Z"), "next Friday 16:00 CEST")
	})

	It("freezes the namespaces a window's selector matches, and no other", func() {
		withClockAt(time.Date(2027, time.March, 27, 12, 0, 0, 0, berlin))
		other := newNamespace()
		DeferCleanup(func() {
			Expect(k8s.DeleteAllOf(ctx, &locksv1.LockRequest{}, client.InNamespace(other))).To(Succeed())
		})
		teamWindow(ns)
		Eventually(clCond("apply", locksv1.ConditionLocked), timeout, interval).Should(
			Equal("True/Window: Apply commands are frozen by window friday of commandlock apply: Deny window in force (for namespaces team=a) until 2027-03-29T06:00:00Z"))

		create(apply("a", ns).Obj(), apply("b", other).Obj())
		expectPhase(other, "b", locksv1.PhaseGranted)
		Eventually(condOf(ns, "a"), timeout, interval).Should(HavePrefix("False/CommandLocked: Apply commands are frozen by window friday"))
		consistentlyPhase(ns, "a", locksv1.PhasePending, time.Second)
	})

	It("leaves a request a namespace-scoped window freezes out of the deadlock graph, as grants judge it", func() {
		// The classic deadlock's last request, b2, is an apply in a namespace the window
		// selects by label: it waits on the freeze, not on alice, so there is no cycle. The
		// detector reads the namespace's labels as the grant path does; without them it would
		// see b2 waiting for alice#1 and fail it as a deadlock victim.
		withClockAt(time.Date(2027, time.March, 27, 12, 0, 0, 0, berlin))
		teamWindow(ns)
		Eventually(clCond("apply", locksv1.ConditionLocked), timeout, interval).Should(HavePrefix("True/Window: "))

		on := func(name, path, owner string, pull int64) *LockRequestWrapper {
			return MakeLockRequest(name, ns).Lock("acme/infra", path, "default").Owner(owner, pull).Command("plan")
		}
		create(on("a1", "k1", "alice", 1).Obj(), on("b1", "k2", "bob", 2).Obj())
		expectPhase(ns, "a1", locksv1.PhaseGranted)
		expectPhase(ns, "b1", locksv1.PhaseGranted)
		create(on("a2", "k2", "alice", 1).Obj(), on("b2", "k1", "bob", 2).Command("apply").Obj())
		Eventually(condOf(ns, "b2"), timeout, interval).Should(HavePrefix("False/CommandLocked: Apply commands are frozen by window friday"))
		expectPhase(ns, "a2", locksv1.PhasePending) // it may have no status yet when b2 has one
		Consistently(func() []locksv1.LockRequestPhase {
			return []locksv1.LockRequestPhase{phaseOf(ns, "a2")(), phaseOf(ns, "b2")()}
		}, options.DeadlockScan+time.Second, interval).Should(Equal([]locksv1.LockRequestPhase{locksv1.PhasePending, locksv1.PhasePending}),
			"no deadlock victim: b2 waits on the window")
	})

	It("holds back outside an Allow window, and Deny beats an Allow window in force", func() {
		withClockAt(time.Date(2027, time.March, 27, 12, 0, 0, 0, berlin))
		maint := locksv1.FreezeWindow{Name: "maint", Schedule: "0 10 * * *", Duration: metav1.Duration{Duration: 4 * time.Hour},
			TimeZone: "Europe/Berlin", Action: locksv1.WindowAllow, WindowScope: locksv1.WindowScope{Paths: []string{"in-*"}}}
		night := locksv1.FreezeWindow{Name: "night", Schedule: "0 22 * * *", Duration: metav1.Duration{Duration: 10 * time.Hour},
			TimeZone: "Europe/Berlin", Action: locksv1.WindowAllow, WindowScope: locksv1.WindowScope{Paths: []string{"out-*"}}}
		windowLock(maint, night, friday())
		Eventually(clWindows(), timeout, interval).Should(Equal(strings.Join([]string{
			"maint active 2027-03-27T13:00:00Z", "night inactive 2027-03-27T21:00:00Z", "friday active 2027-03-29T06:00:00Z"}, "\n")))
		create(apply("in-a", ns).Obj(), apply("out-a", ns).Obj())
		Eventually(condOf(ns, "in-a"), timeout, interval).Should(HavePrefix("False/CommandLocked: Apply commands are frozen by window friday"), "Deny beats Allow")
		Eventually(condOf(ns, "out-a"), timeout, interval).Should(HavePrefix("False/CommandLocked: Apply commands are frozen by window friday"))

		// Without the Deny window: in-a runs inside maint, out-a waits outside night.
		cl := commandLock("apply")
		patch := client.MergeFrom(cl.DeepCopy())
		cl.Spec.Windows = []locksv1.FreezeWindow{maint, night}
		Expect(k8s.Patch(ctx, cl, patch)).To(Succeed())
		expectPhase(ns, "in-a", locksv1.PhaseGranted)
		Eventually(condOf(ns, "out-a"), timeout, interval).Should(Equal(
			"False/CommandLocked: Apply commands are frozen by window night of commandlock apply: outside every Allow window; the next opens at 2027-03-27T21:00:00Z; position 1 of 1"))
	})

	It("reports a window it cannot evaluate as Stalled/Invalid and freezes its scope", func() {
		bad := friday()
		bad.Name, bad.TimeZone = "mars", "Mars/Olympus_Mons"
		windowLock(bad)
		Eventually(clCond("apply", locksv1.ConditionStalled), timeout, interval).Should(Equal(
			`True/Invalid: invalid windows freeze their scope until fixed: window mars: unknown time zone "Mars/Olympus_Mons"`))
		Expect(clCond("apply", locksv1.ConditionLocked)()).To(HavePrefix("True/Window: "))
		create(apply("a", ns).Obj())
		Eventually(condOf(ns, "a"), timeout, interval).Should(HavePrefix("False/CommandLocked: Apply commands are frozen by window mars of commandlock apply: it cannot be evaluated"))
	})

	It("grants a request with bypassFreeze past a window, with an event and a metric", func() {
		reg := withMetrics(func(o *controller.SetupOptions) {
			o.Clock = offsetClock{offset: time.Until(time.Date(2027, time.March, 27, 12, 0, 0, 0, berlin))}
		})
		bypasses := metric(reg, "turnstile_freeze_bypasses_total", "command", "apply")
		windowLock(friday())
		Eventually(clCond("apply", locksv1.ConditionLocked), timeout, interval).Should(HavePrefix("True/Window: "))
		create(apply("a", ns).Obj())
		Eventually(condOf(ns, "a"), timeout, interval).Should(HavePrefix("False/CommandLocked: "))

		hotfix := apply("b", ns).Obj()
		hotfix.Spec.BypassFreeze = &locksv1.FreezeBypass{Reason: "incident 4711"}
		create(hotfix)
		expectPhase(ns, "b", locksv1.PhaseGranted)
		Eventually(eventNotes(get(ns, "b")), timeout, interval).Should(ContainElement(
			"Warning FreezeBypassed: granted past a freeze (commandlock/apply: Apply commands are frozen by window friday of commandlock apply: Deny window in force until 2027-03-29T06:00:00Z) by spec.bypassFreeze: incident 4711"))
		Eventually(bypasses, timeout, interval).Should(Equal(1.0))
		consistentlyPhase(ns, "a", locksv1.PhasePending, time.Second)
	})

	DescribeTable("refuses windows CEL can judge at admission",
		func(edit func(*locksv1.FreezeWindow), want string) {
			w := friday()
			edit(&w)
			cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "apply"}}
			cl.Spec.Windows = []locksv1.FreezeWindow{w}
			err := k8s.Create(ctx, cl)
			if err == nil {
				DeferCleanup(deleteCommandLock, "apply")
			}
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("an unknown action", func(w *locksv1.FreezeWindow) { w.Action = "Maybe" }, `supported values: "Deny", "Allow"`),
		Entry("a zero duration", func(w *locksv1.FreezeWindow) { w.Duration.Duration = 0 }, "duration must be between 1s and 168h"),
		Entry("a duration over a week", func(w *locksv1.FreezeWindow) { w.Duration.Duration = 200 * time.Hour }, "duration must be between 1s and 168h"),
		Entry("four cron fields", func(w *locksv1.FreezeWindow) { w.Schedule = "0 16 * *" }, "schedule must be a five-field cron expression"),
		Entry("a cron with a time zone prefix", func(w *locksv1.FreezeWindow) { w.Schedule = "CRON_TZ=UTC 0 16 * * 5" }, "schedule may contain only"),
		Entry("a zone that is no IANA name", func(w *locksv1.FreezeWindow) { w.TimeZone = "Europe Berlin" }, "timeZone must be an IANA zone name"),
		Entry("no name", func(w *locksv1.FreezeWindow) { w.Name = "" }, "spec.windows[0].name"),
	)
})

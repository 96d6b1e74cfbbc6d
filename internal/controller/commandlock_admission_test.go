package controller_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// edgeBound is how long after a window's edge (by the manager's clock) a running manager may
// take to write its judgement of it into status.admission, on a loaded machine: the reconciler
// wakes a millisecond past the edge (nextWakeUp) and writes once.
const edgeBound = 5 * time.Second

var _ = Describe("CommandLock write freezes (status.admission)", func() {
	const name = "weekend-writes"
	// judgement polls the CommandLock's status.admission as "judgedAt | from..until window, ...".
	judgement := func() func() string {
		return func() string {
			var cl locksv1.CommandLock
			if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &cl); err != nil {
				return "error: " + err.Error()
			}
			a := cl.Status.Admission
			if a == nil || a.JudgedAt == nil {
				return "<not judged>"
			}
			out := a.JudgedAt.UTC().Format(time.RFC3339) + " |"
			for _, iv := range a.Intervals {
				until := "-"
				if iv.Until != nil {
					until = iv.Until.UTC().Format(time.RFC3339)
				}
				out += fmt.Sprintf(" %s..%s %s", iv.From.UTC().Format(time.RFC3339), until, iv.Window)
			}
			return out
		}
	}

	// It waits some 35 s for the edges (SpecPriority: the seconds, for RunSuiteInShards's shards).
	It("judges the windows ahead, judges again within its bound of each edge with a running manager, and not on other events", SpecPriority(35), func() {
		// Friday 2027-03-26, 30 s before the Friday window opens at 16:00 Berlin (15:00 UTC): room
		// for the manager to start on a loaded machine.
		at := time.Date(2027, time.March, 26, 14, 59, 30, 0, time.UTC)
		offset := time.Until(at)
		withClockAt(at)
		w := friday()
		w.Duration = metav1.Duration{Duration: 5 * time.Second} // closes at 15:00:05 UTC
		cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: name}}
		cl.Spec.Windows = []locksv1.FreezeWindow{w}
		cl.Spec.Admission = &locksv1.AdmissionFreeze{}
		create(cl)
		DeferCleanup(deleteCommandLock, name)

		By("judged ahead at creation, with the manager's name")
		Eventually(judgement(), timeout, interval).Should(MatchRegexp(
			`^2027-03-26T14:59:[345]\dZ \| 2027-03-26T15:00:00Z\.\.2027-03-26T15:00:05Z friday 2027-04-02T14:00:00Z\.\.2027-04-02T14:00:05Z friday 2027-04-03T14:59:[345]\dZ\.\.- not judged past the horizon$`))
		before := judgement()()
		var got locksv1.CommandLock
		Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, &got)).To(Succeed())
		Expect(got.Status.Admission.Manager).NotTo(BeEmpty(), "the manager names itself")

		By("a LockRequest of the command, before the edge: reconciled, not judged again")
		ns := newNamespace()
		lr := MakeLockRequest("a", ns).Lock("acme/infra", "a", "default").Command(name).Owner("a", 1).Obj()
		create(lr)
		// Gone before the next spec: a granted request of any command counts as an active
		// holder of CommandLock "all", which other specs count.
		DeferCleanup(func() {
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, lr))).To(Succeed())
			Eventually(func() bool {
				return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(lr), &locksv1.LockRequest{}))
			}, timeout, interval).Should(BeTrue())
		})
		Eventually(clCounts(name), timeout, interval).Should(Equal("active=1 blocked=0"))
		Expect(judgement()()).To(Equal(before))

		By("the opening, then the close: each judged within the bound, by the requeue alone")
		for _, edge := range []time.Time{time.Date(2027, time.March, 26, 15, 0, 0, 0, time.UTC), time.Date(2027, time.March, 26, 15, 0, 5, 0, time.UTC)} {
			// The manager's clock runs at real speed: the edge is this far away in real time.
			deadline := edge.Add(-offset).Add(edgeBound)
			Eventually(judgement()).WithTimeout(time.Until(deadline)).WithPolling(interval).Should(HavePrefix(edge.Format(time.RFC3339)+" |"),
				"judged at %s within %s of the edge", edge, edgeBound)
		}
		Expect(judgement()()).To(MatchRegexp(`^2027-03-26T15:00:05Z \| 2027-04-02T14:00:00Z\.\.2027-04-02T14:00:05Z friday 2027-04-03T15:00:05Z\.\.- not judged past the horizon$`))
	})
})

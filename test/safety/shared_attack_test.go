package safety

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/testing/lag"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// The adversarial review of shared locks (issue #31): interleavings staged on the real
// reconcilers with caches the test holds back, the store checked after every step.
var _ = Describe("Shared locks under attack", func() {
	var (
		ns  string
		inv *lag.Invariants
		cfg queue.Config
	)
	BeforeEach(func() {
		ns = newNamespace()
		inv = invariants()
		cfg = queue.DefaultConfig()
	})

	// hole 8 through a live holder read: hole 8's live ProjectLock read looks at the holders
	// the request cache has; one the cache does not have yet is read live (confirmHolders) and
	// was decided on with the older cached ProjectLock.
	reissueBehindRequestCache := func(shared bool) {
		a, b, c := newManager("A", 0, cfg), newManager("B", 0, cfg), newManager("C", 0, cfg)
		app := target("app")
		k := keyOf(ns, app)
		syncHistory()
		beforeR := history.Mark()
		w := MakeLockRequest("r", ns).Lock(app.Repo, app.Path, app.Workspace).Owner("bob", 0)
		if shared {
			w.Shared()
		}
		create(w)

		By("A crashes after creating the ProjectLock and listing R on it, before writing R")
		a.view.CatchUp()
		a.view.CrashAfter(2)
		if _, err := a.reconcileKey(k); err != nil {
			Expect(err).To(MatchError(lag.ErrCrashed))
		}
		a.view.Revive()
		syncHistory()
		listed := history.Mark()
		expectSafe(inv, ns, "A crashed mid-grant")

		By("B re-issues the grant on a new write of the ProjectLock and tells R its token")
		syncHistory()
		b.view.CatchUp()
		b.decide(k)
		expectSafe(inv, ns, "B re-issued R's grant")
		r := getRequest(ns, "r")
		Expect(r.Status.Phase).To(Equal(locksv1.PhaseGranted))
		token := r.Status.Locks[0].FencingToken

		By("C decides with its request cache from before R existed and its ProjectLock cache at the first listing")
		syncHistory()
		m := history.Mark()
		m[lag.LockRequests] = beforeR[lag.LockRequests]
		m[lag.ProjectLocks] = listed[lag.ProjectLocks]
		c.view.AdvanceToMark(m)
		c.decide(k)
		expectSafe(inv, ns, "C decided from a ProjectLock cache behind R's token, R read live")
		Expect(getRequest(ns, "r").Status.Locks[0].FencingToken).To(Equal(token), "R keeps the token B gave it")
	}
	It("hole 8b: a holder read live past a lagging request cache is never written the older token its stale ProjectLock lists", func() {
		reissueBehindRequestCache(false)
	})
	It("hole 8b, shared: a shared holder read live past a lagging request cache keeps its token", func() {
		reissueBehindRequestCache(true)
	})
})

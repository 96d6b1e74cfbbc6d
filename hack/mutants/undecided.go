package main

// Keys with work are decided (issue #47): decisions before position refreshes, waiters told at
// once and yielding to new work, deadlines counted from the read, and the watchdog that decides
// a key no decision reached. In a file of their own so the list above stays the grant path's.

func init() {
	mutants = append(mutants,
		mutant{name: "refresh-after-decisions", pkg: queuePkg, focus: "run:TestDecisionsBeforeRefreshes", guard: "a waiter's first status is planned before every position refresh", edits: []edit{
			{"refresh-after-decisions", "if u.Refresh != refresh {", "if refresh {"},
		}},
		mutant{name: "waiters-yield-to-events", pkg: controls, focus: "past the position refreshes", guard: "the waiters' statuses (first statuses, position refreshes) stop when an event brings the key new work, so the next decision is not held up behind them", edits: []edit{
			{"waiters-yield-to-events", "if x.r.keys.wakes(x.req) != x.wakes {", "if false && x.r.keys.wakes(x.req) != x.wakes {"},
		}},
		mutant{name: "waiters-written-at-once", pkg: controls, focus: "told at once", guard: "a plan's waiters' statuses are written together, a batch at a time, not one round trip after another", edits: []edit{
			{"waiters-written-at-once", "for len(batch) < waiterWritesAtOnce && len(ws) > 0 {", "for len(batch) < 1 && len(ws) > 0 {"},
		}},
		mutant{name: "deadline-from-the-read", pkg: controls, focus: "run:TestDeadlineCountsFromTheRead", guard: "a decision's deadline is requeued for what is left of it after the plan's writes", edits: []edit{
			{"deadline-from-the-read", "	if d.RequeueAfter > 0 {\n", "	if false && d.RequeueAfter > 0 {\n"},
		}},
		mutant{name: "watchdog-undecided-request", pkg: controls, focus: "run:TestPendingWork", guard: "the watchdog sees a request without a status as work of the key it waits in", edits: []edit{
			{"watchdog-undecided-request", `case lr.Status.Phase == "" && waits && ref.Name == name:`, `case false && lr.Status.Phase == "" && waits && ref.Name == name:`},
		}},
		mutant{name: "watchdog-release", pkg: controls, focus: "run:TestPendingWork", guard: "the watchdog sees a holder asked to release as work", edits: []edit{
			{"watchdog-release", "case held && lr.Spec.Release && !queue.AwaitsSpoke(lr):", "case false && held && lr.Spec.Release && !queue.AwaitsSpoke(lr):"},
		}},
		mutant{name: "watchdog-expiry", pkg: controls, focus: "run:TestPendingWork", guard: "the watchdog sees a grant past its expiry as work", edits: []edit{
			{"watchdog-expiry", "case lr.Status.Phase == locksv1.PhaseGranted && held && lr.Status.ExpiresAt != nil", "case false && lr.Status.Phase == locksv1.PhaseGranted && held && lr.Status.ExpiresAt != nil"},
		}},
		mutant{name: "watchdog-gone-holder", pkg: controls, focus: "run:TestPendingWork", guard: "the watchdog sees a listed holder that is gone as work", edits: []edit{
			{"watchdog-gone-holder", "case !ok:", "case false && !ok:"},
		}},
		mutant{name: "watchdog-final-holder", pkg: controls, focus: "run:TestPendingWork", guard: "the watchdog sees a listed holder that is final as work", edits: []edit{
			{"watchdog-final-holder", "case lr.Status.Phase.IsFinal():", "case false && lr.Status.Phase.IsFinal():"},
		}},
		mutant{name: "watchdog-unwritten-grant", pkg: controls, focus: "run:TestPendingWork", guard: "the watchdog sees a grant the ProjectLock lists and its request does not show as work", edits: []edit{
			{"watchdog-unwritten-grant", "case !lr.Status.Phase.IsFinal() && !holds(lr, name):", "case false && !lr.Status.Phase.IsFinal() && !holds(lr, name):"},
		}},
		mutant{name: "watchdog-free-key", pkg: controls, focus: "run:TestPendingWork", guard: "the watchdog sees a free key with a waiter queued behind nobody as work", edits: []edit{
			{"watchdog-free-key", "if !lock.Status.Held() {", "if false && !lock.Status.Held() {"},
		}},
		mutant{name: "watchdog-counting-free-place", pkg: controls, focus: "run:TestPendingWork", guard: "the watchdog sees a counting key with a place free and a shared waiter next in line as work", edits: []edit{
			{"watchdog-counting-free-place", "if lr.Status.QueuePosition == 1 && queue.SharedOn(lr, name) &&", "if false && lr.Status.QueuePosition == 1 && queue.SharedOn(lr, name) &&"},
		}},
		mutant{name: "watchdog-decides-live", pkg: controls, focus: "worker hangs in a write", guard: "the watchdog decides an undecided key itself, from a live read, not only wakes it", edits: []edit{
			{"watchdog-decides-live", "if _, err := w.r.decide(dctx, req, true); err != nil {", "if err := error(nil); err != nil { _ = dctx"},
		}},
	)
}

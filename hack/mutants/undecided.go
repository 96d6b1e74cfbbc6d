package main

// Keys with work are decided (issue #47): decisions before position refreshes, waiters told at
// once and yielding to new work, deadlines counted from the read, and the watchdog that decides
// a key no decision reached. In a file of their own so the list above stays the grant path's.

const queuePkg = "./internal/queue/"

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
	)
}

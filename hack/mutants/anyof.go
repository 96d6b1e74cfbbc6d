package main

// The deadlock detector's any-of waits (internal/deadlock, internal/controller's live re-read):
// a waiter let in by any one holder leaving is blocked only while every other holder is.
func init() {
	const deadlockPkg = "./internal/deadlock/"
	mutants = append(mutants,
		mutant{name: "deadlock-any-of", pkg: deadlockPkg, focus: "run:TestAnyOf$", guard: "a shared waiter on a full key waits for any one of its holders, not for every one", edits: []edit{
			{"deadlock-any-of", "(ks.Full || w.KeptOut)", "(false && ks.Full || w.KeptOut)"},
		}},
		mutant{name: "deadlock-counting-any-of", pkg: deadlockPkg, focus: "run:TestCountingWaits$", guard: "a shared waiter a counting bound keeps out waits for any one of the key's holders, not for every one", edits: []edit{
			{"deadlock-counting-any-of", "(ks.Full || w.KeptOut)", "(ks.Full || false && w.KeptOut)"},
		}},
		mutant{name: "deadlock-kept-out-blocks-behind", pkg: deadlockPkg, focus: "run:TestCountingWaits$", guard: "the shared waiters behind one a counting bound keeps out wait for it (FIFO at the bound), as behind a writer", edits: []edit{
			{"deadlock-kept-out-blocks-behind", "if !w.Shared || w.KeptOut {", "if !w.Shared {"},
		}},
		mutant{name: "deadlock-any-of-one-wait", pkg: deadlockPkg, focus: "run:TestAnyOf$", guard: "an any-of wait's arcs are one wait, met by any one of them (graph reduction)", edits: []edit{
			{"deadlock-any-of-one-wait", "			if a > lo && g.arcs[a].anyOf", "			if false && a > lo && g.arcs[a].anyOf"},
		}},
	)
}

func init() {
	mutants = append(mutants,
		mutant{name: "deadlock-any-of-holders-reread", pkg: safety, focus: "full shared key", guard: "a deadlock through an any-of hop fails a victim only while every other holder of its key still holds it, re-read live", edits: []edit{
			{"deadlock-any-of-holders-reread", "		if !held {\n", "		if false && !held {\n"},
		}},
	)
}

func init() {
	mutants = append(mutants,
		mutant{name: "deadlock-counting-kept-out", pkg: safety, focus: "counting key", guard: "the detector marks a shared waiter that a counting bound keeps out, so it waits for the key's holders", edits: []edit{
			{"deadlock-counting-kept-out", "KeptOut: shared && keptOut(", "KeptOut: false && keptOut("},
		}},
	)
}

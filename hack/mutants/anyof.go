package main

// The deadlock detector's any-of waits (internal/deadlock, internal/controller's live re-read):
// a waiter let in by any one holder leaving is blocked only while every other holder is.
func init() {
	const deadlockPkg = "./internal/deadlock/"
	mutants = append(mutants,
		mutant{name: "deadlock-any-of", pkg: deadlockPkg, focus: "run:TestAnyOf$", guard: "a shared waiter on a full key waits for any one of its holders, not for every one", edits: []edit{
			{"deadlock-any-of", "	return w.Shared && ks.Holder == nil && ks.Full\n", "	return false && w.Shared && ks.Holder == nil && ks.Full\n"},
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

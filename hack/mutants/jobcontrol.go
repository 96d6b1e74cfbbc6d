package main

// run under job control (internal/plugin/keeper): nothing that stops run or its keeper
// lets the command outlive the lease (docs/run.md, "Job control").
func init() {
	mutants = append(mutants,
		mutant{name: "run-keeper-own-session", pkg: keeperPkg, focus: "run:TestKeeperOwnSession", guard: "the keeper is in a session of its own, out of reach of the terminal's job control and of a stop of run's group", edits: []edit{
			{"run-keeper-own-session", "	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}\n", "	cmd.SysProcAttr = &syscall.SysProcAttr{}\n"},
		}},
		mutant{name: "run-ctrl-z-suspends-tree", pkg: keeperPkg, focus: "run:TestKeeperSuspendsAndResumesTheTree", guard: "Ctrl-Z of run suspends the command's tree, as the terminal suspends a foreground job", edits: []edit{
			{"run-ctrl-z-suspends-tree", "		k.signalTree(syscall.SIGTSTP)\n", "		_ = syscall.SIGTSTP\n"},
		}},
		mutant{name: "run-stopped-tree-continued", pkg: keeperPkg, focus: "run:TestKeeperStopsASuspendedTreeGracefully", guard: "a suspended tree that must stop is continued after SIGTERM, so it shuts down within the grace", edits: []edit{
			{"run-stopped-tree-continued", "	k.signalTree(syscall.SIGCONT)\n", ""},
		}},
		mutant{name: "run-keeper-continued", pkg: keeperPkg, focus: "run:TestRunContinuesAStoppedKeeper", guard: "run continues a keeper something stopped, so that it can still stop the tree at the deadline", edits: []edit{
			{"run-keeper-continued", "	if err == nil && p.State == 'T' {\n", "	if false && err == nil && p.State == 'T' {\n"},
		}},
	)
}

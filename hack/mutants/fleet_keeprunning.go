package main

// The keep-running opt-out of a fleet's partition stop (docs/fleet.md "Opting out", issue #45):
// who may write fleet.turnstile.dev/on-partition (config/admission/keep-running.yaml, killed by
// test/admission impersonating users through the shipped roles), the hub request with no Lease
// and no end, the agent that does not stop it, and the hub's count of such grants.

func init() {
	const focus = "keep-running opt-out"
	mutants = append(mutants,
		mutant{name: "keep-running-value", pkg: admissionSuite, focus: focus, guard: "fleet.turnstile.dev/on-partition takes keep-running only", edits: []edit{
			{"keep-running-value", "      variables.kept || ((!variables.own.hasValue() ||", "      true || ((!variables.own.hasValue() ||"},
		}},
		mutant{name: "keep-running-fixed", pkg: admissionSuite, focus: focus, guard: "fleet.turnstile.dev/on-partition is not added, changed or removed once a request or workload exists", edits: []edit{
			{"keep-running-fixed", "  - expression: request.operation == 'CREATE' || variables.kept\n", "  - expression: true || variables.kept\n"},
		}},
		mutant{name: "keep-running-verb", pkg: admissionSuite, focus: focus, guard: "a request or gated workload created with fleet.turnstile.dev/on-partition needs its creator's keeprunning permission", edits: []edit{
			{"keep-running-verb", "      request.operation != 'CREATE' || !variables.asked || variables.jobsPod ||\n", "      true || !variables.asked || variables.jobsPod ||\n"},
		}},
		mutant{name: "keep-running-no-ttl", pkg: admissionSuite, focus: focus, guard: "a keep-running request or workload has no ttl (a keep-running grant has no end on the hub)", edits: []edit{
			{"keep-running-no-ttl", "      !variables.asked ||\n", "      true ||\n"},
		}},
		mutant{name: "spoke-keep-running-no-lease", pkg: spokePkg, focus: "run:TestHubRequestKeepRunning", guard: "the hub request of a keep-running spoke request names no holder Lease (and says why to the hub's policy)", edits: []edit{
			{"spoke-keep-running-no-lease", "\tif KeepRunning(spoke) {\n", "\tif false && KeepRunning(spoke) {\n"},
		}},
		mutant{name: "spoke-keep-running-without-ttl", pkg: spokePkg, focus: "run:TestHubRequestKeepRunning", guard: "a spoke request with the opt-out and a ttl is an ordinary one: its hub request names the spoke's Lease, and it is stopped on a partition", edits: []edit{
			{"spoke-keep-running-without-ttl", "\treturn locksv1.KeepsRunning(spoke.Annotations) && spoke.Spec.TTL == nil\n", "\treturn locksv1.KeepsRunning(spoke.Annotations)\n"},
		}},
		mutant{name: "spoke-keep-running-not-stopped", pkg: spokePkg, focus: "run:TestPartitionAction|TestKeepRunningHolderSurvivesAPartition", guard: "a running keep-running holder is not stopped on a partition", edits: []edit{
			{"spoke-keep-running-not-stopped", "\tcase running && keep:\n", "\tcase false && running && keep:\n"},
		}},
		mutant{name: "queue-keep-running-no-expiry", pkg: queuePkg, focus: "run:TestDecideKeepRunningHasNoExpiry", guard: "a spoke's keep-running grant (no holder Lease, the annotation) has no end on the hub", edits: []edit{
			{"queue-keep-running-no-expiry", "\tif NoExpiry(req) {\n", "\tif false && NoExpiry(req) {\n"},
		}},
		mutant{name: "hub-keep-running-opted-out", pkg: hubPkg, focus: "run:TestKeepsRunning", guard: "the Spoke counts as keep-running only grants that opted out (the annotation), not a delegate's grant for a holder in the cluster", edits: []edit{
			{"hub-keep-running-opted-out", "\t\tlocksv1.KeepsRunning(lr.Annotations)\n", "\t\ttrue\n"},
		}},
		mutant{name: "hub-spoke-keep-running-counted", pkg: hubPkg, focus: "run:TestKeepsRunning", guard: "the Spoke counts as keep-running only its grants with no holder Lease", edits: []edit{
			{"hub-spoke-keep-running-counted", "\treturn lr.Spec.Holder.Cluster != \"\" && lr.Spec.Holder.Lease == \"\" && ", "\treturn lr.Spec.Holder.Cluster != \"\" && "},
		}},
	)
}

package main

// The compatibility floor (issue #43; config/compatibility): a downgrade below the level of the
// release that wrote a cluster's state is refused. Killed by test/admission, which installs the
// bundle and applies one labelled a level lower.
func init() {
	mutants = append(mutants,
		mutant{name: "compatibility-floor", pkg: "./test/admission/", focus: "The compatibility floor", guard: "an update of a Turnstile CRD, Deployment or RBAC object that lowers its compatibility level (or drops it) is refused", edits: []edit{
			{"compatibility-floor", "  - expression: variables.level >= variables.was", "  - expression: true || variables.level >= variables.was"},
		}},
	)
}

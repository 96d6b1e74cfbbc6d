package main

// The guards of the install without MutatingAdmissionPolicy (issue #46): what the mutating
// policies would fill in is required (config/admission/filled.yaml, owner.yaml), and
// Turnstile's clients write it themselves. Killed by test/validatingonly, which installs
// config/overlays/validating-only on any version.
const validatingOnlySuite = "./test/validatingonly/"

func init() {
	mutants = append(mutants,
		mutant{name: "owner-creator-unfilled", pkg: validatingOnlySuite, focus: "a delegate's request must record its creator", guard: "a request with no recorded creator is accepted only from its owner (a delegate's must name itself)", edits: []edit{
			{"owner-creator-unfilled", "(variables.creator == '' && variables.owner == variables.user)", "variables.creator == ''"},
		}},
		mutant{name: "workload-held-unfilled", pkg: validatingOnlySuite, focus: "an annotated Pod must carry|an annotated Job must be suspended", guard: "an annotated Pod or Job that is not held (gate, suspend) is refused where nothing holds it", edits: []edit{
			{"workload-held-unfilled", "  - expression: variables.labelled && variables.stamped && variables.held", "  - expression: variables.labelled && variables.stamped"},
		}},
		mutant{name: "workload-held-unstamped", pkg: validatingOnlySuite, focus: "an annotated Pod must carry", guard: "an annotated workload must record its creator as the user who creates it (its lock's owner)", edits: []edit{
			{"workload-held-unstamped", "  - expression: variables.labelled && variables.stamped && variables.held", "  - expression: variables.labelled && variables.held"},
		}},
		mutant{name: "holder-lease-unstamped", pkg: validatingOnlySuite, focus: "a holder Lease must record its creator", guard: "a holder Lease must record its creator as the user who creates it, or it would be unprotected", edits: []edit{
			{"holder-lease-unstamped", "  - expression: variables.creator != ''", "  - expression: true || variables.creator != ''"},
		}},
		mutant{name: "client-records-creator", pkg: validatingOnlySuite, focus: "Turnstile's own clients", guard: "pkg/client records the caller as its request's creator (a delegate's request needs it)", edits: []edit{
			{"client-records-creator", "	lr.Annotations = map[string]string{AnnotationCreatedBy: self}\n", "	_ = self\n"},
		}},
		mutant{name: "workload-records-creator", pkg: validatingOnlySuite, focus: "an annotated Pod must carry", guard: "the manager records itself as the creator of a workload's request", edits: []edit{
			{"workload-records-creator", "				AnnotationCreatedBy:   self,\n", "				AnnotationCreatedBy + \"-not\": self,\n"},
		}},
		mutant{name: "compat-emulated-version", pkg: "./internal/compat/", focus: "run:^(TestParseVersion|TestWarningSaysWhichSide)$", guard: "a server emulating an older version (--emulated-version) is judged by the version it emulates (test/install's 'outside the support range' kills it too, on 1.33 to 1.35)", edits: []edit{
			{"compat-emulated-version", "	if errMajor == nil && errMinor == nil && (major != v.Major || minor != v.Minor) {", "	if false && errMajor == nil && errMinor == nil && (major != v.Major || minor != v.Minor) {"},
		}},
		mutant{name: "heartbeat-records-creator", pkg: validatingOnlySuite, focus: "Turnstile's own clients", guard: "pkg/workdir's heartbeat records its caller as its Lease's creator", edits: []edit{
			{"heartbeat-records-creator", "	if err := s.self.Stamp(ctx, s.c, lease); err != nil {", "	if err := error(nil); err != nil {"},
		}},
	)
}

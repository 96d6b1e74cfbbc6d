package main

// The lock key's readers (internal/lockkey.Parse, the workload annotation's admission policy in
// config/admission/workload-gate.yaml): each refuses what the CRDs refuse, and the policy's
// refusal stays readable. FuzzKey holds them together; test/gated proves the policy on a real
// API server.
func init() {
	const lockkeyPkg = "./internal/lockkey/"
	mutants = append(mutants,
		mutant{name: "lockkey-parse-validates", pkg: lockkeyPkg, focus: "run:FuzzKey|TestParse", guard: "a key whose parts the API server would refuse is refused by Parse (the plugin's --lock, the controller's annotation), as the policy refuses it", edits: []edit{
			{"lockkey-parse-validates", "		err = validate(t)\n", "		_ = validate(t)\n"},
		}},
		mutant{name: "workload-key-lengths", pkg: gatedSuite, focus: "refuses a workload whose annotations", guard: "the lock annotation's keys are refused at admission when a part is longer than the CRDs allow (the workload would be admitted and its lock request refused)", edits: []edit{
			{"workload-key-lengths", "k.matches(variables.key) && k.matches(variables.lengths) && ", "k.matches(variables.key) && "},
		}},
		mutant{name: "workload-key-refusal-one-line", pkg: gatedSuite, focus: "refuses a workload whose annotations", guard: "the refusal of a lock annotation quotes it on one line (the API server drops a message of several lines for the bare expression)", edits: []edit{
			{"workload-key-refusal-one-line", ".replace('\\n', ' ')", ""},
		}},
	)
}

package main

// The lock key's readers (internal/lockkey.Parse): each refuses what the CRDs refuse.
func init() {
	const lockkeyPkg = "./internal/lockkey/"
	mutants = append(mutants,
		mutant{name: "lockkey-parse-validates", pkg: lockkeyPkg, focus: "run:FuzzKey|TestParse", guard: "a key whose parts the API server would refuse is refused by Parse (the plugin's --lock, the controller's annotation), as the policy refuses it", edits: []edit{
			{"lockkey-parse-validates", "		err = validate(t)\n", "		_ = validate(t)\n"},
		}},
	)
}

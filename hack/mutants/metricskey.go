package main

// The metrics endpoint's authorization cache key (internal/metricsauth).
func init() {
	mutants = append(mutants,
		mutant{name: "metrics-key-canonical", pkg: "./internal/metricsauth/", focus: "run:TestAccessKey|TestBoundTokenScrapes", guard: "an answer is kept under one key per review: the user's Extra keys are hashed sorted, not in map order", edits: []edit{
			{"metrics-key-canonical", "	names := slices.Sorted(maps.Keys(user.Extra))\n", "	names := slices.Collect(maps.Keys(user.Extra))\n"},
		}},
	)
}

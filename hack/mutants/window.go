package main

// The freeze windows' guards across daylight saving (internal/window), killed by its tables.
func init() {
	const windowPkg = "./internal/window/"
	mutants = append(mutants,
		mutant{name: "window-gap-opens-after", pkg: windowPkg, focus: "run:TestDaylightSaving|TestEveryZone", guard: "a fixed-time window whose opening the clock skips opens at the first instant after the gap", edits: []edit{
			{"window-gap-opens-after", "		return []time.Time{jump}\n", "		return nil\n"},
		}},
		mutant{name: "window-repeat-opens-once", pkg: windowPkg, focus: "run:TestDaylightSaving|TestEveryZone", guard: "a fixed-time window whose opening the clock shows twice opens once, at the first", edits: []edit{
			{"window-repeat-opens-once", "		return at[:1]\n", "		return at\n"},
		}},
	)
}

package main

// The spoke's renewals and its clock (docs/fleet.md, "Partition: the rule, with numbers" and
// "Clock skew between clusters", issue #45): kicks back off while the hub does not answer, and
// a grant held back only for a clock past --max-clock-skew is given back.
// One row per mutant: name, package, focus, guard, the text and what it becomes.
var fleetRenewMutants = [][6]string{
	{"spoke-renewal-backoff", spokePkg, "run:TestNextRenewal", "while the hub does not answer, a kick (each held grant's, once a second) renews no sooner than a backoff doubling from 1 s to RetryAfter: a cut costs no round of renewals a second",
		"\tcase failures == 0 && kicked:\n", "\tcase kicked:\n"},
}

func init() {
	for _, m := range fleetRenewMutants {
		mutants = append(mutants, mutant{name: m[0], pkg: m[1], focus: m[2], guard: m[3], edits: []edit{{m[0], m[4], m[5]}}})
	}
}

package main

// The spoke's renewals and its clock (docs/fleet.md, "Partition: the rule, with numbers" and
// "Clock skew between clusters", issue #45): kicks back off while the hub does not answer, and
// a grant held back only for a clock past --max-clock-skew is given back.
// One row per mutant: name, package, focus, guard, the text and what it becomes.
var fleetRenewMutants = [][6]string{
	{"spoke-renewal-backoff", spokePkg, "run:TestNextRenewal", "while the hub does not answer, a kick (each held grant's, once a second) renews no sooner than a backoff doubling from 1 s to RetryAfter: a cut costs no round of renewals a second",
		"\tcase failures == 0 && kicked:\n", "\tcase kicked:\n"},
	{"spoke-skew-gives-grant-back", spokePkg, "run:TestClockSkewTooLargeGivesTheGrantBack", "a hub grant the spoke holds back because its clock skew is over --max-clock-skew is given back (ClockSkewTooLarge, released on the hub), not held while the clock is broken",
		"\t\tif v.SkewTooLarge {\n", "\t\tif false && v.SkewTooLarge {\n"},
	{"spoke-skew-given-back-stays", spokePkg, "run:TestLostToPartition$|TestClockSkewTooLargeGivesTheGrantBack", "a spoke request whose grant was given back for a clock skew over the flag stays final, and its hub request is released",
		" || c.Reason == ReasonClockSkewTooLarge)", ")"},
}

func init() {
	for _, m := range fleetRenewMutants {
		mutants = append(mutants, mutant{name: m[0], pkg: m[1], focus: m[2], guard: m[3], edits: []edit{{m[0], m[4], m[5]}}})
	}
}

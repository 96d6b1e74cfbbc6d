package main

// The hub's fleet view (issue #45, internal/fleet/hub: the Spoke reconciler), and what the spoke
// policy admits of the skew the agent publishes for it. In a file of their own, as the other
// fleet areas.
const hubPkg = "./internal/fleet/hub/"

// fleetHubMutants are appended to mutants at init.
var fleetHubMutants = []mutant{
	{name: "hub-agent-version-checked", pkg: hubPkg, focus: "run:TestParseAgentVersion|TestViewLease", guard: "the hub shows a spoke's published agent version only when it is one (no line breaks, markup or over-long text in a status every user reads)", edits: []edit{
		{"hub-agent-version-checked", "\tif !spoke.IsVersion(s) {\n", "\tif false && !spoke.IsVersion(s) {\n"},
	}},
	{name: "hub-spoke-lease-creator", pkg: hubPkg, focus: "run:TestViewLease|TestSpokeConnectionFollowsItsHubLeases", guard: "a Lease counts for a spoke's connection only when the spoke created it: a hub user's Lease under its name does not make a lost spoke look connected", edits: []edit{
		{"hub-spoke-lease-creator", "\tif !IsSpokeIdentity(cluster, lease.Annotations[whoami.AnnotationCreatedBy]) {\n", "\tif false && !IsSpokeIdentity(cluster, lease.Annotations[whoami.AnnotationCreatedBy]) {\n"},
	}},
	{name: "hub-spoke-live-lease", pkg: hubPkg, focus: "run:TestStatusConnection|TestSpokeConnectionFollowsItsHubLeases", guard: "a spoke is Connected only while one of its hub Leases is live by the hub's clock", edits: []edit{
		{"hub-spoke-live-lease", "\t\tif l.lapses().After(now) && (next.IsZero() || l.lapses().Before(next)) {\n", "\t\tif next.IsZero() || l.lapses().Before(next) {\n"},
	}},
	{name: "hub-spoke-not-member-deleted", pkg: hubPkg, focus: "run:TestSpokesFollowTheMembersConfigMap", guard: "a Spoke of a cluster the members ConfigMap does not list is deleted (and never made)", edits: []edit{
		{"hub-spoke-not-member-deleted", "\tcase !isMember:\n", "\tcase false && !isMember:\n"},
	}},
	{name: "fleet-spoke-skew-annotation", pkg: admissionSuite, focus: "fleet's spokes", guard: "a spoke's hub Lease carries its clock skew only as seconds to the millisecond", edits: []edit{
		{"fleet-spoke-skew-annotation", "      object.metadata.?annotations[?'fleet.turnstile.dev/clock-skew'].orValue('0.000').matches(", "      true || object.metadata.?annotations[?'fleet.turnstile.dev/clock-skew'].orValue('0.000').matches("},
	}},
}

func init() { mutants = append(mutants, fleetHubMutants...) }

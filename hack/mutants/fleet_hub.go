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
	// turnstile-fleet-stopped (config/fleet/stopped-policy.yaml): a spoke's grant is deleted on
	// the hub only once its spoke confirmed the stop.
	{name: "fleet-stopped-confirmed", pkg: admissionSuite, focus: stoppedFocus, guard: "a spoke's Granted hub request is not deleted before its spoke confirmed the stop (fleet.turnstile.dev/stopped)", edits: []edit{
		{"fleet-stopped-confirmed", "  - expression: variables.stopped == variables.token\n", "  - expression: true || variables.stopped == variables.token\n"},
	}},
	{name: "fleet-stopped-token", pkg: admissionSuite, focus: stoppedFocus, guard: "only the grant's own fencing token confirms its stop: an earlier grant's stale token does not", edits: []edit{
		{"fleet-stopped-token", "  - expression: variables.stopped == variables.token\n", "  - expression: variables.stopped != ''\n"},
	}},
	{name: "fleet-stopped-spoke-lease", pkg: admissionSuite, focus: stoppedFocus, guard: "the delete is held only for a grant on its spoke's hub Lease (a keep-running grant, which its spoke does not stop, is deleted)", edits: []edit{
		{"fleet-stopped-spoke-lease", "      oldObject.spec.?holder.?lease.orValue('') == 'spoke-' + oldObject.spec.holder.cluster\n", "      true\n"},
	}},
	{name: "fleet-stopped-spoke-creator", pkg: admissionSuite, focus: stoppedFocus, guard: "the delete is held only for a request its spoke created (a hub user's own request for a holder in that cluster is hers to delete)", edits: []edit{
		{"fleet-stopped-spoke-creator", "orValue('') != '' &&\n      oldObject.metadata.?annotations[?'locks.turnstile.dev/created-by']", "orValue('') != '' || true ||\n      oldObject.metadata.?annotations[?'locks.turnstile.dev/created-by']"},
	}},
	{name: "fleet-stopped-confirms-stops", pkg: admissionSuite, focus: stoppedFocus, guard: "the delete is held only for a request whose agent says its stops (an older agent's is handed on when released, and deletable)", edits: []edit{
		{"fleet-stopped-confirms-stops", "    expression: oldObject.metadata.?annotations[?'fleet.turnstile.dev/confirms-stops'].orValue('') == 'true'\n", "    expression: \"true\"\n"},
	}},
	{name: "fleet-stopped-granted", pkg: admissionSuite, focus: stoppedFocus, guard: "the delete is held only for a grant (a waiter or a final request has nothing to stop)", edits: []edit{
		{"fleet-stopped-granted", "    expression: oldObject.?status.?phase.orValue('') == 'Granted'\n", "    expression: \"true\"\n"},
	}},
}

// stoppedFocus is test/admission's spec of turnstile-fleet-stopped.
const stoppedFocus = "deleted before its spoke confirmed the stop"

func init() { mutants = append(mutants, fleetHubMutants...) }

package main

// The hub's admission policies for a fleet's spokes (issue #45, config/fleet/spoke-policy.yaml:
// a spoke writes only its own cluster's requests and hub Lease; only members; hub users neither
// re-enter a spoke's holding nor release its requests as their owner, nor create a request under
// a member's hub name), killed by test/admission impersonating spokes and hub users through the
// shipped roles (admissionSuite, freeze.go's).

func init() {
	const focus = "fleet's spokes"
	mutants = append(mutants,
		mutant{name: "fleet-spoke-identity-known", pkg: admissionSuite, focus: focus, guard: "a ServiceAccount of turnstile-fleet not named spoke-<cluster> is no spoke, and writes nothing", edits: []edit{
			{"fleet-spoke-identity-known", "  - expression: variables.cluster.matches(", "  - expression: true || variables.cluster.matches("},
		}},
		mutant{name: "fleet-spoke-own-requests", pkg: admissionSuite, focus: focus, guard: "a spoke updates, releases and deletes only its own cluster's requests (also those whose owner has another spoke's name)", edits: []edit{
			{"fleet-spoke-own-requests", `"!variables.isRequest || request.operation == 'CREATE' ||`, `"true || !variables.isRequest || request.operation == 'CREATE' ||`},
		}},
		mutant{name: "fleet-spoke-label", pkg: admissionSuite, focus: focus, guard: "a spoke's request is labelled with its own cluster", edits: []edit{
			{"fleet-spoke-label", `"!variables.writes || variables.newCluster == variables.cluster"`, `"true || variables.newCluster == variables.cluster"`},
		}},
		mutant{name: "fleet-spoke-name", pkg: admissionSuite, focus: focus, guard: "a spoke's request is named <cluster>.<name> after its own cluster", edits: []edit{
			{"fleet-spoke-name", `"!variables.writes || request.name.startsWith(`, `"true || request.name.startsWith(`},
		}},
		mutant{name: "fleet-spoke-identity", pkg: admissionSuite, focus: focus, guard: "a spoke's request is for a holder of its own cluster (spec.holder.cluster)", edits: []edit{
			{"fleet-spoke-identity", `"!variables.writes || (has(object.spec.holder.cluster)`, `"true || (has(object.spec.holder.cluster)`},
		}},
		mutant{name: "fleet-spoke-holder-lease", pkg: admissionSuite, focus: focus, guard: "a spoke's request names its own hub Lease, or none only when its workload opted out", edits: []edit{
			{"fleet-spoke-holder-lease", "      !variables.writes ||\n", "      true ||\n"},
		}},
		mutant{name: "fleet-spoke-lease-name", pkg: admissionSuite, focus: focus, guard: "a spoke writes only its own hub Lease spoke-<cluster>", edits: []edit{
			{"fleet-spoke-lease-name", "  - expression: variables.isRequest || request.name == variables.lease", "  - expression: true || request.name == variables.lease"},
		}},
		mutant{name: "fleet-spoke-lease-role", pkg: admissionSuite, focus: focus, guard: "a spoke's hub Lease carries the role label the holder-Lease protection keys on", edits: []edit{
			{"fleet-spoke-lease-role", "      variables.isRequest || request.operation == 'DELETE' ||", "      true || request.operation == 'DELETE' ||"},
		}},
		mutant{name: "fleet-spoke-member", pkg: admissionSuite, focus: focus, guard: "a spoke whose cluster the hub's params do not list writes no request", edits: []edit{
			{"fleet-spoke-member", "  - expression: has(params.data) && variables.cluster in params.data", "  - expression: true || has(params.data) && variables.cluster in params.data"},
		}},
		mutant{name: "fleet-holder-cluster-delegated", pkg: admissionSuite, focus: focus, guard: "a hub user sets spec.holder.cluster only with the delegate permission", edits: []edit{
			{"fleet-holder-cluster-delegated", "      request.operation != 'CREATE' ||\n", "      true ||\n"},
		}},
		mutant{name: "fleet-hub-user-not-spoke-owner", pkg: admissionSuite, focus: focus, guard: "a hub user of a spoke request's owner's name does not release or delete it (only the spoke or an admin)", edits: []edit{
			{"fleet-hub-user-not-spoke-owner", "      request.operation == 'CREATE' || variables.cleanup ||", "      true || variables.cleanup ||"},
		}},
		mutant{name: "fleet-reserved-request-label", pkg: admissionSuite, focus: "dressing her objects", guard: "a hub user does not label a request with a spoke's cluster (the agent watches its hub requests by it)", edits: []edit{
			{"fleet-reserved-request-label", "      !variables.isRequest ||\n      (('fleet.turnstile.dev/cluster' in", "      true ||\n      (('fleet.turnstile.dev/cluster' in"},
		}},
		mutant{name: "fleet-reserved-request-annotations", pkg: admissionSuite, focus: "dressing her objects", guard: "a hub user does not write the spoke annotations the agent maps its hub requests by", edits: []edit{
			{"fleet-reserved-request-annotations", "      !variables.isRequest || variables.reservedAnnotations.all(k,", "      true || variables.reservedAnnotations.all(k,"},
		}},
		mutant{name: "fleet-reserved-lease", pkg: admissionSuite, focus: "dressing her objects", guard: "a hub user does not take a spoke's Lease name spoke-<cluster> (nor its role label) in a namespace", edits: []edit{
			{"fleet-reserved-lease", "      variables.isRequest ||\n      request.operation == 'UPDATE' &&", "      true ||\n      request.operation == 'UPDATE' &&"},
		}},
		mutant{name: "fleet-member-names", pkg: admissionSuite, focus: focus, guard: "a hub user creates no request named <member>.<name>: a member's spoke mirrors its requests under those names", edits: []edit{
			{"fleet-member-names", "  - expression: size(variables.members) == 0", "  - expression: true || size(variables.members) == 0"},
		}},
	)
}

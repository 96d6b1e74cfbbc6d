package main

// The hub admin's fleet join and fleet leave (issue #45, internal/plugin/cmd/fleet): what they
// refuse, how they write the members ConfigMap, and what leave revokes. Killed by
// TestJoinAndLeave (a real API server with config/fleet, the written kubeconfig used as the
// spoke). In a file of their own, as the other fleet areas.
const fleetCmd = "./internal/plugin/cmd/fleet/"

// fleetJoinMutants are appended to mutants at init.
var fleetJoinMutants = []mutant{
	{name: "fleet-join-name-valid", pkg: fleetCmd, focus: "run:TestJoinAndLeave", guard: "join refuses a cluster name that is not a DNS-1123 label (the hub's policies would refuse the spoke), before it writes anything", edits: []edit{
		{"fleet-join-name-valid", "if errs := validation.IsDNS1123Label(name); len(errs) > 0 {", "if errs := validation.IsDNS1123Label(name); false && len(errs) > 0 {"},
	}},
	{name: "fleet-join-optimistic", pkg: fleetCmd, focus: "run:TestJoinAndLeave", guard: "the members ConfigMap is written with the resourceVersion read, so a concurrent writer's member is never lost", edits: []edit{
		{"fleet-join-optimistic", "\t\terr = c.Update(ctx, &cm)", "\t\tcm.ResourceVersion = \"\"\n\t\terr = c.Update(ctx, &cm)"},
	}},
	{name: "fleet-join-retry-conflict", pkg: fleetCmd, focus: "run:TestJoinAndLeave", guard: "a members write refused with 409 Conflict is read and made again", edits: []edit{
		{"fleet-join-retry-conflict", "case apierrors.IsConflict(err) && attempt < 10:", "case false && apierrors.IsConflict(err) && attempt < 10:"},
	}},
	{name: "fleet-join-rights-first", pkg: fleetCmd, focus: "run:TestJoinAndLeave", guard: "join and leave ask for every right they need before their first write, and name each one missing", edits: []edit{
		{"fleet-join-rights-first", "if !review.Status.Allowed {", "if false && !review.Status.Allowed {"},
	}},
	{name: "fleet-leave-keep-running-refused", pkg: fleetCmd, focus: "run:TestLeaveWithAKeepRunningGrant", guard: "leave changes nothing while the cluster holds a keep-running grant, unless --release-keep-running releases it (it never passes on by itself)", edits: []edit{
		{"fleet-leave-keep-running-refused", "\tif len(granted) > 0 && !releaseGranted {\n", "\tif false {\n"},
	}},
	{name: "fleet-leave-members", pkg: fleetCmd, focus: "run:TestJoinAndLeave", guard: "leave removes the cluster from the members", edits: []edit{
		{"fleet-leave-members", "\t\tdelete(cm.Data, name)\n", ""},
	}},
	{name: "fleet-leave-revokes", pkg: fleetCmd, focus: "run:TestJoinAndLeave", guard: "leave deletes the spoke's ServiceAccount, so every token join gave it stops authenticating", edits: []edit{
		{"fleet-leave-revokes", "Namespace: members.Namespace, Name: sa}})", "Namespace: members.Namespace, Name: sa + \"-mutant\"}})"},
	}},
}

func init() { mutants = append(mutants, fleetJoinMutants...) }

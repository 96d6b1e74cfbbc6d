package main

// The fleet's freezes (docs/fleet.md, "Freezes everywhere, also offline", issue #45): a
// CommandLock scoped to clusters freezes only their requests, on the hub's grant path and in its
// counts; a scope that cannot be judged freezes more, never less.
func init() {
	mutants = append(mutants,
		mutant{name: "fleet-manual-cluster-scope", pkg: queuePkg, focus: "run:TestForRequestClusterScopes", guard: "a manual freeze scoped to clusters freezes only their requests, leaving the rest to an unscoped all", edits: []edit{
			{"fleet-manual-cluster-scope", "\tif fr, ok := f.byCommand[command]; ok && f.inClusterScope(command, cluster) {\n", "\tif fr, ok := f.byCommand[command]; ok {\n"},
		}},
		mutant{name: "fleet-window-cluster-scope", pkg: queuePkg, focus: "run:TestForRequestClusterScopes", guard: "the windows of a CommandLock scoped to clusters judge only their requests", edits: []edit{
			{"fleet-window-cluster-scope", "\t\tif ws, ok := f.windows[name]; ok && f.inClusterScope(name, req.Spec.Holder.Cluster) {\n", "\t\tif ws, ok := f.windows[name]; ok {\n"},
		}},
		mutant{name: "fleet-scope-hub-own-requests", pkg: queuePkg, focus: "run:TestForRequestClusterScopes", guard: "a request without a cluster (the hub's own) is in no cluster scope, an empty selector's included", edits: []edit{
			{"fleet-scope-hub-own-requests", "\tif cluster == \"\" {\n", "\tif false && cluster == \"\" {\n"},
		}},
		mutant{name: "fleet-scope-selector-fails-safe", pkg: queuePkg, focus: "run:TestForRequestClusterScopes", guard: "a cluster selector that cannot be judged (members unknown, selector unreadable) matches: freeze more, never less", edits: []edit{
			{"fleet-scope-selector-fails-safe", "\tif err != nil || unknown {\n", "\tif err != nil && false {\n"},
		}},
		mutant{name: "fleet-grant-cluster-labels", pkg: controls, focus: "cluster scopes", guard: "the grant path reads the members' labels when a CommandLock selects clusters by label", edits: []edit{
			{"fleet-grant-cluster-labels", "\tif err := inFleet(ctx, r.apiReader, &in.Freezes); err != nil {\n", "\tif err := error(nil); err != nil {\n"},
		}},
		mutant{name: "fleet-counts-in-scope", pkg: controls, focus: "cluster scopes", guard: "a CommandLock scoped to clusters counts and drains only their requests", edits: []edit{
			{"fleet-counts-in-scope", "\tlist.Items = inClusterScope(cl.Spec.Clusters, list.Items, members)\n", "\t_ = inClusterScope\n"},
		}},
		mutant{name: "fleet-mirror-no-write-freeze", pkg: spokePkg, focus: "run:TestMirrorCommandLock", guard: "a CommandLock mirror leaves out the hub's write freeze (spec.admission, status.admission): the spoke's admission policy must not enforce the hub's", edits: []edit{
			{"fleet-mirror-no-write-freeze", "\tm.Spec.Admission, m.Status.Admission = nil, nil\n", "\t_ = m\n"},
		}},
		mutant{name: "fleet-mirror-put-back", pkg: spokePkg, focus: "run:TestMirrorsShowTheHubsTruth", guard: "a mirror whose labels a spoke user changed is put back as the hub has it", edits: []edit{
			{"fleet-mirror-put-back", "\tif !maps.Equal(cur.GetLabels(), meta.Labels) || !maps.Equal(cur.GetAnnotations(), meta.Annotations) || len(cur.GetFinalizers()) > 0 {\n", "\tif false {\n"},
		}},
		mutant{name: "fleet-mirror-delete-only-mirrors", pkg: spokePkg, focus: "run:TestMirrorsShowTheHubsTruth", guard: "the agent deletes only mirrors: a spoke object of a name the hub lacks that is no mirror is left alone", edits: []edit{
			{"fleet-mirror-delete-only-mirrors", "\t\tif !IsMirror(o) {\n", "\t\tif false {\n"},
		}},
	)
}

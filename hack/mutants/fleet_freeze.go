package main

// The fleet's freezes (docs/fleet.md, "Freezes everywhere, also offline" and "Mirrors in a
// spoke", issue #45): a CommandLock scoped to clusters freezes only their requests, on the
// hub's grant path and in its counts; a scope that cannot be judged freezes more, never less;
// a spoke's mirrors are the hub's, put back when edited, and only mirrors are deleted; a spoke
// judges the mirrored windows by its own clock once the hub's judgement ran out, and holds a hub
// grant it has not let go while they freeze it.
// One row per mutant: name, package, focus, guard, the text and what it becomes.
var fleetFreezeMutants = [][6]string{
	{"fleet-manual-cluster-scope", queuePkg, "run:TestForRequestClusterScopes", "a manual freeze scoped to clusters freezes only their requests, leaving the rest to an unscoped all",
		"\tif fr, ok := f.byCommand[command]; ok && f.inClusterScope(command, cluster) {\n", "\tif fr, ok := f.byCommand[command]; ok {\n"},
	{"fleet-window-cluster-scope", queuePkg, "run:TestForRequestClusterScopes", "the windows of a CommandLock scoped to clusters judge only their requests",
		"\t\tif ws, ok := f.windows[name]; ok && f.inClusterScope(name, req.Spec.Holder.Cluster) {\n", "\t\tif ws, ok := f.windows[name]; ok {\n"},
	{"fleet-scope-hub-own-requests", queuePkg, "run:TestForRequestClusterScopes", "a request without a cluster (the hub's own) is in no cluster scope, an empty selector's included",
		"\tif cluster == \"\" {\n", "\tif false && cluster == \"\" {\n"},
	{"fleet-scope-selector-fails-safe", queuePkg, "run:TestForRequestClusterScopes", "a cluster selector that cannot be judged (members unknown, selector unreadable) matches: freeze more, never less",
		"\tif err != nil || unknown {\n", "\tif err != nil && false {\n"},
	{"fleet-grant-cluster-labels", controls, "cluster scopes", "the grant path reads the members' labels when a CommandLock selects clusters by label",
		"\tif err := inFleet(ctx, r.apiReader, &in.Freezes); err != nil {\n", "\tif err := error(nil); err != nil {\n"},
	{"fleet-counts-in-scope", controls, "cluster scopes", "a CommandLock scoped to clusters counts and drains only their requests",
		"\tlist.Items = inClusterScope(cl.Spec.Clusters, list.Items, members)\n", "\t_ = inClusterScope\n"},
	{"fleet-window-own-cluster-scope", queuePkg, "run:TestForRequestWindowClusterScopes", "a window with clusters of its own (spec.windows[].clusters) freezes only their requests",
		"\tif s.Clusters != nil && !inCluster(s.Clusters) {\n", "\tif false && s.Clusters != nil {\n"},
	{"fleet-mirror-judged-in-spoke", spokePkg, "run:TestMirrorStatusJudgedInSpoke", "a mirror whose hub judgement ran out (a window's transition, an until) shows the spoke's own judgement by its clock, marked JudgedInSpoke",
		"\tif end.IsZero() || now.Before(end.Add(judgeSlack)) {\n", "\tif true {\n"},
	{"fleet-spoke-judges-by-its-clock", spokePkg, "run:TestLocalFreeze", "the spoke's gate judges the windows and until by its own clock too, not only as the hub last judged them",
		"\tfor _, set := range [][]locksv1.CommandLock{mirrors, local} {\n", "\tfor _, set := range [][]locksv1.CommandLock{mirrors} {\n\t\t_ = local\n"},
	{"fleet-spoke-gate-allows-skew", spokePkg, "run:TestLocalFreeze", "the spoke's gate holds a hub grant the freezes hold at any instant the hub's clock may show (the spoke's now give or take the skew bound), not only at the spoke's now",
		"\tat, until := now.Add(-skew), now.Add(skew)\n", "\tat, until := now, now\n"},
	{"fleet-spoke-frozen-held", spokePkg, "run:TestWindowOpeningDuringACutHoldsTheSpokesWorkload", "a hub grant the spoke has not let go is held while the spoke's freezes, as it judges them, hold it (a window that opened during a cut)",
		"\tif !frozen {\n\t\treturn res, want, nil\n", "\tif true || !frozen {\n\t\treturn res, want, nil\n"},
	{"fleet-spoke-bypass-the-hubs", spokePkg, "run:TestAttack2SpokeAdminsBypassPassesTheFleetsFreeze", "the spoke's freeze gate judges a request with its hub request's bypass, not the spoke user's own (which the hub never admitted)",
		"\tjudged.Spec.BypassFreeze = hub.Spec.BypassFreeze.DeepCopy()\n", "\t_ = hub\n"},
	{"fleet-mirror-no-write-freeze", spokePkg, "run:TestMirrorCommandLock", "a CommandLock mirror leaves out the hub's write freeze (spec.admission, status.admission): the spoke's admission policy must not enforce the hub's",
		"\tm.Spec.Admission, m.Status.Admission = nil, nil\n", "\t_ = m\n"},
	{"fleet-mirror-spares-spoke-own", spokePkg, "run:TestAttack2MirrorLiftsTheSpokesOwnWriteFreeze", "the agent leaves alone a spoke's own CommandLock (never a mirror) under a hub CommandLock's name, and its write freeze with it",
		"\tif err == nil && !IsMirror(&cur) && cur.Annotations[AnnotationHubResourceVersion] == \"\" {\n", "\tif false {\n"},
	{"fleet-mirror-put-back", spokePkg, "run:TestMirrorsShowTheHubsTruth", "a mirror whose labels a spoke user changed is put back as the hub has it",
		"\tif !maps.Equal(cur.GetLabels(), meta.Labels) || !maps.Equal(cur.GetAnnotations(), meta.Annotations) || len(cur.GetFinalizers()) > 0 {\n", "\tif false {\n"},
	{"fleet-mirror-delete-only-mirrors", spokePkg, "run:TestMirrorsShowTheHubsTruth", "the agent deletes only mirrors: a spoke object of a name the hub lacks that is no mirror is left alone",
		"\t\tif !IsMirror(o) {\n", "\t\tif false {\n"},
}

func init() {
	for _, m := range fleetFreezeMutants {
		mutants = append(mutants, mutant{name: m[0], pkg: m[1], focus: m[2], guard: m[3], edits: []edit{{m[0], m[4], m[5]}}})
	}
}

package main

// The gated workloads' guards (internal/workload, config/admission/workload-*.yaml), killed
// by test/gated and internal/workload's own tests. In a file of their own so the list above
// stays the grant path's.
const (
	gatedSuite  = "./test/gated/"
	workloadPkg = "./internal/workload/"
)

func init() {
	mutants = append(mutants,
		mutant{name: "workload-gone-from-cache", pkg: gatedSuite, focus: "leaves the manager", guard: "a workload missing from the gated cache is read live before its request is taken for a gone workload's", edits: []edit{
			{"workload-gone-from-cache", "if err := r.live.Get(ctx, key, obj); err != nil {", "if err := r.live.Get(ctx, key, obj); err != nil || true {"},
		}},
		mutant{name: "workload-no-token", pkg: gatedSuite, focus: "holds a Pod|two Jobs", guard: "a workload is let go in the same write that gives it its fencing token", edits: []edit{
			{"workload-no-token", "	setAnnotation(p, AnnotationFencingToken, token)\n", ""},
			{"workload-no-token/2", "	setAnnotation(j, AnnotationFencingToken, token)\n", ""},
		}},
		mutant{name: "workload-not-stopped", pkg: gatedSuite, focus: "loses its lock", guard: "a workload whose lock is gone before it finished is stopped", edits: []edit{
			{"workload-not-stopped", "	case token != \"\":\n", "	case false && token != \"\":\n"},
		}},
		mutant{name: "workload-released-while-running", pkg: gatedSuite, focus: "holds a Pod|two Jobs", guard: "a workload's lock is released only when it has finished (or is being deleted)", edits: []edit{
			{"workload-released-while-running", "\tif done, how := r.kind.finished(obj); done {\n", "\tif done, how := r.kind.finished(obj); true || done {\n"},
		}},
		mutant{name: "workload-job-pods-outlive", pkg: gatedSuite, focus: "last Pod is gone", guard: "a deleted Job's lock is kept until its last Pod is gone", edits: []edit{
			{"workload-job-pods-outlive", "if running, err := r.podsLeft(ctx, m.lr.Namespace, m.uid); err != nil || running > 0 {", "if running, err := r.podsLeft(ctx, m.lr.Namespace, m.uid); err != nil || false && running > 0 {"},
		}},
		mutant{name: "workload-finished-pods-counted", pkg: gatedSuite, focus: "says it has finished", guard: "a Job that says it has finished keeps its lock while one of its Pods still runs", edits: []edit{
			{"workload-finished-pods-counted", "if running, err := r.podsLeft(ctx, obj.GetNamespace(), obj.GetUID()); err != nil || running > 0 {", "if running, err := r.podsLeft(ctx, obj.GetNamespace(), obj.GetUID()); err != nil || false && running > 0 {"},
		}},
		mutant{name: "workload-not-renewed", pkg: gatedSuite, focus: "renews the lock", guard: "a running workload's grant is renewed, so it does not lose its lock only because it runs longer than its ttl", edits: []edit{
			{"workload-not-renewed", "		return r.renew(ctx, lr)\n", "		return ctrl.Result{}, nil\n"},
		}},
		mutant{name: "workload-renew-when-due", pkg: gatedSuite, focus: "renews the lock", guard: "a grant is renewed only when a quarter of its term has passed and the last renewal was answered (not on every event: a loop of writes)", edits: []edit{
			{"workload-renew-when-due", "	if !answered || now.Before(at) {\n", "	if false && (!answered || now.Before(at)) {\n"},
		}},
		mutant{name: "workload-grant-read-live", pkg: workloadPkg, focus: "run:TestGrantSeenStaleDoesNotLetGo", guard: "a workload is let go only on a grant read live (a lagging cache may still show one that ended)", edits: []edit{
			{"workload-grant-read-live", "	if ok, err := r.stillGranted(ctx, lr); err != nil || !ok {\n", "	if ok, err := r.stillGranted(ctx, lr); false && (err != nil || !ok) {\n"},
		}},
		mutant{name: "workload-gate-removable", pkg: gatedSuite, focus: "by hand", guard: "only the manager removes a Pod's scheduling gate", edits: []edit{
			{"workload-gate-removable", `  - expression: "variables.manager || !variables.oldGate || variables.newGate"`, `  - expression: "true || variables.manager || !variables.oldGate || variables.newGate"`},
		}},
		mutant{name: "workload-unsuspendable", pkg: gatedSuite, focus: "by hand|loses its lock", guard: "only the manager unsuspends a gated Job without a fencing token", edits: []edit{
			{"workload-unsuspendable", `  - expression: "variables.manager || !variables.oldSuspended || variables.newSuspended || variables.oldToken"`, `  - expression: "true || variables.manager || !variables.oldSuspended || variables.newSuspended || variables.oldToken"`},
		}},

		// Issue #41: the manager acts for a workload only on what it made (docs/threat-model.md).
		mutant{name: "workload-trusts-only-its-stamp", pkg: gatedSuite, focus: "re-created Job", guard: "a request counts as the manager's only when the manager created it (created-by, which admission writes), not by its ownerReference or name", edits: []edit{
			{"workload-trusts-only-its-stamp", "	if self == \"\" || lr.Annotations[AnnotationCreatedBy] != self {\n", "	if false && (self == \"\" || lr.Annotations[AnnotationCreatedBy] != self) {\n"},
		}},
		mutant{name: "workload-lets-go-only-on-its-locks", pkg: workloadPkg, focus: "run:TestLetGoOnlyOnItsLocks", guard: "a workload is let go only on a request whose locks, command and holder are exactly its annotations'", edits: []edit{
			{"workload-lets-go-only-on-its-locks", "	if why := r.mismatch(obj, lr); why != \"\" {\n", "	if why := r.mismatch(obj, lr); false && why != \"\" {\n"},
		}},
		mutant{name: "workload-name-taken-never-deleted", pkg: gatedSuite, focus: "another user's request", guard: "a request of someone else's that has a workload's request name is never deleted: the workload's gets the other name", edits: []edit{
			{"workload-name-taken-never-deleted", "		if others[i] != nil {\n", "		if others[i] != nil {\n\t\t\treturn ctrl.Result{}, client.IgnoreNotFound(r.client.Delete(ctx, others[i]))\n\t\t}\n\t\tif false {\n"},
		}},
		mutant{name: "workload-earlier-holds-name", pkg: gatedSuite, focus: "re-created Job", guard: "a Job created again under a name whose earlier Job's Pods still run asks for its lock only once they are gone", edits: []edit{
			{"workload-earlier-holds-name", "	case earlier:\n", "	case false && earlier:\n"},
		}},
		mutant{name: "workload-owner-suspend-kept", pkg: workloadPkg, focus: "run:TestOwnerSuspendKept", guard: "a Job its owner suspends after it ran is not let go again", edits: []edit{
			{"workload-owner-suspend-kept", "	case granted && token == \"\":\n", "	case granted && (token == \"\" || r.kind.held(obj)):\n"},
		}},
		mutant{name: "workload-request-deleted-stops", pkg: workloadPkg, focus: "run:TestRequestDeletedStopsWorkload", guard: "a workload let go whose request is deleted is stopped (not given a new request while it runs)", edits: []edit{
			{"workload-request-deleted-stops", "	case ann[AnnotationFencingToken] != \"\":\n", "	case false && ann[AnnotationFencingToken] != \"\":\n"},
		}},
		mutant{name: "workload-request-gone-read-live", pkg: workloadPkg, focus: "run:TestRequestGoneReadLive", guard: "a workload's request missing from the cache is looked up live before the workload is stopped", edits: []edit{
			{"workload-request-gone-read-live", "if err := r.live.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: n}, lr)", "if err := r.client.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: n}, lr)"},
		}},
		mutant{name: "workload-gated-only-by-admission", pkg: gatedSuite, focus: "forged created-by", guard: "a workload is created with the gated label only as the mutating policy gates it (lock annotation, held, the authenticated creator)", edits: []edit{
			{"workload-gated-only-by-admission", "      request.operation != 'CREATE' || variables.newGated == '' || variables.heldElsewhere ||", "      true || request.operation != 'CREATE' || variables.newGated == '' || variables.heldElsewhere ||"},
		}},
		mutant{name: "workload-fixed-at-admission", pkg: gatedSuite, focus: "forged created-by", guard: "the gated label is never added or removed, and the lock annotations (the Job's and its template's) never change, after creation", edits: []edit{
			{"workload-fixed-at-admission", "      variables.manager || request.operation == 'CREATE' ||", "      true || variables.manager || request.operation == 'CREATE' ||"},
		}},
		mutant{name: "workload-stamp-forged", pkg: gatedSuite, focus: "stamp", guard: "only the manager's ServiceAccount creates a request stamped for a workload", edits: []edit{
			{"workload-stamp-forged", "      request.operation != 'CREATE' || variables.manager ||", "      true || request.operation != 'CREATE' || variables.manager ||"},
		}},
		mutant{name: "workload-stamp-changed", pkg: gatedSuite, focus: "stamp", guard: "nobody changes or removes a request's workload stamp", edits: []edit{
			{"workload-stamp-changed", "      request.operation != 'UPDATE' ||\n", "      true || request.operation != 'UPDATE' ||\n"},
		}},
		mutant{name: "workload-request-owners-changed", pkg: gatedSuite, focus: "stamp", guard: "nobody but the manager and the garbage collector changes the ownerReferences of a request the manager made", edits: []edit{
			{"workload-request-owners-changed", "      request.operation != 'UPDATE' || !variables.made ||", "      true || request.operation != 'UPDATE' || !variables.made ||"},
		}},
		mutant{name: "membership-own-namespace", pkg: "./internal/sharding/", focus: "run:TestObserveOnlyTheManagersNamespace", guard: "only Leases in the manager's namespace are members (a requester may label a Lease member in her own)", edits: []edit{
			{"membership-own-namespace", "if !ok || l.Namespace != m.cfg.Namespace || l.Labels[LabelRole] != RoleMember {", "if !ok || l.Labels[LabelRole] != RoleMember {"},
		}},
		mutant{name: "workload-request-delete-refused", pkg: gatedSuite, focus: "deleting the request of a running", guard: "nobody but the manager deletes the request of a running gated workload while it holds the lock", edits: []edit{
			{"workload-request-delete-refused", "      request.operation != 'DELETE' || !variables.made ||", "      true || request.operation != 'DELETE' || !variables.made ||"},
		}},
	)
}

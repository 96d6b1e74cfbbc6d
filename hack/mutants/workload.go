package main

// The gated workloads' guards (internal/workload, config/admission/workload-gate.yaml), killed
// by test/gated. In a file of their own so the list above stays the grant path's.
const (
	gatedSuite  = "./test/gated/"
	workloadPkg = "./internal/workload/"
)

func init() {
	mutants = append(mutants,
		mutant{name: "workload-gone-from-cache", pkg: gatedSuite, focus: "leaves the manager", guard: "a workload missing from the gated cache is read live before its request is deleted", edits: []edit{
			{"workload-gone-from-cache", "if err := r.live.Get(ctx, key, obj); err == nil && ownedBy(lr, obj) {", "if err := r.live.Get(ctx, key, obj); false && err == nil && ownedBy(lr, obj) {"},
		}},
		mutant{name: "workload-no-token", pkg: gatedSuite, focus: "holds a Pod|two Jobs", guard: "a workload is let go in the same write that gives it its fencing token", edits: []edit{
			{"workload-no-token", "	setAnnotation(p, AnnotationFencingToken, token)\n", ""},
			{"workload-no-token/2", "	setAnnotation(j, AnnotationFencingToken, token)\n", ""},
		}},
		mutant{name: "workload-not-stopped", pkg: gatedSuite, focus: "loses its lock", guard: "a workload whose lock is gone before it finished is stopped", edits: []edit{
			{"workload-not-stopped", "	case lr.Status.Phase.IsFinal() && token != \"\":\n", "	case false && lr.Status.Phase.IsFinal() && token != \"\":\n"},
		}},
		mutant{name: "workload-released-while-running", pkg: gatedSuite, focus: "holds a Pod|two Jobs", guard: "a workload's lock is released only when it has finished (or is being deleted)", edits: []edit{
			{"workload-released-while-running", "\tif done, how := r.kind.finished(obj); done {\n", "\tif done, how := r.kind.finished(obj); true || done {\n"},
		}},
		mutant{name: "workload-job-pods-outlive", pkg: gatedSuite, focus: "last Pod is gone", guard: "a deleted Job's lock is kept until its last Pod is gone", edits: []edit{
			{"workload-job-pods-outlive", "if running, err := r.podsLeft(ctx, lr); err != nil || running > 0 {", "if running, err := r.podsLeft(ctx, lr); err != nil || false && running > 0 {"},
		}},
		mutant{name: "workload-pods-not-owners", pkg: gatedSuite, focus: "last Pod is gone", guard: "a running Job's Pods own its lock request too, so the garbage collector keeps it until they are gone", edits: []edit{
			{"workload-pods-not-owners", "			if err := r.ownPods(ctx, j, lr); err != nil {\n", "			if err := error(nil); err != nil && j != nil {\n"},
		}},
		mutant{name: "workload-not-renewed", pkg: gatedSuite, focus: "renews the lock", guard: "a running workload's grant is renewed, so it does not lose its lock only because it runs longer than its ttl", edits: []edit{
			{"workload-not-renewed", "		return r.renew(ctx, lr)\n", "		return ctrl.Result{}, nil\n"},
		}},
		mutant{name: "workload-renew-when-due", pkg: gatedSuite, focus: "renews the lock", guard: "a grant is renewed only when a quarter of its term has passed and the last renewal was answered (not on every event: a loop of writes)", edits: []edit{
			{"workload-renew-when-due", "	if !answered || now.Before(at) {\n", "	if false && (!answered || now.Before(at)) {\n"},
		}},
		mutant{name: "workload-grant-read-live", pkg: workloadPkg, focus: "run:TestGrantSeenStaleDoesNotLetGo", guard: "a workload is let go only on a grant read live (a lagging cache may still show one that ended)", edits: []edit{
			{"workload-grant-read-live", "			if ok, err := r.stillGranted(ctx, lr); err != nil || !ok {\n", "			if ok, err := r.stillGranted(ctx, lr); false && (err != nil || !ok) {\n"},
		}},
		mutant{name: "workload-gate-removable", pkg: gatedSuite, focus: "by hand", guard: "only the manager removes a Pod's scheduling gate", edits: []edit{
			{"workload-gate-removable", `  - expression: "variables.manager || !variables.oldGate || variables.newGate"`, `  - expression: "true || variables.manager || !variables.oldGate || variables.newGate"`},
		}},
		mutant{name: "workload-unsuspendable", pkg: gatedSuite, focus: "by hand|loses its lock", guard: "only the manager unsuspends a gated Job without a fencing token", edits: []edit{
			{"workload-unsuspendable", `  - expression: "variables.manager || !variables.oldSuspended || variables.newSuspended || variables.oldToken"`, `  - expression: "true || variables.manager || !variables.oldSuspended || variables.newSuspended || variables.oldToken"`},
		}},
	)
}

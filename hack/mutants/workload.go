package main

// The gated workloads' guards (internal/workload, config/admission/workload-gate.yaml), killed
// by test/gated. In a file of their own so the list above stays the grant path's.
const gatedSuite = "./test/gated/"

func init() {
	mutants = append(mutants,
		mutant{name: "workload-gone-from-cache", pkg: gatedSuite, focus: "leaves the manager", guard: "a workload missing from the gated cache is read live before its request is deleted", edits: []edit{
			{"workload-gone-from-cache", "if err := r.live.Get(ctx, req.NamespacedName, obj); err == nil && ownedBy(lr, obj) {", "if err := r.live.Get(ctx, req.NamespacedName, obj); false && err == nil && ownedBy(lr, obj) {"},
		}},
		mutant{name: "workload-no-token", pkg: gatedSuite, focus: "holds a Pod|two Jobs", guard: "a workload is let go in the same write that gives it its fencing token", edits: []edit{
			{"workload-no-token", "	setAnnotation(p, AnnotationFencingToken, token)\n", ""},
			{"workload-no-token/2", "	setAnnotation(j, AnnotationFencingToken, token)\n", ""},
		}},
		mutant{name: "workload-not-stopped", pkg: gatedSuite, focus: "loses its lock", guard: "a workload whose lock is gone before it finished is stopped", edits: []edit{
			{"workload-not-stopped", "	case lr.Status.Phase.IsFinal() && token != \"\":\n", "	case false && lr.Status.Phase.IsFinal() && token != \"\":\n"},
		}},
		mutant{name: "workload-released-while-running", pkg: gatedSuite, focus: "holds a Pod|two Jobs", guard: "a workload's lock is released only when it has finished (or is being deleted)", edits: []edit{
			{"workload-released-while-running", "	if done, how := r.kind.finished(obj); done {\n", "	if done, how := r.kind.finished(obj); true || done {\n"},
		}},
		mutant{name: "workload-job-pods-outlive", pkg: gatedSuite, focus: "last Pod is gone", guard: "a deleted Job's lock is kept until its last Pod is gone", edits: []edit{
			{"workload-job-pods-outlive", "if running, err := r.podsLeft(ctx, lr); err != nil || running > 0 {", "if running, err := r.podsLeft(ctx, lr); err != nil || false && running > 0 {"},
		}},
		mutant{name: "workload-pods-not-owners", pkg: gatedSuite, focus: "last Pod is gone", guard: "a running Job's Pods own its lock request too, so the garbage collector keeps it until they are gone", edits: []edit{
			{"workload-pods-not-owners", "			return ctrl.Result{}, r.ownPods(ctx, j, lr)\n", "			_ = j\n"},
		}},
		mutant{name: "workload-gate-removable", pkg: gatedSuite, focus: "by hand", guard: "only the manager removes a Pod's scheduling gate", edits: []edit{
			{"workload-gate-removable", `  - expression: "variables.manager || !variables.oldGate || variables.newGate"`, `  - expression: "true || variables.manager || !variables.oldGate || variables.newGate"`},
		}},
		mutant{name: "workload-unsuspendable", pkg: gatedSuite, focus: "by hand|loses its lock", guard: "only the manager unsuspends a gated Job without a fencing token", edits: []edit{
			{"workload-unsuspendable", `  - expression: "variables.manager || !variables.oldSuspended || variables.newSuspended || variables.oldToken"`, `  - expression: "true || variables.manager || !variables.oldSuspended || variables.newSuspended || variables.oldToken"`},
		}},
	)
}

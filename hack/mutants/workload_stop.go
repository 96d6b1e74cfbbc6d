package main

// The stop grace of a spoke's workloads (internal/workload WithStopGrace): a workload stopped on
// a lost lock in a spoke terminates within --fleet-grace. In a file of its own beside
// workload.go, whose init is long enough.
func init() {
	mutants = append(mutants,
		mutant{name: "workload-stop-grace-capped", pkg: workloadPkg, focus: "run:TestStopGraceCapsTheStoppedPods", guard: "in a spoke, a stopped workload's Pods are deleted within --fleet-grace, not their own longer grace", edits: []edit{
			{"workload-stop-grace-capped", "	if own <= limit {", "	if true {"},
		}},
		mutant{name: "workload-job-pods-by-owner", pkg: workloadPkg, focus: "run:TestStopGraceCapsTheStoppedPods", guard: "only a stopped Job's own Pods (its controller reference) are deleted, not one that wears its label", edits: []edit{
			{"workload-job-pods-by-owner", "if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != job.UID {", "if ref := metav1.GetControllerOf(p); false && (ref == nil || ref.UID != job.UID) {"},
		}},
	)
}

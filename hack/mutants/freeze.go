package main

// The write freeze's guards (config/admission/freeze.yaml, internal/controller's
// status.admission), killed by test/admission's write-freeze specs. In a file of their own so
// the list above stays the grant path's.
const admissionSuite = "./test/admission/"

func init() {
	mutants = append(mutants,
		mutant{name: "freeze-failure-ignored", pkg: admissionSuite, focus: "cannot be read", guard: "a broken freeze policy (params it cannot read) never stops the cluster's writes: failurePolicy Ignore", edits: []edit{
			{"freeze-failure-ignored", "  failurePolicy: Ignore", "  failurePolicy: Fail"},
		}},
		mutant{name: "freeze-spares-system-namespaces", pkg: admissionSuite, focus: "never in the way", guard: "kube-system, kube-node-lease and kube-public are never frozen", edits: []edit{
			{"freeze-spares-system-namespaces", `values: ["kube-system", "kube-node-lease", "kube-public"]`, `values: ["no-such-namespace"]`},
		}},
		mutant{name: "freeze-spares-cluster-resources", pkg: admissionSuite, focus: "never in the way", guard: "events, leases, endpoints, nodes, Turnstile's objects and the policies are never frozen", edits: []edit{
			{"freeze-spares-cluster-resources", `resources: ["events", "endpoints", "nodes", "bindings"]`, `resources: ["no-such-resource"]`},
		}},
		mutant{name: "freeze-spares-control-plane", pkg: admissionSuite, focus: "never in the way", guard: "the control plane's writes (kube-system ServiceAccounts, kube-controller-manager, the scheduler, kubelets) are never frozen", edits: []edit{
			{"freeze-spares-control-plane", "      !(request.userInfo.username.startsWith('system:serviceaccount:kube-system:')", "      !(false && request.userInfo.username.startsWith('system:serviceaccount:kube-system:')"},
		}},
		mutant{name: "freeze-spares-dry-run", pkg: admissionSuite, focus: "refused with the message", guard: "a server-side dry run changes nothing and is never frozen", edits: []edit{
			{"freeze-spares-dry-run", `expression: "!(has(request.dryRun) && request.dryRun)"`, `expression: "true"`},
		}},
		mutant{name: "freeze-except", pkg: admissionSuite, focus: "refused with the message", guard: "spec.admission.except (a break-glass group) is never frozen", edits: []edit{
			{"freeze-except", "      has(variables.admission.except) && (", "      false && has(variables.admission.except) && ("},
		}},
		mutant{name: "freeze-delete-judged-at", pkg: admissionSuite, focus: "windows that open and close", guard: "a delete (no time of its own) and an update are judged as of status.admission.judgedAt too", edits: []edit{
			{"freeze-delete-judged-at", `expression: "request.operation == 'CREATE' && size(variables.stamps) > 0 ? variables.stamps : variables.stamps + variables.judged"`, `expression: "variables.stamps"`},
		}},
		mutant{name: "freeze-update-stamped", pkg: admissionSuite, focus: "windows that open and close", guard: "an update is judged by the managedFields times the API server stamped on it (a window opening while no manager runs)", edits: []edit{
			{"freeze-update-stamped", `request.operation == 'UPDATE' && has(object.metadata.managedFields) ?`, `false && request.operation == 'UPDATE' && has(object.metadata.managedFields) ?`},
		}},
		mutant{name: "freeze-update-stamps-only-new", pkg: admissionSuite, focus: "windows that open and close", guard: "only the managedFields times this write changed are its stamps (not the older writes' entries)", edits: []edit{
			{"freeze-update-stamps-only-new", `          !(has(oldObject.metadata.managedFields) && oldObject.metadata.managedFields.exists(`, `          true || !(has(oldObject.metadata.managedFields) && oldObject.metadata.managedFields.exists(`},
		}},
		mutant{name: "freeze-cluster-scoped-namespace", pkg: admissionSuite, focus: "break glass", guard: "a cluster-scoped write (no request.namespace) is judged without an error, which failurePolicy Ignore would admit", edits: []edit{
			{"freeze-cluster-scoped-namespace", `expression: "has(request.namespace) ? request.namespace : ''"`, `expression: "request.namespace"`},
		}},
		mutant{name: "freeze-namespace-relabel", pkg: admissionSuite, focus: "relabelling a frozen namespace", guard: "a Namespace's update is judged by its labels before and after it", edits: []edit{
			{"freeze-namespace-relabel", `      object != null && oldObject != null ?`, `      false && object != null && oldObject != null ?`},
		}},
		mutant{name: "freeze-refuses", pkg: admissionSuite, focus: "refused with the message", guard: "a frozen write is refused", edits: []edit{
			{"freeze-refuses", "      !variables.subjects || !variables.kinds ||", "      true || !variables.subjects || !variables.kinds ||"},
		}},
		mutant{name: "admission-judged-at-edges", pkg: admissionSuite, focus: "windows that open and close", guard: "the manager judges the windows again at every edge (judgedAt, the clock of deletes)", edits: []edit{
			{"admission-judged-at-edges", "	if stale(cl, stored, now) {", "	if stored == nil || stored.JudgedAt == nil {"},
		}},
		mutant{name: "freeze-names-the-manager", pkg: admissionSuite, focus: "never in the way", guard: "the manager names itself in status.admission.manager, so its own writes (ungating Pods and Jobs) pass every write freeze", edits: []edit{
			{"freeze-names-the-manager", "	st.Admission.Manager = user", "	st.Admission.Manager, _ = \"\", user"},
		}},
		mutant{name: "admission-rejudged-before-horizon", pkg: controls, focus: "run:TestAdmissionJudgedAgainBeforeItsHorizon", guard: "a write freeze's judgement is made again at half the horizon, and the reconciler wakes up for it", edits: []edit{
			{"admission-rejudged-before-horizon", "	if !now.Before(judged.Add(rejudgeAfter)) {", "	if false && !now.Before(judged.Add(rejudgeAfter)) {"},
			{"admission-rejudged-before-horizon/2", "	if t := admissionWakeUp(cl); !t.IsZero() && (next.IsZero() || t.Before(next)) {", "	if t := admissionWakeUp(cl); false && !t.IsZero() && (next.IsZero() || t.Before(next)) {"},
		}},
		mutant{name: "break-glass-granted-only", pkg: admissionSuite, focus: "break glass", guard: "only a granted bypass request breaks the glass (not a released one whose expiry is still ahead)", edits: []edit{
			{"break-glass-granted-only", "lr.Spec.BypassFreeze == nil || lr.Status.Phase != locksv1.PhaseGranted ||", "lr.Spec.BypassFreeze == nil ||"},
		}},
	)
}

package why

import "testing"

// TestRefusedWrite reads the write out of each shape of the policy's message as the tools print
// it: a manual freeze with its start, a window, mode Warn's warning, a reason with ": " in it.
func TestRefusedWrite(t *testing.T) {
	const tail = " is refused; to get past it, a platform admin can thaw it (kubectl turnstile thaw weekend); kubectl turnstile why explains this message"
	for name, tc := range map[string]struct{ text, name, write string }{
		"kubectl, a manual freeze": {
			text: `Error from server (Forbidden): configmaps "app" is forbidden: ValidatingAdmissionPolicy 'turnstile-freeze' with binding 'turnstile-freeze' denied request: ` +
				`writes are frozen by commandlock weekend (no production changes) since 2027-03-26T17:00:00Z until it is thawed: create of configmaps app in namespace shop by alice` + tail,
			name: "weekend", write: "create of configmaps app in namespace shop by alice",
		},
		"Flux, a window": {
			text: `Deployment/shop/web apply failed: deployments.apps "web" is forbidden: ValidatingAdmissionPolicy 'turnstile-freeze' with binding 'turnstile-freeze' denied request: ` +
				`writes are frozen by commandlock weekend (no production changes) since 2027-03-26T17:00:00Z until 2027-03-29T04:00:00Z (window weekend): update of deployments.apps web in namespace shop by system:serviceaccount:flux-system:kustomize-controller` + tail,
			name: "weekend", write: "update of deployments.apps web in namespace shop by system:serviceaccount:flux-system:kustomize-controller",
		},
		"a Warn mode warning, a reason with a colon": {
			text: `Warning: Validation failed for ValidatingAdmissionPolicy 'turnstile-freeze-warn' with binding 'turnstile-freeze-warn': this would have been refused: ` +
				`writes are frozen by commandlock release-2 (release: no changes) until it is thawed: delete of namespaces shop by bob` + tail,
			name: "release-2", write: "delete of namespaces shop by bob",
		},
		"a cluster-scoped object": {
			text: `writes are frozen by commandlock weekend (x) until it is thawed: create of clusterroles.rbac.authorization.k8s.io reader by alice` + tail,
			name: "weekend", write: "create of clusterroles.rbac.authorization.k8s.io reader by alice",
		},
		"not a refusal": {text: "error: the server doesn't have a resource type \"x\""},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := refusedCommandLock(tc.text)
			if ok != (tc.name != "") || got != tc.name {
				t.Errorf("commandlock %q (%v), want %q", got, ok, tc.name)
			}
			if got := refusedWrite(tc.text); got != tc.write {
				t.Errorf("write %q, want %q", got, tc.write)
			}
		})
	}
}

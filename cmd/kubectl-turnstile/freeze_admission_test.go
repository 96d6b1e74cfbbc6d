package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

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

// TestAdmissionFlags builds spec.admission from freeze's flags, and refuses what it cannot.
func TestAdmissionFlags(t *testing.T) {
	build := func(args ...string) (*locksv1.AdmissionFreeze, error) {
		t.Helper()
		var a admissionFlags
		cmd := &cobra.Command{Use: "freeze"}
		a.register(cmd)
		if err := cmd.Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		return a.build()
	}
	if got, err := build(); got != nil || err != nil {
		t.Errorf("no enforcement flag: %+v, %v; want none", got, err)
	}
	got, err := build("--kind", "ConfigMap", "--kind", "apps/Deployment", "--kind", "apps/StatefulSet", "--kind", "batch/*",
		"--enforce-namespaces", "env=prod,tier in (web)", "--service-account", "flux-system/kustomize-controller", "--group", "ci",
		"--except-group", "platform:break-glass", "--mode", "warn", "--bypass", "page #platform-oncall")
	if err != nil {
		t.Fatal(err)
	}
	want := &locksv1.AdmissionFreeze{
		Mode: locksv1.AdmissionWarn,
		Resources: []locksv1.AdmissionResources{
			{APIGroups: []string{""}, Kinds: []string{"ConfigMap"}},
			{APIGroups: []string{"apps"}, Kinds: []string{"Deployment", "StatefulSet"}},
			{APIGroups: []string{"batch"}, Kinds: []string{"*"}},
		},
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"web"}}}},
		Subjects: &locksv1.AdmissionSubjects{Groups: []string{"ci"}, ServiceAccounts: []string{"flux-system/kustomize-controller"}},
		Except:   &locksv1.AdmissionSubjects{Groups: []string{"platform:break-glass"}},
		Bypass:   "page #platform-oncall",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spec.admission (-want +got):\n%s", diff)
	}
	if got, err := build("--enforce"); err != nil || !cmp.Equal(got, &locksv1.AdmissionFreeze{Mode: locksv1.AdmissionDeny}) {
		t.Errorf("--enforce alone: %+v, %v; want everyone's writes of every kind everywhere, Deny", got, err)
	}
	for _, args := range [][]string{{"--mode", "Audit"}, {"--kind", "apps/"}, {"--enforce-namespaces", "env in prod"}} {
		if got, err := build(args...); err == nil {
			t.Errorf("%v: %+v, want an error", args, got)
		}
	}
}

package freeze

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

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

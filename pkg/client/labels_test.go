package client_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/pkg/client"
)

// The hash suffixes are the first 10 hex digits of `printf %s VALUE | sha256sum`.
func TestLabelValue(t *testing.T) {
	long := strings.Repeat("a", 70)
	for name, tc := range map[string]struct {
		in   string
		want string
	}{
		"empty":                  {in: "", want: ""},
		"plain":                  {in: "alice", want: "alice"},
		"plain, 63 characters":   {in: strings.Repeat("b", 63), want: strings.Repeat("b", 63)},
		"too long":               {in: long, want: strings.Repeat("a", 52) + "-" + "6bd5e50348"},
		"an email":               {in: "alice@example.com", want: "alice.example.com-ff8d9819fc"},
		"a service account":      {in: "system:serviceaccount:ci:atlantis", want: "system.serviceaccount.ci.atlantis-a18d846f6d"},
		"a non-alphanumeric end": {in: "bot-", want: "bot-4606788450"},
		"nothing readable":       {in: "Ω", want: "e3c622e5fd"},
	} {
		t.Run(name, func(t *testing.T) {
			got := client.LabelValue(tc.in)
			if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
				t.Fatalf("LabelValue(%q) = %q, not a label value: %v", tc.in, got, errs)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("LabelValue(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestLabelsFor(t *testing.T) {
	target := func(repo string) locksv1.LockTarget {
		return locksv1.LockTarget{Repo: repo, Path: "net", Workspace: "default"}
	}
	for name, tc := range map[string]struct {
		spec locksv1.LockRequestSpec
		want map[string]string
	}{
		"one repository and a pull": {
			spec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{target("acme/infra"), target("acme/infra")}, Holder: locksv1.Holder{Owner: "alice", Pull: 100}},
			want: map[string]string{client.LabelRepo: "acme.infra", client.LabelPull: "100", client.LabelOwner: "alice"},
		},
		"no pull: no pull label": {
			spec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{target("acme/infra")}, Holder: locksv1.Holder{Owner: "alice"}},
			want: map[string]string{client.LabelRepo: "acme.infra", client.LabelOwner: "alice"},
		},
		"two repositories: no repo label": {
			spec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{target("acme/infra"), target("acme/dns")}, Holder: locksv1.Holder{Owner: "alice", Pull: 1}},
			want: map[string]string{client.LabelPull: "1", client.LabelOwner: "alice"},
		},
		"a nested GitLab group": {
			spec: locksv1.LockRequestSpec{Locks: []locksv1.LockTarget{target("acme/platform/infra")}, Holder: locksv1.Holder{Owner: "alice"}},
			want: map[string]string{client.LabelRepo: "acme.platform.infra", client.LabelOwner: "alice"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, client.LabelsFor(&tc.spec)); diff != "" {
				t.Errorf("LabelsFor (-want +got):\n%s", diff)
			}
		})
	}
}

package util

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/plugin/ci"
)

// parseRequest parses args as a lock-taking command's flags and builds the request.
func parseRequest(t *testing.T, args ...string) (locksv1.Priority, error) {
	t.Helper()
	var f RequestFlags
	cmd := &cobra.Command{Use: "acquire"}
	f.Bind(cmd.Flags())
	if err := cmd.Flags().Parse(args); err != nil {
		return "", err
	}
	r, err := f.Request(cmd)
	return r.Priority, err
}

func TestEnumFlagsAnyCase(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want locksv1.Priority
	}{
		{"high", locksv1.PriorityHigh}, {"HIGH", locksv1.PriorityHigh}, {"High", locksv1.PriorityHigh},
		{"low", locksv1.PriorityLow}, {"nOrMaL", locksv1.PriorityNormal}, {"critical", locksv1.PriorityCritical},
	} {
		got, err := parseRequest(t, "-l", "acme/infra:app", "--priority", tc.arg)
		if err != nil || got != tc.want {
			t.Errorf("--priority %s = %q, %v; want %s", tc.arg, got, err, tc.want)
		}
	}
	var from string
	e := NewEnum(&from, ci.Atlantis, ci.GitHubActions)
	if err := e.Set("GitHub-Actions"); err != nil || from != ci.GitHubActions {
		t.Errorf("--from GitHub-Actions = %q, %v; want %s", from, err, ci.GitHubActions)
	}
}

// TestEnumFlagsRefusalsListValues: every enum flag's refusal names the flag and lists every
// valid value, and suggests the near one for a slip.
func TestEnumFlagsRefusalsListValues(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"--priority", "urgent"}, []string{`invalid argument "urgent" for "--priority"`, "valid values are Low, Normal, High, Critical"}},
		{[]string{"--priority", "hihg"}, []string{"did you mean High?", "valid values are Low, Normal, High, Critical"}},
		{[]string{"--from", "jenkins"}, []string{`"--from"`, "valid values are atlantis, github-actions"}},
		{[]string{"--from", "atlantsi"}, []string{"did you mean atlantis?"}},
	} {
		_, err := parseRequest(t, append([]string{"-l", "acme/infra:app"}, tc.args...)...)
		if err == nil {
			t.Errorf("%v: accepted", tc.args)
			continue
		}
		for _, w := range tc.wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %q does not say %q", tc.args, err, w)
			}
		}
	}
}

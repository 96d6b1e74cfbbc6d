package main

import (
	"testing"

	"github.com/spf13/cobra"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// TestSharedFlag: --shared asks for every lock in Shared mode; without it the mode is unset
// (Exclusive).
func TestSharedFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want locksv1.LockMode
	}{
		{[]string{"-l", "acme/infra:vpc", "-l", "acme/infra:dns", "--shared"}, locksv1.ModeShared},
		{[]string{"-l", "acme/infra:vpc", "-l", "acme/infra:dns"}, ""},
	} {
		var f requestFlags
		cmd := &cobra.Command{Use: "x"}
		f.bind(cmd.Flags())
		if err := cmd.Flags().Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		r, err := f.request(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Locks) != 2 {
			t.Fatalf("%v: %d locks", tc.args, len(r.Locks))
		}
		for _, l := range r.Locks {
			if l.Mode != tc.want {
				t.Errorf("%v: %s mode %q, want %q", tc.args, l.Path, l.Mode, tc.want)
			}
		}
	}
}

package util

import (
	"strings"
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
		var f RequestFlags
		cmd := &cobra.Command{Use: "x"}
		f.Bind(cmd.Flags())
		if err := cmd.Flags().Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		r, err := f.Request(cmd)
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

// TestMaxHoldersFlag: --max-holders N asks for every lock as a counting lock (Shared, at most N
// holders); a number the API would refuse is refused before anything is sent.
func TestMaxHoldersFlag(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    int32
		wantErr string
	}{
		{args: []string{"-l", "acme/fleet:upgrade", "-l", "acme/fleet:dns", "--max-holders", "3"}, want: 3},
		{args: []string{"-l", "acme/fleet:upgrade", "-l", "acme/fleet:dns", "--shared", "--max-holders", "1"}, want: 1},
		{args: []string{"-l", "acme/fleet:upgrade", "--max-holders", "0"}, wantErr: "--max-holders 0: want 1 to 100"},
		{args: []string{"-l", "acme/fleet:upgrade", "--max-holders", "101"}, wantErr: "--max-holders 101: want 1 to 100"},
	} {
		var f RequestFlags
		cmd := &cobra.Command{Use: "x"}
		f.Bind(cmd.Flags())
		if err := cmd.Flags().Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		r, err := f.Request(cmd)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range r.Locks {
			if l.Mode != locksv1.ModeShared || l.MaxHolders != tc.want {
				t.Errorf("%v: %s mode %q maxHolders %d, want Shared, %d", tc.args, l.Path, l.Mode, l.MaxHolders, tc.want)
			}
		}
	}
}

// TestLockFlag: --lock is read by lockkey.Parse, and its refusal names the flag, the key and
// what is wrong, before anything is sent.
func TestLockFlag(t *testing.T) {
	for _, tc := range []struct {
		arg     string
		want    locksv1.LockTarget
		wantErr string
	}{
		{arg: "acme/infra:modules/vpc", want: locksv1.LockTarget{Repo: "acme/infra", Path: "modules/vpc", Workspace: "default"}},
		{arg: "acme/infra:.::web", want: locksv1.LockTarget{Repo: "acme/infra", Path: ".", Workspace: "default", Project: "web"}},
		{arg: "acme-infra", wantErr: `--lock "acme-infra": want REPO:PATH[:WORKSPACE[:PROJECT]], e.g. acme/infra:modules/vpc:default`},
		{arg: "acme/infra:/vpc", wantErr: `--lock "acme/infra:/vpc": path must be relative to the repository root (no leading '/'), e.g. modules/vpc`},
	} {
		var f RequestFlags
		cmd := &cobra.Command{Use: "x"}
		f.Bind(cmd.Flags())
		if err := cmd.Flags().Parse([]string{"--lock", tc.arg}); err != nil {
			t.Fatal(err)
		}
		r, err := f.Request(cmd)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("--lock %s: error %v, want %q", tc.arg, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(r.Locks) != 1 || r.Locks[0] != tc.want {
			t.Errorf("--lock %s = %+v, %v; want %+v", tc.arg, r.Locks, err, tc.want)
		}
	}
}

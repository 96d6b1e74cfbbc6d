package dashboard_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/turnstile-dev/turnstile/internal/plugin/cmd"
)

// TestDashboardRefusesRemote: the command refuses a non-loopback address before it reads a
// kubeconfig or opens a port, and says how to override it.
func TestDashboardRefusesRemote(t *testing.T) {
	cases := map[string]struct {
		args    []string
		wantErr string
	}{
		"every interface": {args: []string{"dashboard", "--address", "0.0.0.0"}, wantErr: `refusing to serve the dashboard on 0.0.0.0: "0.0.0.0" is not a loopback address`},
		"a LAN address":   {args: []string{"dashboard", "--address", "10.1.2.3", "--port", "8765"}, wantErr: "pass --allow-remote if you mean it"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root := cmd.NewDefaultCommand()
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&out)
			// A kubeconfig that does not exist: the refusal must come before it is read.
			root.SetArgs(append(tc.args, "--kubeconfig", "/nonexistent/kubeconfig"))
			err := root.ExecuteContext(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q before refusing", out.String())
			}
		})
	}
}

// TestDashboardAllowRemoteWarns: --allow-remote lets a non-loopback address through, with a
// warning first (the missing kubeconfig then stops it before it listens).
func TestDashboardAllowRemoteWarns(t *testing.T) {
	root := cmd.NewDefaultCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"dashboard", "--address", "0.0.0.0", "--allow-remote", "--kubeconfig", "/nonexistent/kubeconfig"})
	err := root.ExecuteContext(context.Background())
	if err == nil || strings.Contains(err.Error(), "refusing") {
		t.Fatalf("err = %v, want the kubeconfig's error, not a refusal", err)
	}
	if !strings.HasPrefix(out.String(), "WARNING: serving the dashboard on 0.0.0.0, beyond this machine (--allow-remote)") {
		t.Errorf("no warning: %q", out.String())
	}
}

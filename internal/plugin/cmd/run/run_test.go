package run

import (
	"errors"
	"strings"
	"testing"

	"github.com/turnstile-dev/turnstile/internal/plugin/keeper"
)

// TestDefaultsFit: run's default --grace fits in its default --lease-duration, with a failed
// renewal and its retry (keeper.FitGrace).
func TestDefaultsFit(t *testing.T) {
	if why := keeper.FitGrace("--lease-duration", defaultLeaseDuration, defaultGrace); why != "" {
		t.Errorf("the defaults do not fit: %s", why)
	}
}

func TestHolderSession(t *testing.T) {
	a, err := holderSession(runOptions{})
	if err != nil || !strings.HasPrefix(a, "run-") {
		t.Fatalf("a run's session = %q, %v; want a fresh run-… session", a, err)
	}
	if b, _ := holderSession(runOptions{}); a == b {
		t.Errorf("two runs got one session %q: they would share the lock", a)
	}
	if s, _ := holderSession(runOptions{session: "deploy-7"}); s != "deploy-7" {
		t.Errorf("--session deploy-7 gave %q", s)
	}
	if s, _ := holderSession(runOptions{shareWithOwner: true}); s != "" {
		t.Errorf("--share-with-same-owner gave session %q, want none", s)
	}
	if _, err := holderSession(runOptions{session: "x", shareWithOwner: true}); err == nil {
		t.Error("--session with --share-with-same-owner must be refused")
	}
}

// TestResult: how the tree ended, as run's exit code (docs/run.md) and whether the locks are kept.
func TestResult(t *testing.T) {
	lost := errors.New("lock lost while the command ran")
	for _, tc := range []struct {
		name     string
		out      keeper.Outcome
		keep     bool
		wantCode int
		wantKeep bool
	}{
		{name: "the command's status", out: keeper.Outcome{Status: 3}, wantCode: 3},
		{name: "kept after a failure", out: keeper.Outcome{Status: 3}, keep: true, wantCode: 3, wantKeep: true},
		{name: "a success is never kept", out: keeper.Outcome{Status: 0}, keep: true, wantCode: 0},
		{name: "not found", out: keeper.Outcome{ExecCode: keeper.ExitNotFound, Status: -1}, keep: true, wantCode: 127},
		{name: "lost: 76, never kept", out: keeper.Outcome{Status: 143, Lost: lost}, keep: true, wantCode: exitLost},
		{name: "the keeper said nothing", out: keeper.Outcome{Status: -1}, wantCode: exitRunFailed},
	} {
		if code, keep := result(tc.out, tc.keep); code != tc.wantCode || keep != tc.wantKeep {
			t.Errorf("%s: result = %d, %v; want %d, %v", tc.name, code, keep, tc.wantCode, tc.wantKeep)
		}
	}
}

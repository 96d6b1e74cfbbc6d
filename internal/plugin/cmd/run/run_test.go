package run

import (
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

package releasebuild

import (
	"errors"
	"strings"
	"testing"
)

// TestPreviousWithoutHistory: a checkout that lacks the previous release's commit (a shallow
// clone) gets ErrNoHistory, saying how to fetch it, rather than a build error; test/release
// skips on it, or fails with CI=true.
func TestPreviousWithoutHistory(t *testing.T) {
	t.Setenv("TURNSTILE_RELEASE_PREVIOUS", "0123456789abcdef0123456789abcdef01234567")
	_, err := Previous()
	if !errors.Is(err, ErrNoHistory) {
		t.Fatalf("Previous() = %v, want ErrNoHistory", err)
	}
	if !strings.Contains(err.Error(), "git fetch") {
		t.Errorf("%v does not say how to get the commit", err)
	}
}

func TestWithoutVars(t *testing.T) {
	got := withoutVars([]string{"A=1", "MAKEFLAGS=-j2", "MAKELEVEL=1", "PATH=/bin"}, "MAKEFLAGS", "MAKELEVEL")
	if strings.Join(got, " ") != "A=1 PATH=/bin" {
		t.Errorf("withoutVars = %v", got)
	}
}

package dev

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// TestCheckTrackedSize: `make check-tracked-size` (the first step of .ci/run) passes on this
// checkout and fails, naming the file, in a repository that tracks a file over 5 MB, as this one
// once tracked a 77 MB manager binary. A file that is only on disk, untracked, is not its concern.
func TestCheckTrackedSize(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	check := func(dir string) (string, error) {
		cmd := exec.Command("make", "--no-print-directory", "-f", filepath.Join(root, "Makefile"), "check-tracked-size")
		cmd.Dir = dir
		cmd.Env = withoutMakeVars(os.Environ())
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := check(root); err != nil {
		t.Errorf("this checkout tracks a file over 5 MB:\n%s", out)
	}

	repo := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	git("init", "-q")
	big := make([]byte, 6<<20)
	if err := os.WriteFile(filepath.Join(repo, "manager"), big, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "small.txt"), []byte("fine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "small.txt")
	if out, err := check(repo); err != nil {
		t.Errorf("an untracked 6 MB file failed the check:\n%s", out)
	}
	git("add", "manager")
	out, err := check(repo)
	if err == nil {
		t.Fatalf("a tracked 6 MB file passed the check:\n%s", out)
	}
	if !strings.Contains(out, "6291456 manager") {
		t.Errorf("the refusal does not name the file and its size:\n%s", out)
	}
}

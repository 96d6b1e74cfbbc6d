// Package release checks a release as its users take it: make release's output (built by
// internal/testing/releasebuild with the Makefile's own target), read by the tools that will
// read it and by code of its own, not by the release tool.
//
//   - Reproducible: the working tree built again from a copy at another path gives the same
//     bytes, file for file.
//   - SHA256SUMS checks with sha256sum; the image layout is read and unpacked layer by layer
//     (internal/testing/oci), its platforms, user, entrypoint and files are what docs say;
//     the chart (helm) and the install bundle pin the image by its digest.
//   - The image runs: its root file system, unpacked, is started with the packaged chart's
//     rendered args, env and user as a kubelet would (internal/testing/kubelet: namespaces,
//     chroot; needs root), and the manager grants a lock.
//   - The plugin's archives hold binaries of their platforms; krew's own validator accepts
//     the manifest and krew installs every platform's archive from it; kubectl runs the
//     installed plugin.
//   - The SBOMs list what `go version -m` reads from the binaries in the image and archives.
//   - Upgrade with locks held from the previous release (a pinned commit built by the same
//     target) and back, and the two releases' CRDs compared for changes that break a served
//     version (upgrade_test.go).
//
// Run it with `make test`, or alone with:
//
//	make k8s-bins helm krew && go test -count=1 -v -timeout 60m ./test/release/
//
// The first run builds the releases (minutes); bin/release-test/ caches them.
package release

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/releasebuild"
)

var root = func() string {
	r, err := framework.RepoRoot()
	if err != nil {
		panic(err)
	}
	return r
}()

// tool is a binary from the environment (set by the Makefile) or its default under bin/.
func tool(t *testing.T, env, def string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p = filepath.Join(root, def)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found (%v): run through `make test`, which builds it (or set %s)", p, err, env)
	}
	return p
}

func helm(t *testing.T) string { return tool(t, "TURNSTILE_HELM", "bin/helm-v3.22.0") }

func kubectl(t *testing.T) string {
	return tool(t, "TURNSTILE_KUBECTL", "bin/k8s/1.37.2-linux-amd64/kubectl")
}

// run runs a command and returns its stdout; a failure fails the test with its stderr.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := runErr(dir, env, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func runErr(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &cmdError{name: filepath.Base(name) + " " + strings.Join(args, " "), err: err, output: stdout.String() + stderr.String()}
	}
	return stdout.String(), nil
}

type cmdError struct {
	name, output string
	err          error
}

func (e *cmdError) Error() string { return e.name + ": " + e.err.Error() + "\n" + e.output }
func (e *cmdError) Unwrap() error { return e.err }

// inCI: CI sets CI=true; there a test that cannot run fails rather than skips.
func inCI() bool { return os.Getenv("CI") == "true" }

// needs skips the test, saying why, or fails it in CI.
func needs(t *testing.T, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if inCI() {
		t.Fatalf("%s (CI=true: this must run in CI)", why)
	}
	t.Skip(why)
}

var (
	headOnce, previousOnce sync.Once
	head, previous         releasebuild.Release
	headErr, previousErr   error
)

// headRelease is the working tree's release (built once for the package, cached in bin/).
func headRelease(t *testing.T) releasebuild.Release {
	t.Helper()
	headOnce.Do(func() {
		head, headErr = releasebuild.Head()
		if headErr == nil {
			t.Logf("release %s of the working tree: %s (built in %s; 0s: from bin/release-test)", head.Version, head.Dir, head.Took.Round(1e9))
		}
	})
	if headErr != nil {
		t.Fatalf("make release of the working tree: %v", headErr)
	}
	return head
}

// previousRelease is the release before this one. A checkout without its commit (a shallow
// clone) skips the test, saying how to fetch it; in CI it fails.
func previousRelease(t *testing.T) releasebuild.Release {
	t.Helper()
	previousOnce.Do(func() {
		previous, previousErr = releasebuild.Previous()
		if previousErr == nil {
			t.Logf("previous release %s (commit %s): %s (built in %s)", previous.Version, previous.Commit, previous.Dir, previous.Took.Round(1e9))
		}
	})
	if errors.Is(previousErr, releasebuild.ErrNoHistory) {
		needs(t, false, previousErr.Error())
	}
	if previousErr != nil {
		t.Fatalf("make release of the previous release: %v", previousErr)
	}
	return previous
}

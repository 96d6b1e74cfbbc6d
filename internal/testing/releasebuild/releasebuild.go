// Package releasebuild builds Turnstile releases for the tests with the Makefile's own target
// (make release, hack/release), exactly as a maintainer builds one: the working tree's, a second
// one of the same tree from a copy elsewhere (test/release compares the two byte for byte), and
// the release before this one (a pinned commit, exported with git archive and built by this
// tree's make release).
//
// A build takes minutes (eight cross-compiled binaries), so each is cached under
// bin/release-test/, keyed by what it is built from (the working tree's files, or the pinned
// commit and the release tool's files), and built once for the packages that use it:
// test/release and test/install run in parallel and share one build under a file lock.
package releasebuild

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

const (
	// Version is the version the tests give the working tree's release.
	Version = "v0.0.0-dev"
	// PreviousCommit is the release before this one, which test/release upgrades from: no tag
	// exists yet, so it is pinned to a commit, the last main before releases could be built
	// (TURNSTILE_RELEASE_PREVIOUS overrides it; a tag once there is one).
	PreviousCommit = "552567d"
	// Image is the repository the tests' releases name (the Makefile's default).
	Image = "ghcr.io/turnstile-dev/turnstile"
)

// ErrNoHistory says the checkout lacks the pinned commit (a shallow clone).
var ErrNoHistory = errors.New("the checkout has no history for the previous release's commit")

// Release is a built release directory.
type Release struct {
	Dir     string
	Version string
	Commit  string
	// Took is how long the build took (0 when it came from the cache).
	Took time.Duration
}

// ChartVersion is the chart's version: the release's without the v.
func (r Release) ChartVersion() string { return strings.TrimPrefix(r.Version, "v") }

// Chart is the packaged chart's path.
func (r Release) Chart() string { return filepath.Join(r.Dir, "turnstile-"+r.ChartVersion()+".tgz") }

// Bundle is the install bundle's path: config/default's, for Kubernetes 1.36 and later.
func (r Release) Bundle() string { return filepath.Join(r.Dir, "install.yaml") }

// BundleFor is the install bundle docs/install.md tells a user of b's cluster to apply: the
// release's build of the kustomize directory framework.BundleFor picks for it.
func (r Release) BundleFor(b framework.Bundle) string {
	switch b.Mutating {
	case "v1":
		return r.Bundle()
	case "v1beta1":
		return filepath.Join(r.Dir, "install-mutating-v1beta1.yaml")
	default:
		return filepath.Join(r.Dir, "install-validating-only.yaml")
	}
}

// ImageLayout is the image's OCI layout directory.
func (r Release) ImageLayout() string { return filepath.Join(r.Dir, "image") }

// Digest is the image index's digest, as image.digest records it.
func (r Release) Digest() (string, error) {
	data, err := os.ReadFile(filepath.Join(r.Dir, "image.digest"))
	return strings.TrimSpace(string(data)), err
}

// DistEnv names a release directory that make release wrote for this checkout (CI builds one
// first, with a clean tree); Head takes it instead of building one.
const DistEnv = "TURNSTILE_RELEASE_DIST"

// Head is the release of the working tree as it is (uncommitted changes included), built or
// taken from the cache, or the one DistEnv names.
func Head() (Release, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return Release{}, err
	}
	if dir := os.Getenv(DistEnv); dir != "" {
		return given(root, dir)
	}
	key, err := treeKey(root)
	if err != nil {
		return Release{}, err
	}
	commit, err := gitOut(root, "rev-parse", "HEAD")
	if err != nil {
		return Release{}, err
	}
	return cached(root, "head-"+key, Version, commit, func(dist string) error {
		return makeRelease(root, root, "VERSION="+Version, "DIST="+dist, "RELEASE_ALLOW_DIRTY=true")
	})
}

// given is a release directory built elsewhere (DistEnv): its version is the name its image
// layout gives the index, its commit the checkout's.
func given(root, dir string) (Release, error) {
	commit, err := gitOut(root, "rev-parse", "HEAD")
	if err != nil {
		return Release{}, err
	}
	data, err := os.ReadFile(filepath.Join(dir, "image", "index.json"))
	if err != nil {
		return Release{}, fmt.Errorf("%s=%s: %w", DistEnv, dir, err)
	}
	var index struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(data, &index); err != nil || len(index.Manifests) != 1 {
		return Release{}, fmt.Errorf("%s=%s: image/index.json names %d images (%w), want one", DistEnv, dir, len(index.Manifests), err)
	}
	return Release{Dir: dir, Version: index.Manifests[0].Annotations["org.opencontainers.image.ref.name"], Commit: commit}, nil
}

// HeadFromCopy builds the working tree's release again as version, from a copy of its files in
// dir (a different path, no .git), with the commit read from the checkout: what a second
// machine building the same commit would do. Never cached.
func HeadFromCopy(dir, version string) (Release, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return Release{}, err
	}
	commit, err := gitOut(root, "rev-parse", "HEAD")
	if err != nil {
		return Release{}, err
	}
	src := filepath.Join(dir, "source")
	if err := copyTree(root, src); err != nil {
		return Release{}, err
	}
	dist := filepath.Join(dir, "dist")
	start := time.Now()
	err = makeRelease(root, src, "VERSION="+version, "DIST="+dist, "RELEASE_ALLOW_DIRTY=true",
		"RELEASE_REPO="+root, "RELEASE_COMMIT="+commit)
	return Release{Dir: dist, Version: version, Commit: commit, Took: time.Since(start)}, err
}

// Previous is the previous release: the pinned commit's tree (git archive), built by this
// tree's make release for linux on this machine's architecture. Without that commit in the checkout it returns ErrNoHistory, saying
// how to get it.
func Previous() (Release, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return Release{}, err
	}
	ref := PreviousCommit
	if v := os.Getenv("TURNSTILE_RELEASE_PREVIOUS"); v != "" {
		ref = v
	}
	commit, err := gitOut(root, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	if err != nil || commit == "" {
		shallow, _ := gitOut(root, "rev-parse", "--is-shallow-repository")
		how := "fetch it: git fetch origin " + ref
		if shallow == "true" {
			how = "this is a shallow clone: git fetch --unshallow"
		}
		return Release{}, fmt.Errorf("%w: %s is not in %s (%s)", ErrNoHistory, ref, root, how)
	}
	version := "v0.0.0-" + commit[:7]
	tool, err := toolKey(root)
	if err != nil {
		return Release{}, err
	}
	return cached(root, "previous-"+commit[:12]+"-"+tool, version, commit, func(dist string) error {
		src := dist + ".src"
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		defer os.RemoveAll(src)
		archive := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
		untar := exec.Command("tar", "-x", "-C", src)
		pipe, err := archive.StdoutPipe()
		if err != nil {
			return err
		}
		untar.Stdin = pipe
		// One buffer each: exec copies each command's stderr in a goroutine of its own.
		var stderr, untarErr bytes.Buffer
		archive.Stderr, untar.Stderr = &stderr, &untarErr
		if err := untar.Start(); err != nil {
			return err
		}
		if err := archive.Run(); err != nil {
			return fmt.Errorf("git archive %s: %w\n%s", commit, err, stderr.String())
		}
		if err := untar.Wait(); err != nil {
			return fmt.Errorf("untar git archive %s: %w\n%s", commit, err, untarErr.String())
		}
		// This machine's platform only: the upgrade runs the previous manager here, and the
		// other platforms' builds would cost minutes for nothing (the working tree's release is
		// built, and compared, for all of them).
		return makeRelease(root, root, "VERSION="+version, "DIST="+dist, "RELEASE_SOURCE="+src, "RELEASE_COMMIT="+commit,
			"RELEASE_PLATFORMS=linux/"+runtime.GOARCH)
	})
}

// cached returns the release under bin/release-test/key, building it with build(dist) first
// when it is not there. A file lock makes the packages that ask at once share one build;
// entries of the same kind with other keys are removed, so the cache holds the latest only.
func cached(root, key, version, commit string, build func(dist string) error) (Release, error) {
	cache := filepath.Join(root, "bin", "release-test")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return Release{}, err
	}
	lock, err := os.OpenFile(filepath.Join(cache, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return Release{}, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return Release{}, err
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	r := Release{Dir: filepath.Join(cache, key, "dist"), Version: version, Commit: commit}
	if _, err := os.Stat(filepath.Join(r.Dir, "SHA256SUMS")); err == nil {
		return r, nil
	}
	kind, _, _ := strings.Cut(key, "-")
	old, _ := filepath.Glob(filepath.Join(cache, kind+"-*"))
	for _, dir := range old {
		_ = os.RemoveAll(dir)
	}
	start := time.Now()
	if err := build(r.Dir); err != nil {
		_ = os.RemoveAll(filepath.Dir(r.Dir))
		return r, err
	}
	r.Took = time.Since(start)
	return r, nil
}

// makeRelease runs make release in dir with the given variables, with the helm binary the
// tests use; its output goes to the test's log on failure.
func makeRelease(root, dir string, vars ...string) error {
	args := append([]string{"-C", dir, "release", "HELM=" + helm(root)}, vars...)
	cmd := exec.Command("make", args...)
	// Not the jobserver or variables of a make that runs the tests.
	cmd.Env = withoutVars(os.Environ(), "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "GOFLAGS")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("make %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func withoutVars(env []string, names ...string) []string {
	var out []string
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		drop := false
		for _, n := range names {
			drop = drop || name == n
		}
		if !drop {
			out = append(out, e)
		}
	}
	return out
}

// helm is the helm binary the tests use (the Makefile's, or TURNSTILE_HELM).
func helm(root string) string {
	if h := os.Getenv("TURNSTILE_HELM"); h != "" {
		return h
	}
	return filepath.Join(root, "bin", "helm-v3.22.0")
}

func gitOut(dir string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	return strings.TrimSpace(string(out)), err
}

// sourceFiles are the working tree's files a build reads: tracked and untracked, not ignored
// (bin/ and dist/ are).
func sourceFiles(root string, paths ...string) ([]string, error) {
	out, err := exec.Command("git", append([]string{"-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--"}, paths...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	seen := map[string]bool{}
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" && !seen[f] {
			seen[f] = true
			files = append(files, f)
		}
	}
	sort.Strings(files)
	return files, nil
}

// hashFiles hashes the files' names, modes and contents; a tracked file deleted from the
// tree counts as missing.
func hashFiles(root string, files []string) (string, error) {
	h := sha256.New()
	for _, f := range files {
		fi, err := os.Lstat(filepath.Join(root, f))
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(h, "%s missing\n", f)
			continue
		}
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %o %d\n", f, fi.Mode(), fi.Size())
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(filepath.Join(root, f))
			if err != nil {
				return "", err
			}
			h.Write(data)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// treeKey names the working tree's state.
func treeKey(root string) (string, error) {
	files, err := sourceFiles(root)
	if err != nil {
		return "", err
	}
	return hashFiles(root, files)
}

// toolKey names the release tool's state: its files and the Makefile.
func toolKey(root string) (string, error) {
	files, err := sourceFiles(root, "hack/release", "Makefile")
	if err != nil {
		return "", err
	}
	return hashFiles(root, files)
}

// copyTree copies the working tree's files (not .git, not ignored ones) to dst, modes kept.
func copyTree(root, dst string) error {
	files, err := sourceFiles(root)
	if err != nil {
		return err
	}
	for _, f := range files {
		src := filepath.Join(root, f)
		fi, err := os.Lstat(src)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		target := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			link, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
			continue
		}
		if err := copyFile(src, target, fi.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// versionPattern is a SemVer 2.0 version with a leading v and without build metadata: a '+'
// cannot be in an image tag, and the chart's version is this without the v.
var versionPattern = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

func checkVersion(v string) error {
	if !versionPattern.MatchString(v) {
		return fmt.Errorf("--version %q: want vMAJOR.MINOR.PATCH or vMAJOR.MINOR.PATCH-PRERELEASE (e.g. v0.2.0, v0.2.0-rc.1)", v)
	}
	return nil
}

// meta is what the release records about its source.
type meta struct {
	version string
	commit  string    // full hash
	epoch   time.Time // SOURCE_DATE_EPOCH, else the commit's committer time
	goVer   string    // the toolchain that builds the binaries
	dirty   bool      // the source has uncommitted changes (only with --allow-dirty)
}

// chartVersion is the chart's SemVer: the release's without the v.
func (m meta) chartVersion() string { return strings.TrimPrefix(m.version, "v") }

func run(ctx context.Context, o options, log io.Writer) error {
	start := time.Now()
	m, err := readMeta(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "release %s of %s (%s), timestamps %s, %s\n", m.version, m.commit, o.source, m.epoch.Format(time.RFC3339), m.goVer)
	if err := prepareOut(o.out); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "turnstile-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	step := func(name string, f func() error) error {
		t := time.Now()
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Fprintf(log, "  %-28s %s\n", name, time.Since(t).Round(100*time.Millisecond))
		return nil
	}
	var bins binaries
	var img imageResult
	steps := []struct {
		name string
		f    func() error
	}{
		{"go build (8 binaries)", func() (err error) { bins, err = buildAll(ctx, o, m, filepath.Join(work, "build"), log); return err }},
		{"image", func() (err error) { img, err = writeImage(o, m, bins); return err }},
		{"chart", func() error { return writeChart(ctx, o, m, img.digest, work) }},
		{"install bundles", func() error { return writeBundles(o, img.digest, work) }},
		{"plugin archives, krew", func() error { return writePlugin(o, m, bins) }},
		{"SBOMs", func() error { return writeSBOMs(o, m, bins, img) }},
		{"release notes", func() error { return writeNotes(ctx, o, m, img.digest) }},
		{"SHA256SUMS", func() error { return writeSums(o.out) }},
	}
	for _, s := range steps {
		if err := step(s.name, s.f); err != nil {
			// No half release: out was empty or an earlier release when this began.
			_ = os.RemoveAll(o.out)
			return err
		}
	}
	fmt.Fprintf(log, "release %s written to %s in %s: image %s@%s\n", m.version, o.out, time.Since(start).Round(time.Second), o.image, img.digest)
	return nil
}

// readMeta reads the commit, its time and the toolchain; it refuses a dirty tree unless
// --allow-dirty.
func readMeta(ctx context.Context, o options) (meta, error) {
	m := meta{version: o.version}
	out, err := git(ctx, o.repo, "rev-parse", "--verify", o.commit+"^{commit}")
	if err != nil {
		return m, err
	}
	m.commit = out
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = git(ctx, o.repo, "log", "-1", "--format=%ct", m.commit); err != nil {
			return m, err
		}
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return m, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", epoch, err)
	}
	m.epoch = time.Unix(secs, 0).UTC()
	if m.goVer, err = command(ctx, o.source, nil, "go", "env", "GOVERSION"); err != nil {
		return m, err
	}
	// Only a source that is the top of a work tree has a status of its own: an exported tree
	// inside another checkout must not be judged by that checkout's changes.
	top, _ := git(ctx, o.source, "rev-parse", "--show-toplevel")
	abs, _ := filepath.Abs(o.source)
	if top == "" || filepath.Clean(top) != abs {
		return m, nil
	}
	if status, err := git(ctx, o.source, "status", "--porcelain", "--untracked-files=no"); err == nil && status != "" {
		if !o.allowDirty {
			return m, fmt.Errorf("%s has uncommitted changes; commit them, or pass --allow-dirty (RELEASE_ALLOW_DIRTY=true) for a test build:\n%s", o.source, status)
		}
		m.dirty = true
	}
	return m, nil
}

// prepareOut makes out an empty directory. An earlier release there (it has SHA256SUMS) is
// removed; any other non-empty directory is refused rather than emptied.
func prepareOut(out string) error {
	entries, err := os.ReadDir(out)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return os.MkdirAll(out, 0o755)
	case err != nil:
		return err
	case len(entries) == 0:
		return nil
	}
	if _, err := os.Stat(filepath.Join(out, sumsFile)); err != nil {
		return fmt.Errorf("%s is not empty and holds no earlier release (no %s): refusing to replace it", out, sumsFile)
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	return os.MkdirAll(out, 0o755)
}

// git runs git in dir and returns its trimmed stdout.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	return command(ctx, dir, nil, "git", args...)
}

// command runs name in dir with env added to this process's, and returns its trimmed stdout;
// its stderr goes into the error.
func command(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

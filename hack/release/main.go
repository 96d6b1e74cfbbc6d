// Command release builds a Turnstile release into a directory (make release VERSION=vX.Y.Z
// writes dist/) with nothing but Go and helm (itself built from the Go module proxy):
//
//   - image/: the manager's OCI image layout, an image index for linux/amd64 and linux/arm64,
//     non-root, on a base layer written here (no base image is pulled); image.digest is the
//     index's digest, which everything below pins;
//   - turnstile-X.Y.Z.tgz: the chart, its values' image.digest set to that digest;
//   - install.yaml: the install bundle (config/default built by kustomize, the image pinned by
//     digest) for kubectl apply --server-side on Kubernetes 1.36 and later, and
//     install-validating-only.yaml and install-mutating-v1beta1.yaml, the same of
//     config/overlays/* for 1.33 to 1.35;
//   - kubectl-turnstile_vX.Y.Z_OS_ARCH.tar.gz (.zip on Windows) for linux, darwin and windows
//     on amd64 and arm64, and turnstile.krew.yaml, the krew plugin manifest;
//   - turnstile-image.cdx.json and kubectl-turnstile.cdx.json: CycloneDX SBOMs, from the
//     binaries' own build info;
//   - RELEASE_NOTES.md from the git log since the last tag, and SHA256SUMS of every file.
//
// It is reproducible: the same source, commit and Go toolchain give the same bytes. Every
// timestamp is SOURCE_DATE_EPOCH (default: the commit's time), binaries are built with
// -trimpath and without VCS stamping, archive entries are sorted with fixed owners and modes,
// and gzip headers carry no time or name.
//
// The source tree may be another commit's (a `git worktree` or `git archive` of it), so that
// the release before this one can be built with this tool: test/release upgrades from it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
)

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, o, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// options are the release's inputs.
type options struct {
	version     string // v0.2.0
	source      string // the tree built
	repo        string // the git repository that commit is read from (default: source)
	commit      string // the commit the source is (default HEAD)
	out         string // where the release is written
	image       string // the image's repository, without tag or digest
	downloadURL string // where the plugin archives will be served ({version} is replaced)
	helm        string // the helm binary that packages the chart
	since       string // release notes start after this ref (default: the last tag)
	allowDirty  bool   // build a source tree with uncommitted changes
	jobs        int    // go builds at once
	// platforms restricts the release to some of its platforms (GOOS/GOARCH); empty: all.
	platforms []string
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.StringVar(&o.version, "version", "", "The release's version, vMAJOR.MINOR.PATCH[-PRERELEASE] (required).")
	fs.StringVar(&o.source, "source", ".", "The source tree to build: this checkout, or a worktree or archive of another commit.")
	fs.StringVar(&o.repo, "repo", "", "The git repository the commit's time, hash and log come from (default: --source).")
	fs.StringVar(&o.commit, "commit", "HEAD", "The commit the source tree is.")
	fs.StringVar(&o.out, "out", "dist", "Where to write the release: a new or empty directory, or an earlier release (replaced).")
	fs.StringVar(&o.image, "image", "ghcr.io/turnstile-dev/turnstile", "The image's repository, which the chart and the install bundle name.")
	fs.StringVar(&o.downloadURL, "download-url", "https://github.com/turnstile-dev/turnstile/releases/download/{version}",
		"Where the plugin's archives are published: the krew manifest's URIs ({version} is replaced).")
	fs.StringVar(&o.helm, "helm", "helm", "The helm binary that packages the chart (make helm builds it).")
	fs.StringVar(&o.since, "since", "", "Release notes list the commits after this ref (default: the last tag before the commit; all commits when there is none).")
	fs.BoolVar(&o.allowDirty, "allow-dirty", false, "Build even though the source tree has uncommitted changes (tests; never a real release).")
	fs.IntVar(&o.jobs, "jobs", min(2, runtime.NumCPU()), "How many go builds run at once.")
	platforms := fs.String("platforms", "", "Build only these of the release's platforms (e.g. linux/amd64), for a test that needs no more; default all. Never for a real release.")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := checkVersion(o.version); err != nil {
		return o, err
	}
	if o.repo == "" {
		o.repo = o.source
	}
	if *platforms != "" {
		o.platforms = strings.Split(*platforms, ",")
		if err := restrictPlatforms(o.platforms); err != nil {
			return o, err
		}
	}
	if strings.ContainsAny(o.image, "@") || strings.Count(o.image[strings.LastIndex(o.image, "/")+1:], ":") > 0 {
		return o, fmt.Errorf("--image %q: a repository, without tag or digest", o.image)
	}
	if o.jobs < 1 {
		o.jobs = 1
	}
	return o, nil
}

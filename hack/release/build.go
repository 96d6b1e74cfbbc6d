package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// platform is a GOOS/GOARCH pair.
type platform struct{ os, arch string }

func (p platform) String() string { return p.os + "/" + p.arch }

// exe is a binary's file name on the platform.
func (p platform) exe(name string) string {
	if p.os == "windows" {
		return name + ".exe"
	}
	return name
}

var (
	// imagePlatforms are the image index's platforms: the manager's.
	imagePlatforms = []platform{{"linux", "amd64"}, {"linux", "arm64"}}
	// pluginPlatforms are the plugin's archives: krew's platforms that kubectl ships for.
	pluginPlatforms = []platform{
		{"darwin", "amd64"}, {"darwin", "arm64"}, {"linux", "amd64"}, {"linux", "arm64"}, {"windows", "amd64"}, {"windows", "arm64"},
	}
)

// restrictPlatforms keeps only the named platforms (--platforms); at least one must be an
// image platform, so that there is an image.
func restrictPlatforms(names []string) error {
	keep := func(list []platform) []platform {
		var out []platform
		for _, p := range list {
			if slices.Contains(names, p.String()) {
				out = append(out, p)
			}
		}
		return out
	}
	image, plugin := keep(imagePlatforms), keep(pluginPlatforms)
	if len(image) == 0 || len(plugin) < len(names) {
		return fmt.Errorf("--platforms %v: name release platforms (%v), at least one of the image's %v", names, pluginPlatforms, imagePlatforms)
	}
	imagePlatforms, pluginPlatforms = image, plugin
	return nil
}

const (
	managerPkg = "./cmd/manager"
	pluginPkg  = "./cmd/kubectl-turnstile"
	// versionPkg receives the version and commit at link time (-X); a source tree without it
	// (a commit from before releases) builds all the same: the linker ignores an -X for a
	// symbol that does not exist.
	versionPkg = "github.com/turnstile-dev/turnstile/internal/version"
)

// binaries are the built binaries' paths by platform.
type binaries struct {
	manager map[platform]string
	plugin  map[platform]string
	// flags are the go build flags every binary was built with, for the SBOMs.
	flags []string
}

// buildFlags are the flags of every release binary:
//   - -trimpath and -buildvcs=false: nothing of the machine or the checkout (its path, whether
//     it is a git work tree) gets into the binary, so a `git archive` of the commit builds the
//     same bytes as its checkout; the version and commit come in by -X instead;
//   - -s -w: no symbol table or DWARF (stack traces keep their function names and lines);
//   - -tags timetzdata: the IANA zone database is embedded, so freeze windows' zones work on
//     Windows, which has none (the manager imports time/tzdata itself).
func buildFlags(m meta) []string {
	return []string{
		"-trimpath", "-buildvcs=false", "-tags=timetzdata",
		fmt.Sprintf("-ldflags=-s -w -X %s.version=%s -X %s.commit=%s", versionPkg, m.version, versionPkg, m.commit),
	}
}

// buildEnv is the environment of a release build: static (no cgo), the baseline instruction
// set of each architecture, and none of the caller's GOFLAGS or workspace.
func buildEnv(p platform) []string {
	return []string{
		"CGO_ENABLED=0", "GOOS=" + p.os, "GOARCH=" + p.arch, "GOAMD64=v1", "GOARM64=v8.0",
		"GOFLAGS=-mod=readonly", "GOWORK=off", "GOEXPERIMENT=",
	}
}

// buildAll builds the manager for the image's platforms and the plugin for the archives'.
// On linux both come from one go build per platform. Up to o.jobs builds run at once, so the
// single-threaded link of one overlaps the compiles of the next.
func buildAll(ctx context.Context, o options, m meta, dir string, log io.Writer) (binaries, error) {
	b := binaries{manager: map[platform]string{}, plugin: map[platform]string{}, flags: buildFlags(m)}
	type job struct {
		p    platform
		pkgs []string
	}
	var jobs []job
	for _, p := range pluginPlatforms {
		pkgs := []string{pluginPkg}
		for _, ip := range imagePlatforms {
			if ip == p {
				pkgs = append(pkgs, managerPkg)
			}
		}
		jobs = append(jobs, job{p, pkgs})
	}
	// The longest builds first: those with the manager.
	sort.SliceStable(jobs, func(i, j int) bool { return len(jobs[i].pkgs) > len(jobs[j].pkgs) })

	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, o.jobs)
	)
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out := filepath.Join(dir, j.p.os+"_"+j.p.arch)
			start := time.Now()
			err := goBuild(ctx, o.source, j.p, b.flags, out, j.pkgs)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			fmt.Fprintf(log, "    built %s for %s in %s\n", strings.Join(j.pkgs, " "), j.p, time.Since(start).Round(100*time.Millisecond))
			b.plugin[j.p] = filepath.Join(out, j.p.exe("kubectl-turnstile"))
			if len(j.pkgs) > 1 {
				b.manager[j.p] = filepath.Join(out, "manager")
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return b, errs[0]
	}
	return b, nil
}

// goBuild runs go build for one platform into out/.
func goBuild(ctx context.Context, source string, p platform, flags []string, out string, pkgs []string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	args := append(append([]string{"build"}, flags...), "-o", out+string(filepath.Separator))
	args = append(args, pkgs...)
	_, err := command(ctx, source, buildEnv(p), "go", args...)
	return err
}

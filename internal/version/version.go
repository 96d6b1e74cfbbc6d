// Package version is the release a binary was built from. make release (hack/release) sets it
// at link time:
//
//	-X github.com/turnstile-dev/turnstile/internal/version.version=v0.2.0
//	-X github.com/turnstile-dev/turnstile/internal/version.commit=<full commit hash>
//
// A binary built otherwise (go build, make build) reports "(devel)" and whatever the Go
// toolchain stamped into it (the commit, with -buildvcs).
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by the linker (-X); empty in a development build.
var (
	version string
	commit  string
)

// Info is what a binary says about its build.
type Info struct {
	// Version is the release (v0.2.0), or "(devel)".
	Version string `json:"version"`
	// Commit is the source commit, or "" when unknown.
	Commit string `json:"commit,omitempty"`
	// GoVersion is the toolchain that built the binary (go1.26.8).
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns the build's Info: the linker's values first, then the build info the Go
// toolchain embeds.
func Get() Info {
	i := Info{Version: version, Commit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if i.Version == "" && bi.Main.Version != "" {
			i.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && i.Commit == "" {
				i.Commit = s.Value
			}
		}
	}
	if i.Version == "" {
		i.Version = "(devel)"
	}
	return i
}

// String is one line: "v0.2.0 (commit 0123abc, go1.26.8, linux/amd64)".
func (i Info) String() string {
	c := i.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	if c == "" {
		c = "unknown"
	}
	return fmt.Sprintf("%s (commit %s, %s, %s)", i.Version, c, i.GoVersion, i.Platform)
}

// CompatibilityLevel is the level of this release's state in a cluster. Every object the chart
// and the install bundle ship carries it in the label locks.turnstile.dev/compatibility-level,
// and config/compatibility's policy refuses an update that lowers it: a downgrade to a release
// of a lower level is refused. It rises only when a manager of the level before could not keep
// this release's state safely (docs/install.md, "Downgrades"):
//
//	1  every release before the label
//	2  workload requests stamped with their workload (issue #41): a level-1 manager deletes them
//	   as leftovers while their Jobs run
const CompatibilityLevel = 2

package workdir

import (
	"cmp"
	"errors"
	"fmt"
	"path"
	"strings"
)

// Key identifies one working dir: a directory of a pull request's checkout, in one Terraform
// workspace. It matches Atlantis's working-dir lock key, including the path that Atlantis added
// in PR #5790 so that two projects of one pull request in different directories run in parallel.
//
// Where a Key names a scope (InUse, Remove, RemoveAll) rather than one guard, an empty
// Workspace means every workspace and an empty Path means every path of the pull request.
type Key struct {
	// Repo is the repository's full name, e.g. "acme/infra".
	Repo string
	// Pull is the pull request number. Zero is allowed for runs that belong to no pull request.
	Pull int64
	// Workspace is the Terraform workspace, e.g. "default".
	Workspace string
	// Path is the project directory relative to the repository root; "." is the root.
	Path string
}

// String renders the key as "acme/infra#12/default/modules/vpc": "#" rather than Atlantis's "/"
// before the pull number, so the repository's own slash is not mistaken for a separator.
// Scopes render their wildcards as "*" and drop a trailing all-paths wildcard.
func (k Key) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s#%d", k.Repo, k.Pull)
	switch {
	case k.Workspace == "" && k.Path == "":
	case k.Workspace == "":
		b.WriteString("/*/" + k.Path)
	case k.Path == "":
		b.WriteString("/" + k.Workspace)
	default:
		b.WriteString("/" + k.Workspace + "/" + k.Path)
	}
	return b.String()
}

// compareKeys orders keys by repo, pull, workspace, then path, so snapshots are stable.
func compareKeys(a, b Key) int {
	return cmp.Or(
		strings.Compare(a.Repo, b.Repo),
		cmp.Compare(a.Pull, b.Pull),
		strings.Compare(a.Workspace, b.Workspace),
		strings.Compare(a.Path, b.Path),
	)
}

type pullKey struct {
	repo string
	pull int64
}

func (k Key) pullKey() pullKey { return pullKey{repo: k.Repo, pull: k.Pull} }

// guardKey validates a key that names exactly one working dir and cleans its path, so that
// "modules/vpc", "./modules/vpc" and "modules/vpc/" — one directory on disk — are one guard.
func (k Key) guardKey() (Key, error) {
	if k.Workspace == "" {
		return Key{}, errors.New("workspace is required")
	}
	if k.Path == "" {
		return Key{}, errors.New(`path is required ("." for the repository root)`)
	}
	return k.scope()
}

// scope validates a key used as a scope, where workspace and path may be wildcards.
func (k Key) scope() (Key, error) {
	if k.Repo == "" {
		return Key{}, errors.New("repo is required")
	}
	if k.Pull < 0 {
		return Key{}, fmt.Errorf("pull must not be negative, got %d", k.Pull)
	}
	if k.Path != "" {
		p := path.Clean(k.Path)
		// Overlap checks compare paths as prefixes of each other, which is only sound for
		// clean paths inside the repository.
		if path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
			return Key{}, fmt.Errorf("path %q must be relative to the repository root and stay inside it", k.Path)
		}
		k.Path = p
	}
	return k, nil
}

// overlaps reports whether two keys or scopes can name the same directory on disk. Deleting
// modules/ removes modules/vpc, and deleting modules/vpc pulls files out from under a command
// running in modules/, so containment in either direction counts.
func (k Key) overlaps(o Key) bool {
	if k.Repo != o.Repo || k.Pull != o.Pull {
		return false
	}
	if k.Workspace != "" && o.Workspace != "" && k.Workspace != o.Workspace {
		return false
	}
	return pathsOverlap(k.Path, o.Path)
}

func pathsOverlap(a, b string) bool {
	switch {
	case a == "" || b == "" || a == "." || b == "." || a == b:
		return true
	default:
		return strings.HasPrefix(b, a+"/") || strings.HasPrefix(a, b+"/")
	}
}

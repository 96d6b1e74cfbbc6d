// Package lockkey is the lock key in each of its forms: the key people write
// (REPO:PATH[:WORKSPACE[:PROJECT]] on the command line and in a workload's annotation: Parse),
// the readable key people see ("acme/infra/modules/vpc/default"), the canonical order multi-lock
// requests acquire in, and the DNS-safe ProjectLock name that serializes the key.
//
// The written form is read here, not in api/v1alpha1: the API has no such syntax (its targets
// are structured fields), and what clients import from the API stays types and constants. Parse
// mirrors the CRDs' rules for each field in Go; FuzzKey holds it to the CRDs and to the
// admission policy that checks the annotation, read from config/ and judged by the API server's
// own code.
package lockkey

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"slices"
	"strings"
	"sync"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// DefaultWorkspace is the workspace of a target that names none.
const DefaultWorkspace = "default"

// maxNameLen keeps ProjectLock names usable as label values too.
const maxNameLen = 63

// hashLen is the number of hex characters of the key hash in a ProjectLock name.
const hashLen = 10

// Normalize fills the defaults the API server would (path "." and workspace "default") and
// cleans the path lexically ("./a/./b/" is "a/b", "" and "./" are the root "."), so one
// directory always has one key. The API admits only clean paths, so for a stored target this
// changes nothing; a target built from user input (a CLI flag, a runner's config) gets the key
// the API would store for it.
//
// The key has no mode and no bound on its holders: Normalize clears spec.locks[].mode and
// maxHolders (Refs keeps them in Ref.Mode and Ref.MaxHolders), so a ProjectLock created from a
// normalized target has neither, and every mode and bound of one key share a name.
func Normalize(t locksv1.LockTarget) locksv1.LockTarget {
	t.Mode = ""
	t.MaxHolders = 0
	t.Path = path.Clean(t.Path) // "" is "."
	if t.Workspace == "" {
		t.Workspace = DefaultWorkspace
	}
	return t
}

// String is the readable key: repo/path/workspace, plus /project when set.
func String(t locksv1.LockTarget) string {
	return key(Normalize(t))
}

// key is String of a target already normalized.
func key(t locksv1.LockTarget) string {
	if t.Project != "" {
		return t.Repo + "/" + t.Path + "/" + t.Workspace + "/" + t.Project
	}
	return t.Repo + "/" + t.Path + "/" + t.Workspace
}

// canonical is an unambiguous encoding: the readable key can collide (a path may contain what
// looks like a workspace), this cannot, because no field may contain a NUL.
func canonical(t locksv1.LockTarget) string {
	t = Normalize(t)
	return t.Repo + "\x00" + t.Path + "\x00" + t.Workspace + "\x00" + t.Project
}

// Less orders targets canonically. Every request acquires its locks in this order, so two
// multi-lock requests can never each hold what the other waits for.
func Less(a, b locksv1.LockTarget) bool {
	return canonical(a) < canonical(b)
}

// Name is the ProjectLock name for a target: the readable key lower-cased with every run of
// characters a name cannot hold turned into '-', cut to fit, then a hash of the exact key so that
// keys differing only in case or punctuation never share a lock.
func Name(t locksv1.LockTarget) string {
	if n, ok := names.get(t); ok {
		return n
	}
	n := name(t)
	names.put(t, n)
	return n
}

// names remembers recent names: every reconcile of a deep queue names every waiter's targets,
// and hashing them dominated the decision. Bounded; forgotten wholesale when full.
var names = &nameCache{m: map[locksv1.LockTarget]string{}}

const nameCacheSize = 1 << 14

type nameCache struct {
	mu sync.RWMutex
	m  map[locksv1.LockTarget]string
}

func (c *nameCache) get(t locksv1.LockTarget) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n, ok := c.m[t]
	return n, ok
}

func (c *nameCache) put(t locksv1.LockTarget, n string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= nameCacheSize {
		clear(c.m)
	}
	c.m[t] = n
}

func name(t locksv1.LockTarget) string {
	sum := sha256.Sum256([]byte(canonical(t)))
	hash := hex.EncodeToString(sum[:])[:hashLen]

	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(String(t)) {
		ok := (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9')
		switch {
		case ok:
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
	}
	readable := strings.Trim(b.String(), "-")
	if limit := maxNameLen - hashLen - 1; len(readable) > limit {
		readable = strings.TrimRight(readable[:limit], "-")
	}
	if readable == "" {
		return hash
	}
	return readable + "-" + hash
}

// Ref is one target of a request with its key and ProjectLock name.
type Ref struct {
	// Index is the target's position in spec.locks.
	Index  int
	Target locksv1.LockTarget
	Key    string
	Name   string
	// Mode is how the request holds the target (spec.locks[].mode; unset is Exclusive).
	Mode locksv1.LockMode
	// MaxHolders is the most requests the request holds the target beside, itself included
	// (spec.locks[].maxHolders, a counting lock); 0 when unbounded.
	MaxHolders int32
}

// Shared reports whether the request holds this target in Shared mode.
func (r Ref) Shared() bool { return r.Mode.IsShared() }

// Refs returns the request's targets in canonical acquisition order. Every decision of a key
// asks it of every request in the key's queue, so the usual single target takes no sort.
func Refs(targets []locksv1.LockTarget) []Ref {
	refs := make([]Ref, len(targets))
	for i, t := range targets {
		mode, maxHolders := t.Mode, t.MaxHolders
		t = Normalize(t)
		refs[i] = Ref{Index: i, Target: t, Key: key(t), Name: Name(t), Mode: mode, MaxHolders: maxHolders}
	}
	if len(refs) < 2 {
		return refs
	}
	order := make([]string, len(refs)) // canonical keys, by Index
	for i := range refs {
		order[i] = canonical(refs[i].Target)
	}
	slices.SortStableFunc(refs, func(a, b Ref) int { return strings.Compare(order[a.Index], order[b.Index]) })
	return refs
}

// Names returns the ProjectLock names of targets, in spec order.
func Names(targets []locksv1.LockTarget) []string {
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = Name(t)
	}
	return names
}

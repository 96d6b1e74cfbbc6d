package lockkey

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// Syntax is how a person writes a lock key: on the command line (kubectl turnstile acquire and
// run --lock) and in a workload's annotation locks.turnstile.dev/lock.
const Syntax = "REPO:PATH[:WORKSPACE[:PROJECT]]"

// syntaxExample completes a refusal of the syntax.
const syntaxExample = "e.g. acme/infra:modules/vpc:default"

// Parse reads one key written as Syntax into the target it names: the workspace is "default"
// when it is left out or empty, and an empty project is none. It accepts exactly what the API
// server admits as a LockRequest's spec.locks[] (the CRD's schema and CEL rules, which
// validate mirrors) and what the admission policy turnstile-workload-annotations admits as one
// key of the annotation; FuzzKey holds the three together.
//
// Its refusal starts with the key, quoted, and says what is wrong in the CRD's words:
// `"acme-infra": want REPO:PATH[:WORKSPACE[:PROJECT]], e.g. acme/infra:modules/vpc:default`; a
// caller says where the key came from in front of it (`--lock "acme-infra": ...`).
func Parse(s string) (locksv1.LockTarget, error) {
	t, err := split(s)
	// guard:lockkey-parse-validates
	if err == nil {
		err = validate(t)
	}
	if err != nil {
		return locksv1.LockTarget{}, fmt.Errorf("%q: %w", s, err)
	}
	return t, nil
}

// ParseList reads the keys of a workload's annotation locks.turnstile.dev/lock: Syntax, several
// separated by commas, spaces, tabs or newlines (as the admission policy splits them). It
// refuses a value that names no key.
func ParseList(v string) ([]locksv1.LockTarget, error) {
	var out []locksv1.LockTarget
	for _, k := range SplitList(v) {
		t, err := Parse(k)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("names no lock: want %s, several separated by commas, e.g. acme/infra:modules/vpc", Syntax)
	}
	return out, nil
}

// SplitList splits a list of keys at commas, spaces, tabs and newlines, dropping empty ones.
func SplitList(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
}

// split reads the parts of s: REPO and PATH are required, WORKSPACE defaults to "default".
func split(s string) (locksv1.LockTarget, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 4 || parts[0] == "" || parts[1] == "" {
		return locksv1.LockTarget{}, errors.New("want " + Syntax + ", " + syntaxExample)
	}
	t := locksv1.LockTarget{Repo: parts[0], Path: parts[1], Workspace: DefaultWorkspace}
	if len(parts) > 2 && parts[2] != "" {
		t.Workspace = parts[2]
	}
	if len(parts) > 3 {
		t.Project = parts[3]
	}
	return t, nil
}

// The patterns of api/v1alpha1.LockTarget's CEL rules (its +kubebuilder markers), as Go's regexp
// reads them: the same RE2 syntax CEL's matches() takes.
var (
	repoPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)+$`)
	dotSegments = regexp.MustCompile(`(^|/)\.\.?(/|$)`)
	pathPattern = regexp.MustCompile(`^[A-Za-z0-9_.@+=,~-]+(/[A-Za-z0-9_.@+=,~-]+)*$`)
	namePattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
)

// validate says what the API server would refuse in t, a target of no mode, in the words of
// the CRD's messages: its schema's lengths (counted in characters, as OpenAPI counts them) and
// its CEL rules, in the order a person would fix them.
func validate(t locksv1.LockTarget) error {
	switch n := utf8.RuneCountInString(t.Repo); {
	case !repoPattern.MatchString(t.Repo):
		return errors.New("repo must be owner/name (letters, digits, '_', '.', '-'), e.g. acme/infra")
	case dotSegments.MatchString(t.Repo):
		return errors.New("repo must not contain '.' or '..' segments; name the repository itself, e.g. acme/infra")
	case n < 3 || n > 200:
		return fmt.Errorf("repo must be 3 to 200 characters, not %d", n)
	}
	switch n := utf8.RuneCountInString(t.Path); {
	case strings.HasPrefix(t.Path, "/"):
		return errors.New("path must be relative to the repository root (no leading '/'), e.g. modules/vpc")
	case t.Path != "." && dotSegments.MatchString(t.Path):
		return errors.New("path must not contain '.' or '..' segments; use the directory's plain relative path, or '.' for the root")
	case t.Path != "." && !pathPattern.MatchString(t.Path):
		return errors.New("path must be slash-separated directory names without empty segments or a trailing '/'")
	case n < 1 || n > 253:
		return fmt.Errorf("path must be 1 to 253 characters, not %d", n)
	}
	switch n := utf8.RuneCountInString(t.Workspace); {
	case !namePattern.MatchString(t.Workspace):
		return errors.New("workspace must be letters, digits, '_', '.', '-' and start with a letter, digit or '_'")
	case n > 63:
		return fmt.Errorf("workspace must be at most 63 characters, not %d", n)
	}
	if t.Project == "" {
		return nil
	}
	switch n := utf8.RuneCountInString(t.Project); {
	case !namePattern.MatchString(t.Project):
		return errors.New("project must be letters, digits, '_', '.', '-' and start with a letter, digit or '_'")
	case n > 63:
		return fmt.Errorf("project must be at most 63 characters, not %d", n)
	}
	return nil
}

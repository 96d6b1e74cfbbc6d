package client

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// Labels every LockRequest the client creates carries, so a pull request's requests can be
// selected by the API server:
//
//	kubectl delete lr -l locks.turnstile.dev/repo=acme.infra,locks.turnstile.dev/pull=100
//
// They say what the spec says, made label-safe by LabelValue; the ValidatingAdmissionPolicy in
// config/labels rejects a request whose labels say otherwise.
const (
	// LabelRepo is the repository of every lock of the request, "/" written as "." (set only
	// when all its locks name one repository).
	LabelRepo = "locks.turnstile.dev/repo"
	// LabelPull is spec.holder.pull in decimal (set only when the pull is not 0).
	LabelPull = "locks.turnstile.dev/pull"
	// LabelOwner is spec.holder.owner, label-safe.
	LabelOwner = "locks.turnstile.dev/owner"
)

// labelMax is the longest label value Kubernetes accepts.
const labelMax = 63

// hashLen is the length of the hash suffix of a value that was shortened or rewritten; the
// readable part before it keeps labelMax-hashLen-1 characters at most.
const hashLen = 10

var plainLabel = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// LabelValue makes s a valid label value that still reads as s. A value that already is one, of
// at most 63 characters, is kept as it is. Otherwise every character a label may not hold
// becomes ".", the ends are trimmed to a letter or digit, the readable part is cut to 52
// characters, and "-" plus the first 10 hex digits of sha256(s) are appended, so two values that
// read alike still get different labels. An empty s gives "".
func LabelValue(s string) string {
	if s == "" || (len(s) <= labelMax && plainLabel.MatchString(s)) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r < 128 && (r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		} else {
			b.WriteByte('.')
		}
	}
	readable := b.String()
	if len(readable) > labelMax-hashLen-1 {
		readable = readable[:labelMax-hashLen-1]
	}
	readable = strings.TrimFunc(readable, func(r rune) bool { return !isAlnum(r) })
	sum := sha256.Sum256([]byte(s))
	suffix := hex.EncodeToString(sum[:])[:hashLen]
	if readable == "" {
		return suffix
	}
	return readable + "-" + suffix
}

// RepoLabelValue is the LabelRepo value of a repository: "/" written as ".", then LabelValue.
func RepoLabelValue(repo string) string {
	return LabelValue(strings.ReplaceAll(repo, "/", "."))
}

func isAlnum(r rune) bool {
	return r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
}

// LabelsFor are the labels of a request with this spec: repo (when every lock names one
// repository), pull (when set) and owner.
func LabelsFor(spec *locksv1.LockRequestSpec) map[string]string {
	l := map[string]string{}
	if o := LabelValue(spec.Holder.Owner); o != "" {
		l[LabelOwner] = o
	}
	if spec.Holder.Pull != 0 {
		l[LabelPull] = strconv.FormatInt(spec.Holder.Pull, 10)
	}
	if len(spec.Locks) > 0 {
		repo := spec.Locks[0].Repo
		for _, t := range spec.Locks[1:] {
			if t.Repo != repo {
				repo = ""
				break
			}
		}
		if repo != "" {
			l[LabelRepo] = RepoLabelValue(repo)
		}
	}
	return l
}

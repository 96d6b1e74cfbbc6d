package workload

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Limits of the fields a workload's name is written into.
const (
	maxName    = 253 // a LockRequest's name (a DNS subdomain) and spec.holder.session
	maxReason  = 256 // spec.reason
	hashDigits = 10
)

// RequestNames are the two names the manager may give the LockRequest of the workload of kind
// ("pod", "job") and name, first the one it tries first: "pod-NAME", and "pod-NAME-" with a
// hash of the kind and name, which a request of someone else's that happens to be called
// pod-NAME leaves free. Both depend on the kind and name alone, so every request the manager
// made for a workload of that name, whichever object of that name it was made for, is at one of
// them (an earlier Job of the same name whose Pods still run: docs/gated-workloads.md). Both
// are valid names whatever the workload's name: one too long keeps its start and a hash.
func RequestNames(kind, name string) [2]string {
	base := kind + "-" + name
	return [2]string{fit(base, maxName), fit(base+"-"+digest("second/"+kind+"/"+name), maxName)}
}

// RequestName is the name the manager tries first for the request of kind and name.
func RequestName(kind, name string) string { return RequestNames(kind, name)[0] }

// workloadOfName is the name of the workload of kind whose request may be named n (either of
// RequestNames), as far as n says: "" when it says nothing. A LockRequest's event wakes that
// workload: a request of someone else's that took one of the workload's names may be gone.
func workloadOfName(kind, n string) []string {
	rest, ok := strings.CutPrefix(n, kind+"-")
	if !ok || rest == "" {
		return nil
	}
	out := []string{rest}
	if i := len(rest) - hashDigits - 1; i > 0 && rest[i] == '-' {
		if base := rest[:i]; RequestNames(kind, base)[1] == n {
			out = append(out, base)
		}
	}
	return out
}

// session is spec.holder.session of the request of kind and name, "pod/NAME": one holder per
// workload name, fitted to the field's limit.
func session(kind, name string) string { return fit(kind+"/"+name, maxName) }

// fit is s if it is at most limit bytes long, else its start (without a trailing '-' or '.',
// so that a DNS name stays one) and "-" with a hash of the whole of s.
func fit(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	head := strings.TrimRight(s[:limit-hashDigits-1], "-.")
	return head + "-" + digest(s)
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:hashDigits]
}

// labelValue is name as a label value (at most 63 characters): names longer than that are
// found by the request's name instead, so the label only has to be recognisable.
func labelValue(name string) string {
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:50] + "-" + hex.EncodeToString(sum[:])[:12]
}

package workdir

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

const (
	// LabelRole marks Turnstile's Leases by what they are for; with RoleWorkdirGuard it selects
	// every replica's heartbeat (kubectl get leases -l locks.turnstile.dev/role=workdir-guard).
	LabelRole = "locks.turnstile.dev/role"
	// RoleWorkdirGuard is LabelRole's value on heartbeat Leases.
	RoleWorkdirGuard = "workdir-guard"
	// AnnotationGuards holds the replica's guards as of its last renewal: a JSON list of
	// {"key", "holder", "since"} in key order.
	AnnotationGuards = "locks.turnstile.dev/guards"
	// AnnotationGuardsTruncated is, when present, how many guards AnnotationGuards leaves out.
	AnnotationGuardsTruncated = "locks.turnstile.dev/guards-truncated"

	// maxGuardEntries and maxGuardBytes bound the annotation: the Lease is rewritten every few
	// seconds by every replica, and all of an object's annotations must fit in 256 KiB, so a
	// runner with thousands of guards must not turn its heartbeat into a large write.
	maxGuardEntries = 100
	maxGuardBytes   = 16 << 10
)

// guardEntry is one element of AnnotationGuards.
type guardEntry struct {
	Key    string `json:"key"`
	Holder string `json:"holder"`
	Since  string `json:"since"`
}

// encodeGuards renders held (in key order) as AnnotationGuards' value, keeping a prefix of at
// most maxGuardEntries entries and maxGuardBytes bytes, and returns how many it left out.
func encodeGuards(held []Held) (value string, truncated int) {
	var b strings.Builder
	b.WriteByte('[')
	n := 0
	for _, h := range held {
		if n == maxGuardEntries {
			break
		}
		e, err := json.Marshal(guardEntry{Key: h.Key.String(), Holder: h.Holder, Since: h.Since.UTC().Format(time.RFC3339)})
		if err != nil {
			// Strings and a formatted time always marshal; stop rather than write a broken list.
			break
		}
		sep := 0
		if n > 0 {
			sep = 1
		}
		if b.Len()+sep+len(e)+len("]") > maxGuardBytes {
			break
		}
		if sep == 1 {
			b.WriteByte(',')
		}
		b.Write(e)
		n++
	}
	b.WriteByte(']')
	return b.String(), len(held) - n
}

// setGuardAnnotations writes the annotations for held into annotations (which must be non-nil).
func setGuardAnnotations(annotations map[string]string, held []Held) {
	value, truncated := encodeGuards(held)
	annotations[AnnotationGuards] = value
	if truncated > 0 {
		annotations[AnnotationGuardsTruncated] = strconv.Itoa(truncated)
	} else {
		delete(annotations, AnnotationGuardsTruncated)
	}
}

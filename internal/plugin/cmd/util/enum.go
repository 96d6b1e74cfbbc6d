package util

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// enumValue is a string flag with a fixed set of values, accepted in any case and stored as
// written in the set: --priority high is High. A refusal lists the valid values.
type enumValue struct {
	target *string
	valid  []string
}

// NewEnum is a flag value that sets target to one of valid, in any case.
func NewEnum(target *string, valid ...string) pflag.Value { return &enumValue{target, valid} }

func (e *enumValue) String() string {
	if e.target == nil {
		return ""
	}
	return *e.target
}

func (e *enumValue) Set(s string) error {
	for _, v := range e.valid {
		if strings.EqualFold(s, v) {
			*e.target = v
			return nil
		}
	}
	msg := "valid values are " + strings.Join(e.valid, ", ") + " (any case)"
	if near := Closest(s, e.valid); near != "" {
		msg = "did you mean " + near + "? " + msg
	}
	return fmt.Errorf("%s", msg)
}

func (e *enumValue) Type() string { return "string" }

// Closest is the value of valid nearest to s (by edit distance, any case) when it is near
// enough to be a slip of the keyboard: at most 2 edits, and at most half of the longer. "" otherwise.
func Closest(s string, valid []string) string {
	best, bestD := "", 3
	for _, v := range valid {
		d := editDistance(strings.ToLower(s), strings.ToLower(v))
		if d < bestD && d*2 <= max(len(s), len(v)) {
			best, bestD = v, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

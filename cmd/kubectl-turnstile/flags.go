package main

import (
	"fmt"
	"slices"
	"strings"
)

// enumValue is a string flag with a fixed set of values, accepted in any case and stored as
// written in the set: --priority high is High. A refusal lists the valid values.
type enumValue struct {
	target *string
	valid  []string
}

func newEnum(target *string, valid ...string) *enumValue { return &enumValue{target, valid} }

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
	if near := closest(s, e.valid); near != "" {
		msg = "did you mean " + near + "? " + msg
	}
	return fmt.Errorf("%s", msg)
}

func (e *enumValue) Type() string { return "string" }

// knownCommands are the command names Turnstile's users lock for: Atlantis' commands (its
// COMMAND_NAME, with "_" as "-", as --from atlantis writes it), and "all", the CommandLock that freezes every command.
var knownCommands = []string{"all", "apply", "approve-policies", "import", "plan", "policy-check", "state", "unlock", "version"}

// closest is the value of valid nearest to s (by edit distance, any case) when it is near
// enough to be a slip of the keyboard: at most 2 edits, and at most half of the longer. "" otherwise.
func closest(s string, valid []string) string {
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

// unknownCommand is freeze's refusal of a name that is neither a known command nor an existing
// CommandLock: a typo would freeze nothing anyone uses.
func unknownCommand(name string, existing []string) error {
	candidates := slices.Concat(knownCommands, existing)
	hint := ""
	if near := closest(name, candidates); near != "" {
		hint = " did you mean " + near + "?"
	}
	return fmt.Errorf("freeze %q: no such command:%s Known commands are %s; existing CommandLocks: %s. "+
		"To freeze a command of your own by this name, add --new-command",
		name, hint, strings.Join(knownCommands, ", "), orNone(existing))
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

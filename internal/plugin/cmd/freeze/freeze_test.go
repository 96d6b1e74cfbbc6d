package freeze

import (
	"strings"
	"testing"
)

func TestUnknownCommandSuggests(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing []string
		want     string
	}{
		{"aply", nil, "did you mean apply?"},
		{"pln", nil, "did you mean plan?"},
		{"Apply", nil, "did you mean apply?"},
		{"deploi", []string{"deploy"}, "did you mean deploy?"},
		{"xyzzy", nil, "no such command: Known commands"},
	} {
		err := unknownCommand(tc.name, tc.existing)
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--new-command") {
			t.Errorf("%s: %q; want it to say %q and --new-command", tc.name, err, tc.want)
		}
	}
	if err := unknownCommand("xyzzy", nil); strings.Contains(err.Error(), "did you mean") {
		t.Errorf("xyzzy: %q suggests a command that is nothing like it", err)
	}
}

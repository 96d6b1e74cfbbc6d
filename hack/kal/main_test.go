package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// lint runs the driver on testdata/api with the given configuration and returns its findings
// (the printed lines) and error.
func lint(t *testing.T, config string) ([]string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = out
	n, runErr := run(path, "testdata", []string{"./api/..."})
	os.Stdout = stdout
	raw, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if l != "" {
			// Keep the file name and line, and the linter: enough to say what was found where.
			file, rest, _ := strings.Cut(l, ":")
			line, _, _ := strings.Cut(rest, ":")
			lines = append(lines, filepath.Base(file)+":"+line+" "+l[strings.LastIndex(l, "("):])
		}
	}
	if runErr == nil && n != len(lines) {
		t.Fatalf("run counted %d findings and printed %d", n, len(lines))
	}
	return lines, runErr
}

const enableTwo = `
settings:
  linters:
    disable: ["*"]
    enable: [nobools, nofloats]
`

func TestRunReportsEnabledLintersOnly(t *testing.T) {
	got, err := lint(t, enableTwo)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"types.go:8 (nobools)", "types.go:12 (nofloats)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

func TestRunExclusions(t *testing.T) {
	got, err := lint(t, enableTwo+`
exclusions:
  - linter: nofloats
    text: "Widget\\.Ratio"
    reason: shipped
`)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"types.go:8 (nobools)"}, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}

	// An exclusion that matches nothing is stale: the run fails and says so.
	_, err = lint(t, enableTwo+`
exclusions:
  - linter: nofloats
    text: "Widget\\.Gone"
    reason: shipped
`)
	if err == nil || !strings.Contains(err.Error(), "matches nothing") {
		t.Errorf("a stale exclusion: err = %v, want one that says it matches nothing", err)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	for name, config := range map[string]string{
		"unknown linter":           "settings:\n  linters:\n    enable: [nosuchlinter]\n",
		"unknown top-level field":  "setting:\n  linters: {}\n",
		"exclusion without reason": enableTwo + "exclusions:\n  - linter: nobools\n    text: x\n",
		"nothing enabled":          "settings:\n  linters:\n    disable: [\"*\"]\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := lint(t, config)
			if err == nil {
				t.Fatalf("config %q: no error", config)
			}
			t.Log(err)
		})
	}
}

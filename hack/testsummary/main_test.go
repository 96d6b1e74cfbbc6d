package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGinkgoCounts(t *testing.T) {
	cases := map[string]struct {
		line                string
		passed, failed, skp int
		ok                  bool
	}{
		"plain": {line: "SUCCESS! -- 12 Passed | 0 Failed | 0 Pending | 1 Skipped", passed: 12, skp: 1, ok: true},
		// As Ginkgo writes it under go test: every word in its own color.
		"colored": {
			line:   "\x1b[38;5;9m\x1b[1mFAIL!\x1b[0m -- \x1b[38;5;10m\x1b[1m50 Passed\x1b[0m | \x1b[38;5;9m\x1b[1m2 Failed\x1b[0m | \x1b[38;5;11m\x1b[1m0 Pending\x1b[0m | \x1b[38;5;14m\x1b[1m3 Skipped\x1b[0m\n",
			passed: 50, failed: 2, skp: 3, ok: true,
		},
		"another line": {line: "Ran 5 of 5 Specs in 9.072 seconds"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p, f, s, ok := ginkgoCounts(tc.line)
			if p != tc.passed || f != tc.failed || s != tc.skp || ok != tc.ok {
				t.Errorf("ginkgoCounts = %d, %d, %d, %t; want %d, %d, %d, %t", p, f, s, ok, tc.passed, tc.failed, tc.skp, tc.ok)
			}
		})
	}
}

func TestFailedSpec(t *testing.T) {
	cases := map[string]struct {
		line, want string
		ok         bool
	}{
		// As Ginkgo's closing summary writes it: indented, the heading in its color.
		"failed": {
			line: "  \x1b[38;5;9m[FAIL]\x1b[0m \x1b[0mThe scheduler \x1b[38;5;243mwhen a holder goes \x1b[38;5;9m\x1b[1m[It] grants the next\x1b[0m\n",
			want: "[FAIL] The scheduler when a holder goes [It] grants the next", ok: true,
		},
		"a shard's": {
			line: "[shard 2/2]   [FAIL] Grant engine [It] orders the queue by priority\n",
			want: "[shard 2/2] [FAIL] Grant engine [It] orders the queue by priority", ok: true,
		},
		"a shard's progress": {line: "[shard 2/2]   [FAILED] Timed out after 10.019s."},
		"timed out":          {line: "  [TIMEDOUT] A [It] b", want: "[TIMEDOUT] A [It] b", ok: true},
		"panicked":           {line: "[PANICKED!] A [It] b", want: "[PANICKED!] A [It] b", ok: true},
		// The line Ginkgo writes while the spec runs is not the summary's.
		"progress": {line: "  [FAILED] Expected <int>: 1 to equal <int>: 2"},
		"other":    {line: "Summarizing 1 Failure:"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := failedSpec(tc.line)
			if got != tc.want || ok != tc.ok {
				t.Errorf("failedSpec = %q, %t; want %q, %t", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestSummarize feeds a `go test -json` stream in which a sharded Ginkgo suite failed one spec,
// and a plain test passed: the summary counts the specs, and names the package and the spec.
func TestSummarize(t *testing.T) {
	pkg := "example.com/m/internal/controller"
	outputs := []string{
		"[shard 2/2] • [FAILED] [13.510 seconds]\n",
		"[shard 2/2] Summarizing 1 Failure:\n",
		"[shard 2/2]   [FAIL] Grant engine [It] orders the queue by priority\n",
		"[shard 2/2]   /work/internal/controller/grant_test.go:135\n",
		"Ran 90 of 90 Specs in 470.1 seconds\n",
		"FAIL! -- 89 Passed | 1 Failed | 0 Pending | 0 Skipped\n",
	}
	var in strings.Builder
	for _, o := range outputs {
		in.WriteString(`{"Action":"output","Package":"` + pkg + `","Test":"TestControllers","Output":` + strconv.Quote(o) + "}\n")
	}
	in.WriteString(`{"Action":"fail","Package":"` + pkg + `","Test":"TestControllers","Elapsed":470}` + "\n")
	in.WriteString(`{"Action":"fail","Package":"` + pkg + `","Elapsed":471}` + "\n")
	in.WriteString(`{"Action":"pass","Package":"example.com/m/hack","Test":"TestX","Elapsed":1}` + "\n")
	in.WriteString(`{"Action":"pass","Package":"example.com/m/hack","Elapsed":1}` + "\n")

	var out strings.Builder
	failed := summarize(strings.NewReader(in.String()), &out)
	if failed != 2 {
		t.Errorf("summarize = %d failed, want 2 (the spec, and its package)", failed)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"FAILED: " + pkg + " (package)",
		"FAILED spec: " + pkg + ": [shard 2/2] [FAIL] Grant engine [It] orders the queue by priority",
		"90 passed, 2 failed, 0 skipped",
	}
	if diff := cmp.Diff(want, lines[len(lines)-len(want):]); diff != "" {
		t.Errorf("the summary's last lines (-want +got):\n%s\nall of it:\n%s", diff, out.String())
	}
}

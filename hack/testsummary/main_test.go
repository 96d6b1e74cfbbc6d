package main

import "testing"

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

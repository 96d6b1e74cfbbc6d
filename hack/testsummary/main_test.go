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

package main

import "testing"

// TestNotAKill: a run that failed in a suite's setup or in the build says nothing of the guard,
// so it must not count as a kill (envtest suites without KUBEBUILDER_ASSETS fail in BeforeSuite).
func TestNotAKill(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      bool
	}{
		{"a spec failed", "  [FAIL] hole A [It] x and y hold one key\n", false},
		{"a test failed", "--- FAIL: TestDecideRandomized (0.01s)\n", false},
		{"setup failed", "  [FAIL] [BeforeSuite] \n", true},
		{"teardown failed", "  [FAIL] [AfterSuite] \n", true},
		{"did not compile", "FAIL\tgithub.com/turnstile-dev/turnstile/internal/queue [build failed]\n", true},
	} {
		if got := notAKill(firstFailure(tc.out), tc.out); got != tc.want {
			t.Errorf("%s: notAKill = %v, want %v (first failure %q)", tc.name, got, tc.want, firstFailure(tc.out))
		}
	}
}

package validation

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// TestLockRequestReason proves spec.reason's rules: one line of at most 256 characters, no
// surrounding whitespace. A valid reason is stored as written.
func TestLockRequestReason(t *testing.T) {
	ns := newNamespace(t)
	const (
		msgControl = "reason must be one line: no control characters (newlines, tabs, escapes)"
		msgSpace   = "reason must not start or end with whitespace"
	)
	for name, tc := range map[string]struct {
		reason  string
		wantErr []string
	}{
		"a note":              {reason: "incident 4711: manual state fix"},
		"256 characters":      {reason: strings.Repeat("r", 256)},
		"unicode":             {reason: "Zustand migrieren – bitte warten"},
		"257 characters":      {reason: strings.Repeat("r", 257), wantErr: []string{"spec.reason", "Too long"}},
		"a newline":           {reason: "line one\nline two", wantErr: []string{"spec.reason", msgControl}},
		"a tab":               {reason: "a\tb", wantErr: []string{"spec.reason", msgControl}},
		"an escape":           {reason: "red \x1b[31m", wantErr: []string{"spec.reason", msgControl}},
		"leading whitespace":  {reason: " migrating", wantErr: []string{"spec.reason", msgSpace}},
		"trailing whitespace": {reason: "migrating ", wantErr: []string{"spec.reason", msgSpace}},
	} {
		t.Run(name, func(t *testing.T) {
			u := obj("LockRequest", ns, map[string]any{"generateName": "reason-"}, lockRequestSpec(map[string]any{"reason": tc.reason}))
			err := k.Create(ctx(t), u)
			checkAdmission(t, err, tc.wantErr)
			if err != nil {
				return
			}
			var got locksv1.LockRequest
			if err := k.Get(ctx(t), client.ObjectKeyFromObject(u), &got); err != nil {
				t.Fatalf("get: %v", err)
			}
			if diff := cmp.Diff(tc.reason, got.Spec.Reason); diff != "" {
				t.Errorf("stored reason (-want +got):\n%s", diff)
			}
		})
	}
}

package validation

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// TestCommandLock checks CommandLock admission: it is named after the command it freezes and
// its reason is bounded. CommandLocks are cluster-scoped, so accepted ones are deleted again.
func TestCommandLock(t *testing.T) {
	until := metav1.NewTime(time.Date(2030, 1, 2, 18, 0, 0, 0, time.UTC))

	cases := map[string]struct {
		name     string
		spec     locksv1.CommandLockSpec
		wantErr  []string
		wantSpec locksv1.CommandLockSpec
	}{
		"name with uppercase": {
			name:    "Apply",
			wantErr: []string{msgCommandLock},
		},
		"name with a dot": {
			// A valid object name (DNS subdomain) that is no command: only the CEL rule rejects it.
			name:    "apply.now",
			wantErr: []string{msgCommandLock},
		},
		"name starting with a digit": {
			name:    "1apply",
			wantErr: []string{msgCommandLock},
		},
		"name with '_'": {
			// No object name may hold '_': the API server's own name check rejects it, which is
			// why LockRequest.spec.command may not hold it either.
			name:    "my_cmd",
			wantErr: []string{"metadata.name", "RFC 1123"},
		},
		"name ending with -": {
			name:    "apply-",
			wantErr: []string{msgCommandLock},
		},
		"name of 64 chars": {
			name:    strings.Repeat("a", 64),
			wantErr: []string{msgCommandLock},
		},
		"reason over 1024 chars": {
			name:    "validation-reason",
			spec:    locksv1.CommandLockSpec{Locked: true, Reason: strings.Repeat("r", 1025)},
			wantErr: []string{"spec.reason", "Too long", "1024"},
		},
		"freeze apply with a reason and until": {
			name:     "validation-apply",
			spec:     locksv1.CommandLockSpec{Locked: true, Reason: "maintenance window until 18:00 UTC", Until: &until},
			wantSpec: locksv1.CommandLockSpec{Locked: true, Reason: "maintenance window until 18:00 UTC", Until: &until},
		},
		"reason of 1024 chars": {
			name:     "validation-1024",
			spec:     locksv1.CommandLockSpec{Locked: true, Reason: strings.Repeat("r", 1024)},
			wantSpec: locksv1.CommandLockSpec{Locked: true, Reason: strings.Repeat("r", 1024)},
		},
		"name of 63 chars, unlocked": {
			name:     strings.Repeat("b", 63),
			wantSpec: locksv1.CommandLockSpec{},
		},
		"name with '-' and digits, as a LockRequest command": {
			name:     "my-cmd2",
			wantSpec: locksv1.CommandLockSpec{Locked: true},
			spec:     locksv1.CommandLockSpec{Locked: true},
		},
		"all freezes every command": {
			name:     locksv1.CommandAll,
			spec:     locksv1.CommandLockSpec{Locked: true, Reason: "cluster upgrade"},
			wantSpec: locksv1.CommandLockSpec{Locked: true, Reason: "cluster upgrade"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: tc.name}, Spec: tc.spec}
			err := k.Create(ctx(t), cl)
			if err == nil {
				t.Cleanup(func() { _ = k.Delete(context.Background(), cl) })
			}
			checkAdmission(t, err, tc.wantErr)
			if len(tc.wantErr) > 0 || t.Failed() {
				return
			}
			checkStoredSpec(t, cl, tc.wantSpec)
		})
	}
}

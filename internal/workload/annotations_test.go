package workload

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

func TestParse(t *testing.T) {
	hour := time.Hour
	tests := map[string]struct {
		ann     map[string]string
		want    Spec
		wantErr string
	}{
		"one key, workspace defaulted": {
			ann:  map[string]string{AnnotationLock: "acme/infra:modules/vpc"},
			want: Spec{Locks: []locksv1.LockTarget{{Repo: "acme/infra", Path: "modules/vpc", Workspace: "default"}}},
		},
		"several keys, commas and spaces, every part": {
			ann: map[string]string{AnnotationLock: " acme/infra:a,acme/infra:b:prod  acme/infra:c::web\n", AnnotationCommand: "apply",
				AnnotationPriority: "High", AnnotationTTL: "1h"},
			want: Spec{Locks: []locksv1.LockTarget{
				{Repo: "acme/infra", Path: "a", Workspace: "default"},
				{Repo: "acme/infra", Path: "b", Workspace: "prod"},
				{Repo: "acme/infra", Path: "c", Workspace: "default", Project: "web"},
			}, Command: "apply", Priority: locksv1.PriorityHigh, TTL: &hour},
		},
		"no annotation":  {ann: map[string]string{}, wantErr: "annotation locks.turnstile.dev/lock is missing"},
		"empty value":    {ann: map[string]string{AnnotationLock: " , "}, wantErr: "annotation locks.turnstile.dev/lock names no lock"},
		"no path":        {ann: map[string]string{AnnotationLock: "acme/infra"}, wantErr: `annotation locks.turnstile.dev/lock "acme/infra": want REPO:PATH[:WORKSPACE[:PROJECT]]`},
		"too many parts": {ann: map[string]string{AnnotationLock: "a/b:c:d:e:f"}, wantErr: `"a/b:c:d:e:f": want REPO:PATH`},
		"one bad of two": {ann: map[string]string{AnnotationLock: "a/b:c, :d"}, wantErr: `":d": want REPO:PATH`},
		"bad priority":   {ann: map[string]string{AnnotationLock: "a/b:c", AnnotationPriority: "high"}, wantErr: "annotation locks.turnstile.dev/priority must be Low, Normal, High or Critical"},
		"bad ttl":        {ann: map[string]string{AnnotationLock: "a/b:c", AnnotationTTL: "soon"}, wantErr: "annotation locks.turnstile.dev/ttl must be a positive duration"},
		"zero ttl":       {ann: map[string]string{AnnotationLock: "a/b:c", AnnotationTTL: "0s"}, wantErr: "annotation locks.turnstile.dev/ttl must be a positive duration"},
		"negative ttl":   {ann: map[string]string{AnnotationLock: "a/b:c", AnnotationTTL: "-1m"}, wantErr: "annotation locks.turnstile.dev/ttl must be a positive duration"},
		"keep-running": {ann: map[string]string{AnnotationLock: "a/b:c", locksv1.AnnotationOnPartition: "keep-running"},
			want: Spec{Locks: []locksv1.LockTarget{{Repo: "a/b", Path: "c", Workspace: "default"}}, KeepRunning: true}},
		"another on-partition value": {ann: map[string]string{AnnotationLock: "a/b:c", locksv1.AnnotationOnPartition: "stop"},
			wantErr: `annotation fleet.turnstile.dev/on-partition must be keep-running, not "stop"`},
		"keep-running with a ttl": {ann: map[string]string{AnnotationLock: "a/b:c", locksv1.AnnotationOnPartition: "keep-running", AnnotationTTL: "1h"},
			wantErr: "keep-running and locks.turnstile.dev/ttl cannot go together"},
		"a path the API refuses": {ann: map[string]string{AnnotationLock: "acme/infra:../etc"},
			wantErr: `annotation locks.turnstile.dev/lock "acme/infra:../etc": path must not contain '.' or '..' segments`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Parse(tc.ann)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse(%v) error = %v, want one containing %q", tc.ann, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%v): %v", tc.ann, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Parse(%v) (-want +got):\n%s", tc.ann, diff)
			}
		})
	}
}

func TestRequestName(t *testing.T) {
	if got := RequestName("pod", "migrate"); got != "pod-migrate" {
		t.Errorf("RequestName(pod, migrate) = %q, want pod-migrate", got)
	}
	long := strings.Repeat("a", 253)
	a, b := RequestName("job", long), RequestName("job", long[:252]+"b")
	if len(a) > 253 || len(b) > 253 || a == b {
		t.Errorf("names of long workloads must fit 253 characters and differ: %d %d, equal %v", len(a), len(b), a == b)
	}
}

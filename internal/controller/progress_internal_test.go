package controller

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
)

// TestDecidedKeys: a change of a request's status is progress on a key only if the key's own
// entry changed or the request waits in that key's queue; a busy other key's refreshes and a
// renewal are progress on no other key (hole B of #26: a backup deferred a hung owner's key for
// as long as another key of a multi-lock request stayed busy).
func TestDecidedKeys(t *testing.T) {
	targets := []locksv1.LockTarget{
		{Repo: "acme/infra", Path: "b-second", Workspace: "default"},
		{Repo: "acme/infra", Path: "a-first", Workspace: "default"},
	}
	refs := lockkey.Refs(targets) // canonical order: a-first, then b-second
	first, second := refs[0], refs[1]
	entries := func(heldFirst, heldSecond bool, token int64) []locksv1.LockStatus {
		ls := make([]locksv1.LockStatus, 2)
		for _, r := range refs {
			ls[r.Index] = locksv1.LockStatus{Key: r.Key, Name: r.Name}
		}
		ls[first.Index].Held, ls[second.Index].Held = heldFirst, heldSecond
		if heldFirst {
			ls[first.Index].FencingToken = token
		}
		if heldSecond {
			ls[second.Index].FencingToken = token
		}
		return ls
	}
	pending := func(ls []locksv1.LockStatus, pos int32, msg string) locksv1.LockRequestStatus {
		return locksv1.LockRequestStatus{Phase: locksv1.PhasePending, Locks: ls, QueuePosition: pos, BlockedBy: msg}
	}
	granted := func(expires int) locksv1.LockRequestStatus {
		ls := entries(true, true, 7)
		ls[first.Index].FencingToken = 5
		return locksv1.LockRequestStatus{Phase: locksv1.PhaseGranted, Locks: ls, FencingToken: 7,
			ExpiresAt: ptr.To(metav1.NewTime(t0.Add(time.Duration(expires) * time.Minute)))}
	}
	cases := map[string]struct {
		was, now locksv1.LockRequestStatus
		want     []string
	}{
		"first status: only the key it waits in": {
			now:  pending(entries(false, false, 0), 1, "held by x"),
			want: []string{first.Name},
		},
		"a refresh of its position in the key it waits in": {
			was:  pending(entries(true, false, 5), 1, "position 1 of 2"),
			now:  pending(entries(true, false, 5), 1, "position 1 of 3"),
			want: []string{second.Name},
		},
		"the key it holds is not decided by the queue it waits in": {
			was:  pending(entries(true, false, 5), 2, "position 2 of 3"),
			now:  pending(entries(true, false, 5), 1, "position 1 of 2"),
			want: []string{second.Name},
		},
		"granted its first key: that key, and the next it waits in": {
			was:  pending(entries(false, false, 0), 1, "position 1 of 1"),
			now:  pending(entries(true, false, 5), 0, ""),
			want: []string{first.Name, second.Name},
		},
		"granted its last key": {
			was:  pending(entries(true, false, 5), 1, "position 1 of 1"),
			now:  granted(10),
			want: []string{second.Name},
		},
		"a renewal is progress on no key": {
			was:  granted(10),
			now:  granted(15),
			want: nil,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			lr := &locksv1.LockRequest{Spec: locksv1.LockRequestSpec{Locks: targets}, Status: tc.now}
			got := decidedKeys(lr, &tc.was)
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decidedKeys (-want +got):\n%s", diff)
			}
		})
	}
}

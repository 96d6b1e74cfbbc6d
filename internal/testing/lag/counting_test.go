package lag

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/watch"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
)

func counted(t locksv1.LockTarget, n int32) locksv1.LockTarget {
	t.Mode, t.MaxHolders = locksv1.ModeShared, n
	return t
}

// TestCountingChecked replays request histories through the checker: a counting lock held by
// more requests than the lowest maxHolders among them, and a counted holder whose token is not
// its own (one a reader showed, or below an earlier holder's), are reported; a legal history
// is not (issue #45).
func TestCountingChecked(t *testing.T) {
	up := func(name, owner string, n int32, tok int64) *locksv1.LockRequest {
		return held(name, owner, locksv1.PhaseGranted, []locksv1.LockTarget{counted(netKey, n)}, tok)
	}
	key := "ns/" + lockkey.Name(netKey)
	for _, tc := range []struct {
		name    string
		history []*locksv1.LockRequest
		want    string // a substring of a violation expected, "" for none
	}{{
		name:    "three of at most three, each with its own rising token",
		history: []*locksv1.LockRequest{up("a", "c1", 3, 10), up("b", "c2", 3, 12), up("c", "c3", 3, 14)},
	}, {
		name:    "a fourth beside three of at most three",
		history: []*locksv1.LockRequest{up("a", "c1", 3, 10), up("b", "c2", 3, 12), up("c", "c3", 3, 14), up("d", "c4", 3, 16)},
		want:    "counting: " + key + " is held by 4 requests, one of them with maxHolders 3",
	}, {
		name:    "a request with a higher bound beside one with a lower",
		history: []*locksv1.LockRequest{up("a", "c1", 1, 10), up("b", "c2", 3, 12)},
		want:    "counting: " + key + " is held by 2 requests, one of them with maxHolders 1",
	}, {
		name:    "a counted holder with the token of a reader before it",
		history: []*locksv1.LockRequest{held("r", "c1", locksv1.PhaseGranted, []locksv1.LockTarget{shared(netKey)}, 10), up("b", "c2", 3, 10)},
		want:    "counted b holds " + key + " with token 10, which a shared holder showed before",
	}, {
		name:    "a reader with the token of a counted holder before it",
		history: []*locksv1.LockRequest{up("a", "c1", 3, 10), held("r", "c2", locksv1.PhaseGranted, []locksv1.LockTarget{shared(netKey)}, 10)},
		want:    "r holds " + key + " shared with token 10, not above 10 that a counted holder showed before",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inv := NewInvariants(nil)
			var evs []Event
			for _, lr := range tc.history {
				evs = append(evs, Event{Type: watch.Modified, Object: lr})
			}
			got := inv.Replay("ns", evs)
			if tc.want == "" {
				if diff := cmp.Diff([]string(nil), got); diff != "" {
					t.Fatalf("violations (-want +got):\n%s", diff)
				}
				return
			}
			if !slices.ContainsFunc(got, func(v string) bool { return strings.Contains(v, tc.want) }) {
				t.Fatalf("violations %q, want one containing %q", got, tc.want)
			}
		})
	}
}

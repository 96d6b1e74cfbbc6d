package framework

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/watch"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	. "github.com/turnstile-dev/turnstile/internal/testing/wrappers"
)

// The checker is what every safety spec trusts to see a double grant: it must see one.
func TestInvariantCheckerSeesDoubleGrants(t *testing.T) {
	const ns = "ns"
	held := func(name string) locksv1.LockStatus { return locksv1.LockStatus{Name: name, Held: true} }
	granted := func(name, owner string, pull int64, locks ...locksv1.LockStatus) watch.Event {
		return watch.Event{Type: watch.Modified, Object: MakeLockRequest(name, ns).Owner(owner, pull).
			Status(locksv1.LockRequestStatus{Phase: locksv1.PhaseGranted, Locks: locks}).Obj()}
	}
	pendingHolding := func(name, owner string, pull int64, locks ...locksv1.LockStatus) watch.Event {
		return watch.Event{Type: watch.Modified, Object: MakeLockRequest(name, ns).Owner(owner, pull).
			Status(locksv1.LockRequestStatus{Phase: locksv1.PhasePending, Locks: locks}).Obj()}
	}
	released := func(name, owner string, pull int64, locks ...locksv1.LockStatus) watch.Event {
		return watch.Event{Type: watch.Modified, Object: MakeLockRequest(name, ns).Owner(owner, pull).
			Status(locksv1.LockRequestStatus{Phase: locksv1.PhaseReleased, Locks: locks}).Obj()}
	}
	deleted := func(e watch.Event) watch.Event { e.Type = watch.Deleted; return e }

	cases := map[string]struct {
		events         []watch.Event
		wantViolations int
		wantGrants     int
	}{
		"two Granted requests of different identities on one key": {
			events:         []watch.Event{granted("a", "alice", 1, held("k")), granted("b", "bob", 2, held("k"))},
			wantViolations: 1, wantGrants: 2,
		},
		"the same owner with another pull is another identity": {
			events:         []watch.Event{granted("a", "alice", 1, held("k")), granted("b", "alice", 2, held("k"))},
			wantViolations: 1, wantGrants: 2,
		},
		"a Pending multi-lock request holding the key counts as a holder": {
			events:         []watch.Event{granted("a", "alice", 1, held("k")), pendingHolding("b", "bob", 2, held("k"), locksv1.LockStatus{Name: "j"})},
			wantViolations: 1, wantGrants: 1,
		},
		"two requests of one identity share a key": {
			events:     []watch.Event{granted("a", "alice", 1, held("k")), granted("b", "alice", 1, held("k"))},
			wantGrants: 2,
		},
		"different keys": {
			events:     []watch.Event{granted("a", "alice", 1, held("k")), granted("b", "bob", 2, held("j"))},
			wantGrants: 2,
		},
		"a hand-off: the old holder released first": {
			events:     []watch.Event{granted("a", "alice", 1, held("k")), released("a", "alice", 1), granted("b", "bob", 2, held("k"))},
			wantGrants: 2,
		},
		"a hand-off: the old holder deleted first": {
			events:     []watch.Event{granted("a", "alice", 1, held("k")), deleted(granted("a", "alice", 1, held("k"))), granted("b", "bob", 2, held("k"))},
			wantGrants: 2,
		},
		"a hand-off written in the wrong order": {
			events:         []watch.Event{granted("a", "alice", 1, held("k")), granted("b", "bob", 2, held("k")), released("a", "alice", 1)},
			wantViolations: 1, wantGrants: 2,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ic := &InvariantChecker{requests: map[string]*locksv1.LockRequest{}}
			for _, e := range tc.events {
				ic.observe(e)
			}
			got := ic.Violations()
			if len(got) != tc.wantViolations {
				t.Fatalf("violations = %q, want %d", got, tc.wantViolations)
			}
			for _, v := range got {
				if !strings.Contains(v, ns+"/k held by 2 identities") {
					t.Errorf("violation %q does not name the key and its two identities", v)
				}
			}
			if events, grants := ic.Stats(); events != len(tc.events) || grants != tc.wantGrants {
				t.Errorf("stats = %d events, %d grants; want %d, %d", events, grants, len(tc.events), tc.wantGrants)
			}
		})
	}
}

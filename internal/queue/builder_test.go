package queue

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// The status-shaping calls of the test builder (wrappers.LockRequestWrapper) stand for what
// Decide writes; every table here trusts them. They must read as Decide's own writes, through
// the API server's precision, or a table would test Decide against a status it never writes.
// Only the arrival revision differs: the builder derives it from queuedAt (arrivalRevision),
// where the controller takes the request's resourceVersion.
func TestBuilderShapesStatusAsDecideWrites(t *testing.T) {
	cfg := testConfig()
	w := newWorld(t)
	w.add(makeReq("a").Owner("alice", 100).Obj())
	w.decide(name1, now, cfg)
	w.add(makeReq("b").Owner("bob", 7).Obj())
	w.decide(name1, now.Add(time.Minute), cfg)
	token := w.get("a").Status.FencingToken
	if token == 0 {
		t.Fatalf("a was not granted:\n%+v", w.get("a").Status)
	}

	cases := map[string]struct {
		built   *locksv1.LockRequest
		written *locksv1.LockRequest
	}{
		"a grant: Granted(at, token)": {
			built:   makeReq("a").Owner("alice", 100).Granted(now, token).Obj(),
			written: w.get("a"),
		},
		"a waiter: QueuedAt and Waiting": {
			built: makeReq("b").Owner("bob", 7).QueuedAt(now.Add(time.Minute)).
				Waiting(locksv1.ReasonQueued, lockedByAlice+"; position 1 of 1", 1, lockedByAlice).Obj(),
			written: w.get("b"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			built := roundTrip(t, tc.built.Status)
			if diff := cmp.Diff(tc.written.Status, built, cmpopts.IgnoreFields(locksv1.LockRequestStatus{}, "ArrivalRevision")); diff != "" {
				t.Errorf("built status (-written by Decide +built):\n%s", diff)
			}
		})
	}
}

package queue

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// The holder's spec.reason is told to everyone waiting, after who holds the key: in the
// Granted condition's message, in blockedBy and in the Busy failure of a request that would not
// wait. A waiter's own reason is not told to those behind it.
func TestDecideTellsTheHolderReason(t *testing.T) {
	const why = "migrating state"
	for name, tc := range map[string]struct {
		holderReason string
		wantAhead    string
	}{
		"with a reason":    {holderReason: why, wantAhead: "locked by pull #100 (alice): " + why},
		"without a reason": {wantAhead: "locked by pull #100 (alice)"},
	} {
		t.Run(name, func(t *testing.T) {
			// alice holds tgt1 (built here from testutil_test.go's builders alone).
			since := t0.Add(-5 * time.Minute)
			h := makeReq("h").Owner("alice", 100).Granted(since, 41).Reason(tc.holderReason).Obj()
			waiter := makeReq("b").Owner("bob", 7).Reason("second in line").Obj()
			busy := makeReq("c").Owner("carol", 8).WaitTimeout(0).Obj()
			d := Decide(Input{Now: now, Name: name1, Lock: makeLock(tgt1).token(41).holder(since, h).Obj(), Config: testConfig(),
				Requests: []*locksv1.LockRequest{h, waiter, busy}})

			got := views(d.Waiting)
			if diff := cmp.Diff(tc.wantAhead+"; position 1 of 1", got["b"].Message); diff != "" {
				t.Errorf("waiter's message (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantAhead, d.Waiting[0].Status.BlockedBy); diff != "" {
				t.Errorf("waiter's blockedBy (-want +got):\n%s", diff)
			}
			fin := views(d.Finish)
			if diff := cmp.Diff(locksv1.ReasonBusy, fin["c"].Reason); diff != "" {
				t.Fatalf("the 0s request's reason (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(key1+" is busy and waitTimeout is 0s: "+tc.wantAhead, fin["c"].Message); diff != "" {
				t.Errorf("the 0s request's message (-want +got):\n%s", diff)
			}
		})
	}
}

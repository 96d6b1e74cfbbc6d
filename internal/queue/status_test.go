package queue

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// FinishedStatus is the one builder of a finished request's status, for Decide's outcomes and
// the deadlock detector's victims alike.
func TestFinishedStatus(t *testing.T) {
	type view struct {
		Phase     locksv1.LockRequestPhase
		BlockedBy string
		Held      []bool
		Finished  time.Time
		Conds     map[string]string // type -> status/reason: message
	}
	viewOf := func(st locksv1.LockRequestStatus) view {
		v := view{Phase: st.Phase, BlockedBy: st.BlockedBy, Finished: st.FinishedAt.Time, Conds: map[string]string{}}
		for _, l := range st.Locks {
			v.Held = append(v.Held, l.Held)
		}
		for _, typ := range []string{locksv1.ConditionGranted, locksv1.ConditionReady, locksv1.ConditionReconciling, locksv1.ConditionStalled} {
			c := meta.FindStatusCondition(st.Conditions, typ)
			v.Conds[typ] = string(c.Status) + "/" + c.Reason + ": " + c.Message
		}
		return v
	}
	waiting := makeReq("v").Owner("bob", 2).QueuedAt(t0).Obj()
	waiting.Status.Locks = []locksv1.LockStatus{{Key: waiting.Status.Locks[0].Key, Name: waiting.Status.Locks[0].Name, Held: true}}
	// finished is the view of a request that finished with reason and message: Granted and
	// Reconciling False, and to kstatus either Current (Ready True) or Failed (Stalled True).
	finished := func(phase locksv1.LockRequestPhase, reason, message, blockedBy string, current bool) view {
		ready, stalled := "False/"+reason+": "+message, "True/"+reason+": "+message
		if current {
			ready, stalled = "True/"+reason+": "+message, "False/"+reason+": finished"
		}
		return view{Phase: phase, BlockedBy: blockedBy, Held: []bool{false}, Finished: now.Truncate(time.Second),
			Conds: map[string]string{
				locksv1.ConditionGranted:     "False/" + reason + ": " + message,
				locksv1.ConditionReady:       ready,
				locksv1.ConditionReconciling: "False/" + reason + ": finished",
				locksv1.ConditionStalled:     stalled,
			}}
	}
	const cycle = "cycle: alice -> bob -> alice"
	cases := map[string]struct {
		phase           locksv1.LockRequestPhase
		reason, message string
		want            view
	}{
		"a deadlock victim": {
			phase: locksv1.PhaseFailed, reason: locksv1.ReasonDeadlock, message: cycle,
			want: finished(locksv1.PhaseFailed, "Deadlock", cycle, cycle, false),
		},
		"a release": {
			phase: locksv1.PhaseReleased, reason: locksv1.ReasonReleased, message: "released",
			want: finished(locksv1.PhaseReleased, "Released", "released", "", true),
		},
		"an expiry": {
			phase: locksv1.PhaseExpired, reason: locksv1.ReasonExpired, message: "the grant expired",
			want: finished(locksv1.PhaseExpired, "Expired", "the grant expired", "", false),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := viewOf(FinishedStatus(waiting, tc.phase, tc.reason, tc.message, now))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("FinishedStatus (-want +got):\n%s", diff)
			}
		})
	}
}

// A message longer than the API server stores (a deadlock among hundreds of requests) is clipped
// in every condition and in blockedBy, so the victim's status write cannot fail on its length.
func TestLongMessagesAreClipped(t *testing.T) {
	long := strings.Repeat("lockrequest team-a/r-0001 (alice, pull #1) waits for ", 1000) // 53,000 bytes
	multi := strings.Repeat("é", MaxMessage)                                              // 2 bytes each
	cases := map[string]struct {
		in       string
		wantLen  int
		wantTail string
	}{
		"short: unchanged":        {in: "deadlock", wantLen: len("deadlock"), wantTail: "deadlock"},
		"at the limit: unchanged": {in: strings.Repeat("x", MaxMessage), wantLen: MaxMessage, wantTail: "x"},
		"over it: clipped":        {in: long, wantLen: MaxMessage, wantTail: "…"},
		"cut between characters":  {in: multi, wantLen: MaxMessage - 1, wantTail: "é…"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Clip(tc.in)
			if len(got) != tc.wantLen || !strings.HasSuffix(got, tc.wantTail) || !utf8.ValidString(got) {
				t.Errorf("Clip: %d bytes ending %q (valid UTF-8: %t); want %d bytes ending %q",
					len(got), got[max(0, len(got)-8):], utf8.ValidString(got), tc.wantLen, tc.wantTail)
			}
		})
	}

	victim := makeReq("victim").QueuedAt(t0).Obj()
	st := FinishedStatus(victim, locksv1.PhaseFailed, locksv1.ReasonDeadlock, long, now)
	if len(st.BlockedBy) > MaxMessage {
		t.Errorf("blockedBy is %d bytes, over the %d the CRD allows", len(st.BlockedBy), MaxMessage)
	}
	for _, c := range st.Conditions {
		if len(c.Message) > MaxMessage {
			t.Errorf("condition %s's message is %d bytes, over the %d the API server allows", c.Type, len(c.Message), MaxMessage)
		}
	}
}

package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// intervals are the judged intervals, each as "from..until window" (until "-" when open-ended), in UTC.
func intervals(a *locksv1.AdmissionStatus) []string {
	var out []string
	for _, iv := range a.Intervals {
		until := "-"
		if iv.Until != nil {
			until = iv.Until.UTC().Format(time.RFC3339)
		}
		out = append(out, iv.From.UTC().Format(time.RFC3339)+".."+until+" "+iv.Window)
	}
	return out
}

// TestAdmissionStatusJudgesAgainOnlyWhenStale steps a fake clock through a weekend write freeze
// as the reconciler would, storing each status it computes, and checks when the judgement
// (judgedAt, the intervals) is made again: at a window's edge, at spec.until, at a new spec
// generation and once it is half a horizon old, and at no other reconcile (a LockRequest's
// event) - judged at every reconcile, an interval in force would start at every now and the
// status would be rewritten on every event. The break-glass grants are judged every time.
func TestAdmissionStatusJudgesAgainOnlyWhenStale(t *testing.T) {
	utc := func(month time.Month, day, hour, minute, sec int) time.Time {
		return time.Date(2027, month, day, hour, minute, sec, 0, time.UTC)
	}
	weekend := locksv1.FreezeWindow{Name: "weekend", Schedule: "0 18 * * 5", Duration: metav1.Duration{Duration: 60 * time.Hour}, Action: locksv1.WindowDeny}
	cl := &locksv1.CommandLock{
		ObjectMeta: metav1.ObjectMeta{Name: "weekend", Generation: 1},
		Spec:       locksv1.CommandLockSpec{Windows: []locksv1.FreezeWindow{weekend}, Admission: &locksv1.AdmissionFreeze{}},
	}
	grant := func(name string, expires time.Time) locksv1.LockRequest {
		lr := locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}
		lr.Spec.Command = "weekend"
		lr.Spec.Holder.Owner = "alice"
		lr.Spec.BypassFreeze = &locksv1.FreezeBypass{Reason: "incident"}
		lr.Status.Phase = locksv1.PhaseGranted
		lr.Status.ExpiresAt = &metav1.Time{Time: expires}
		return lr
	}
	clk := clocktesting.NewFakeClock(utc(time.March, 24, 12, 0, 0)) // a Wednesday
	// reconcile computes the status at the clock's now and stores it, as the reconciler does.
	reconcile := func(requests ...locksv1.LockRequest) *locksv1.AdmissionStatus {
		t.Helper()
		cl.Status = CommandLockStatus(cl, requests, queue.FreezeFlags{}, clk.Now(), 0)
		if cl.Status.Admission == nil {
			t.Fatalf("at %s: no status.admission", clk.Now())
		}
		return cl.Status.Admission
	}
	judgedAt := func(a *locksv1.AdmissionStatus) time.Time { return a.JudgedAt.Time }
	expect := func(what string, got, want []string) {
		t.Helper()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("at %s, %s (-want +got):\n%s", clk.Now().UTC().Format(time.RFC3339), what, diff)
		}
	}
	expectJudgedAt := func(a *locksv1.AdmissionStatus, want time.Time) {
		t.Helper()
		if got := judgedAt(a); !got.Equal(want) {
			t.Errorf("at %s: judgedAt %s, want %s", clk.Now().UTC().Format(time.RFC3339), got.UTC().Format(time.RFC3339), want.UTC().Format(time.RFC3339))
		}
	}

	a := reconcile()
	expectJudgedAt(a, utc(time.March, 24, 12, 0, 0))
	expect("the first judgement", intervals(a), []string{
		"2027-03-26T18:00:00Z..2027-03-29T06:00:00Z weekend",
		"2027-04-01T12:00:00Z..- not judged past the horizon",
	})

	// An hour later, a LockRequest's event: nothing is judged again, the grant is listed.
	clk.Step(time.Hour)
	a = reconcile(grant("glass", utc(time.March, 24, 13, 30, 0)))
	expectJudgedAt(a, utc(time.March, 24, 12, 0, 0))
	if len(a.Bypasses) != 1 || a.Bypasses[0].Request != "glass" || a.Bypasses[0].User != "alice" || a.Bypasses[0].Namespace != "shop" {
		t.Errorf("bypasses %+v, want alice's grant glass in shop", a.Bypasses)
	}
	// Expired: no longer listed, still not judged again.
	clk.Step(time.Hour)
	a = reconcile(grant("glass", utc(time.March, 24, 13, 30, 0)))
	expectJudgedAt(a, utc(time.March, 24, 12, 0, 0))
	if a.Bypasses != nil {
		t.Errorf("an expired grant is listed: %+v", a.Bypasses)
	}

	// A second before the window opens: not stale. At its opening: judged again, from the
	// interval in force on, with the next weekend now inside the horizon.
	clk.SetTime(utc(time.March, 26, 17, 59, 59))
	expectJudgedAt(reconcile(), utc(time.March, 24, 12, 0, 0))
	clk.SetTime(utc(time.March, 26, 18, 0, 0))
	a = reconcile()
	expectJudgedAt(a, utc(time.March, 26, 18, 0, 0))
	expect("at the opening", intervals(a), []string{
		"2027-03-26T18:00:00Z..2027-03-29T06:00:00Z weekend",
		"2027-04-02T18:00:00Z..2027-04-05T06:00:00Z weekend",
		"2027-04-05T06:00:00Z..- not judged past the horizon",
	})
	clk.Step(30 * time.Second)
	expectJudgedAt(reconcile(), utc(time.March, 26, 18, 0, 0))

	// At its close, half a second late (a reconcile's latency): judged again.
	clk.SetTime(utc(time.March, 29, 6, 0, 0).Add(500 * time.Millisecond))
	a = reconcile()
	expectJudgedAt(a, utc(time.March, 29, 6, 0, 0))
	expect("at the close", intervals(a), []string{
		"2027-04-02T18:00:00Z..2027-04-05T06:00:00Z weekend",
		"2027-04-06T06:00:00Z..- not judged past the horizon",
	})

	// A new generation (an edit of the spec) is judged at once.
	clk.Step(time.Minute)
	cl.Generation = 2
	expectJudgedAt(reconcile(), utc(time.March, 29, 6, 1, 0))
	clk.Step(time.Minute)
	expectJudgedAt(reconcile(), utc(time.March, 29, 6, 1, 0))

	// A manual freeze's until passing is an edge too.
	until := utc(time.March, 29, 8, 0, 0)
	cl.Spec.Locked, cl.Spec.Until, cl.Generation = true, &metav1.Time{Time: until}, 3
	clk.Step(time.Minute)
	expectJudgedAt(reconcile(), utc(time.March, 29, 6, 3, 0))
	clk.SetTime(until.Add(-time.Second))
	expectJudgedAt(reconcile(), utc(time.March, 29, 6, 3, 0))
	clk.SetTime(until)
	expectJudgedAt(reconcile(), until)
}

// TestAdmissionJudgedAgainBeforeItsHorizon: a window whose next edge is weeks away (a yearly
// freeze) is judged again after half the horizon, and the reconciler wakes up for it, so that
// a running manager never lets the policy reach the end of what was judged (where everything
// in scope is frozen).
func TestAdmissionJudgedAgainBeforeItsHorizon(t *testing.T) {
	now := time.Date(2027, time.March, 24, 12, 0, 0, 0, time.UTC)
	yearly := locksv1.FreezeWindow{Name: "year-end", Schedule: "0 0 20 12 *", Duration: metav1.Duration{Duration: 14 * 24 * time.Hour}, Action: locksv1.WindowDeny}
	cl := &locksv1.CommandLock{
		ObjectMeta: metav1.ObjectMeta{Name: "year-end", Generation: 1},
		Spec:       locksv1.CommandLockSpec{Windows: []locksv1.FreezeWindow{yearly}, Admission: &locksv1.AdmissionFreeze{}},
	}
	cl.Status = CommandLockStatus(cl, nil, queue.FreezeFlags{}, now, 0)
	if got := intervals(cl.Status.Admission); !cmp.Equal(got, []string{"2027-04-01T12:00:00Z..- not judged past the horizon"}) {
		t.Fatalf("intervals %v", got)
	}
	if got, want := nextWakeUp(cl, now), 4*24*time.Hour+time.Millisecond; got != want {
		t.Errorf("wakes up after %s, want %s: half the horizon, not at the window's opening in December", got, want)
	}
	for _, tc := range []struct {
		after time.Duration
		stale bool
	}{{4*24*time.Hour - time.Second, false}, {4 * 24 * time.Hour, true}} {
		at := now.Add(tc.after)
		if got := stale(cl, cl.Status.Admission, at); got != tc.stale {
			t.Errorf("%s after the judgement: stale %v, want %v", tc.after, got, tc.stale)
		}
	}
	next := CommandLockStatus(cl, nil, queue.FreezeFlags{}, now.Add(4*24*time.Hour), 0)
	if got := intervals(next.Admission); !cmp.Equal(got, []string{"2027-04-05T12:00:00Z..- not judged past the horizon"}) {
		t.Errorf("judged again: intervals %v, want the horizon 8 days from then", got)
	}
	// Without spec.admission, the clock alone wakes nothing.
	cl.Spec.Admission, cl.Status = nil, locksv1.CommandLockStatus{}
	cl.Status = CommandLockStatus(cl, nil, queue.FreezeFlags{}, now, 0)
	if got, want := nextWakeUp(cl, now), time.Date(2027, time.December, 20, 0, 0, 0, 0, time.UTC).Sub(now)+time.Millisecond; got != want {
		t.Errorf("without spec.admission: wakes up after %s, want %s (the window's opening)", got, want)
	}
}

package spoke_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/spoke"
	"github.com/turnstile-dev/turnstile/internal/queue"
	"github.com/turnstile-dev/turnstile/internal/window"
)

// hubJudged is the hub's CommandLock apply with windows, its status as the hub's reconciler
// wrote it at judgedAt (window.Judge, the hub's code), mirrored into the spoke of eu-west-1.
func hubJudged(judgedAt time.Time, windows ...locksv1.FreezeWindow) *locksv1.CommandLock {
	cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "apply", Generation: 1}, Spec: locksv1.CommandLockSpec{Windows: windows}}
	var next time.Time
	cl.Status.ObservedGeneration = 1
	cl.Status.Windows, next = window.Judge(windows, judgedAt)
	if !next.IsZero() {
		cl.Status.NextTransition = &metav1.Time{Time: next.Truncate(time.Second)}
	}
	queue.SetCondition(&cl.Status.Conditions, locksv1.ConditionLocked, metav1.ConditionFalse, locksv1.ReasonThawed, "not frozen", 1, judgedAt)
	return cl
}

// nightly is a window whose opening Europe/Berlin's clock skips on 2026-03-29 (02:00 CET jumps
// to 03:00 CEST): by cronie's rule it opens at the first instant after the gap, 01:00Z.
func nightly() locksv1.FreezeWindow {
	return locksv1.FreezeWindow{Name: "nightly", Schedule: "0 2 * * *", Duration: metav1.Duration{Duration: time.Hour},
		TimeZone: "Europe/Berlin", Action: locksv1.WindowDeny}
}

// TestMirrorStatusJudgedInSpoke: a CommandLock mirror shows the hub's judgement until it runs
// out (its next transition, plus a slack for the hub's write to arrive), then the spoke's own by
// its clock, with the same window code and its daylight-saving rules, marked JudgedInSpoke.
func TestMirrorStatusJudgedInSpoke(t *testing.T) {
	judged := time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC) // 01:30 CET: the window opens at 01:00Z
	hub := hubJudged(judged, nightly())
	seen := judged.Add(10 * time.Second)
	type summary struct {
		State, Next, Locked, JudgedInSpoke string
		Again                              time.Time
	}
	sum := func(st locksv1.CommandLockStatus, again time.Time) summary {
		s := summary{State: string(st.Windows[0].State), Again: again}
		if st.NextTransition != nil {
			s.Next = st.NextTransition.UTC().Format(time.RFC3339)
		}
		if c := meta.FindStatusCondition(st.Conditions, locksv1.ConditionLocked); c != nil {
			s.Locked = string(c.Status) + "/" + c.Reason + ": " + c.Message
		}
		if c := meta.FindStatusCondition(st.Conditions, spoke.ConditionJudgedInSpoke); c != nil {
			s.JudgedInSpoke = string(c.Status) + "/" + c.Reason + ": " + c.Message
		}
		return s
	}
	opens := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		now  time.Time
		want summary
	}{
		"the hub's judgement holds until its next transition": {now: opens.Add(-time.Second),
			want: summary{State: "Closed", Next: "2026-03-29T01:00:00Z", Locked: "False/Thawed: not frozen", Again: opens.Add(5 * time.Second)}},
		"and for the slack after it, while the hub's write may still come": {now: opens.Add(4 * time.Second),
			want: summary{State: "Closed", Next: "2026-03-29T01:00:00Z", Locked: "False/Thawed: not frozen", Again: opens.Add(5 * time.Second)}},
		"then the spoke judges: open at the first instant after the gap, until 04:00 CEST": {now: opens.Add(5 * time.Second),
			want: summary{State: "Open", Next: "2026-03-29T02:00:00Z",
				Locked:        "True/Window: Apply commands are frozen by window nightly of commandlock apply: Deny window in force until 2026-03-29T02:00:00Z",
				JudgedInSpoke: "True/HubJudgementOutdated: judged in this spoke (cluster eu-west-1) by its own clock: the hub's judgement ran out at 2026-03-29T01:00:00Z and the hub has sent none since (its CommandLocks read last at 2026-03-29T00:30:10Z); the windows, until and Locked are this spoke's, the counts and Drained the hub's as last seen",
				Again:         time.Date(2026, 3, 29, 2, 0, 0, 0, time.UTC)}},
		"and closed again at 04:00 CEST by its clock": {now: time.Date(2026, 3, 29, 2, 0, 1, 0, time.UTC),
			want: summary{State: "Closed", Next: "2026-03-30T00:00:00Z", Locked: "False/Thawed: not frozen",
				JudgedInSpoke: "True/HubJudgementOutdated: judged in this spoke (cluster eu-west-1) by its own clock: the hub's judgement ran out at 2026-03-29T01:00:00Z and the hub has sent none since (its CommandLocks read last at 2026-03-29T00:30:10Z); the windows, until and Locked are this spoke's, the counts and Drained the hub's as last seen",
				Again:         time.Date(2026, 3, 30, 0, 0, 0, 0, time.UTC)}},
	} {
		st, again := spoke.MirrorStatus(hub, "eu-west-1", seen, tc.now)
		if diff := cmp.Diff(tc.want, sum(st, again)); diff != "" {
			t.Errorf("%s: (-want +got)\n%s", name, diff)
		}
	}

	// A manual freeze's until that passes while the hub is silent: thawed by the spoke's clock.
	until := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	manual := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "apply", Generation: 1},
		Spec: locksv1.CommandLockSpec{Locked: true, Reason: "weekend", Until: &metav1.Time{Time: until}}}
	manual.Status.ObservedGeneration = 1
	queue.SetCondition(&manual.Status.Conditions, locksv1.ConditionLocked, metav1.ConditionTrue, locksv1.ReasonFrozen, "Apply commands are locked globally: weekend", 1, until.Add(-time.Hour))
	st, _ := spoke.MirrorStatus(manual, "eu-west-1", time.Time{}, until.Add(-time.Minute))
	if got := sum(append2(st), time.Time{}).Locked; got != "True/Frozen: Apply commands are locked globally: weekend" {
		t.Errorf("before until: Locked %q", got)
	}
	st, _ = spoke.MirrorStatus(manual, "eu-west-1", time.Time{}, until.Add(judgeSlack()))
	if got := sum(append2(st), time.Time{}); got.Locked != "False/Thawed: not frozen" ||
		got.JudgedInSpoke != "True/HubJudgementOutdated: judged in this spoke (cluster eu-west-1) by its own clock: the hub's judgement ran out at 2026-11-30T07:00:00Z and the hub has sent none since (its CommandLocks read not since the agent started); the windows, until and Locked are this spoke's, the counts and Drained the hub's as last seen" {
		t.Errorf("past until: %+v", got)
	}
}

// append2 gives a status without windows one empty window, for sum.
func append2(st locksv1.CommandLockStatus) locksv1.CommandLockStatus {
	if len(st.Windows) == 0 {
		st.Windows = []locksv1.FreezeWindowStatus{{}}
	}
	return st
}

func judgeSlack() time.Duration { return 5 * time.Second }

// TestLocalFreeze: the gate on letting a hub grant go in the spoke. The mirrors as stored (the
// hub's judgement, or the spoke's once the hub's ran out) or the spoke's own judgement now,
// whichever freezes; cluster scopes (the CommandLock's and a window's own) judged for the
// spoke's cluster, a selector by the labels the mirrors carry (fail safe when unknown); only
// mirrors count.
func TestLocalFreeze(t *testing.T) {
	const cluster = "eu-west-1"
	judged := time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC)
	opens := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC)
	mirror := func(cl *locksv1.CommandLock, labels string) locksv1.CommandLock {
		m := spoke.MirrorCommandLock(cl, cluster, judged)
		m.Status = *cl.Status.DeepCopy()
		if labels != "" {
			m.Annotations[locksv1.AnnotationMirrorClusterLabels] = labels
		}
		return *m
	}
	scoped := func(scope *locksv1.ClusterScope) locksv1.FreezeWindow {
		w := nightly()
		w.Clusters = scope
		return w
	}
	eu := &locksv1.ClusterScope{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}}
	apply := &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "r"},
		Spec: locksv1.LockRequestSpec{Command: "apply", Locks: []locksv1.LockTarget{{Repo: "acme/infra", Path: "vpc", Workspace: "default"}},
			Holder: locksv1.Holder{Owner: "alice"}}}
	const nightlyOpen = "Apply commands are frozen by window nightly of commandlock apply: Deny window in force until 2026-03-29T02:00:00Z"
	type got struct {
		Frozen  bool
		Message string
		Next    time.Time
	}
	for name, tc := range map[string]struct {
		cls  []locksv1.CommandLock
		now  time.Time
		skew time.Duration
		want got
	}{
		"before the window opens: goes": {cls: []locksv1.CommandLock{mirror(hubJudged(judged, nightly()), "")}, now: opens.Add(-time.Second),
			want: got{Next: opens}},
		"the window opened by the spoke's clock, the hub's status still says closed: held": {
			cls: []locksv1.CommandLock{mirror(hubJudged(judged, nightly()), "")}, now: opens.Add(time.Second),
			want: got{Frozen: true, Message: nightlyOpen, Next: time.Date(2026, 3, 29, 2, 0, 0, 0, time.UTC)}},
		"the hub's status says open (as last seen), the spoke's clock says closed since: held by the hub's, the stricter": {
			cls: []locksv1.CommandLock{mirror(hubJudged(opens.Add(time.Minute), nightly()), "")}, now: time.Date(2026, 3, 29, 2, 0, 1, 0, time.UTC),
			want: got{Frozen: true, Message: nightlyOpen, Next: time.Date(2026, 3, 30, 0, 0, 0, 0, time.UTC)}},
		"a CommandLock in the spoke that is no mirror freezes nothing": {
			cls: func() []locksv1.CommandLock {
				own := *hubJudged(judged, nightly())
				return []locksv1.CommandLock{own}
			}(), now: opens.Add(time.Second)},
		"a window for another cluster: goes": {
			cls: []locksv1.CommandLock{mirror(hubJudged(judged, scoped(&locksv1.ClusterScope{Names: []string{"us-east-1"}})), "")}, now: opens.Add(time.Second),
			want: got{Next: time.Date(2026, 3, 29, 2, 0, 0, 0, time.UTC)}},
		"a window for this cluster by name: held": {
			cls: []locksv1.CommandLock{mirror(hubJudged(judged, scoped(&locksv1.ClusterScope{Names: []string{cluster}})), "")}, now: opens.Add(time.Second),
			want: got{Frozen: true, Message: nightlyOpen, Next: time.Date(2026, 3, 29, 2, 0, 0, 0, time.UTC)}},
		"a window for the EU, this cluster labelled region=us by the hub: goes": {
			cls: []locksv1.CommandLock{mirror(hubJudged(judged, scoped(eu)), `{"region":"us"}`)}, now: opens.Add(time.Second),
			want: got{Next: time.Date(2026, 3, 29, 2, 0, 0, 0, time.UTC)}},
		"a window for the EU, this cluster labelled region=eu: held": {
			cls: []locksv1.CommandLock{mirror(hubJudged(judged, scoped(eu)), `{"region":"eu"}`)}, now: opens.Add(time.Second),
			want: got{Frozen: true, Message: nightlyOpen, Next: time.Date(2026, 3, 29, 2, 0, 0, 0, time.UTC)}},
		"a window for the EU, this cluster's labels unknown: held (fail safe)": {
			cls: []locksv1.CommandLock{mirror(hubJudged(judged, scoped(eu)), "")}, now: opens.Add(time.Second),
			want: got{Frozen: true, Message: nightlyOpen, Next: time.Date(2026, 3, 29, 2, 0, 0, 0, time.UTC)}},
		"a CommandLock scoped to another cluster: its windows hold nothing here": {
			cls: func() []locksv1.CommandLock {
				cl := hubJudged(judged, nightly())
				cl.Spec.Clusters = &locksv1.ClusterScope{Names: []string{"us-east-1"}}
				return []locksv1.CommandLock{mirror(cl, "")}
			}(), now: opens.Add(time.Second),
			want: got{Next: time.Date(2026, 3, 29, 2, 0, 0, 0, time.UTC)}},
		// The spoke's clock may be behind the hub's by the skew bound: a window that opens 1 s
		// from now by the spoke's clock may be open by the hub's already.
		"the window opens 1 s from now, the skew bound 2 s: held": {
			cls: []locksv1.CommandLock{mirror(hubJudged(judged, nightly()), "")}, now: opens.Add(-time.Second), skew: 2 * time.Second,
			want: got{Frozen: true, Message: nightlyOpen, Next: time.Date(2026, 3, 29, 2, 0, 2, 0, time.UTC)}},
		"the window opens 3 s from now, the skew bound 2 s: goes, judged again 2 s before it opens": {
			cls: []locksv1.CommandLock{mirror(hubJudged(judged, nightly()), "")}, now: opens.Add(-3 * time.Second), skew: 2 * time.Second,
			want: got{Next: opens.Add(-2 * time.Second)}},
		"the window closed 1 s ago by the spoke's clock, the skew bound 2 s: still held": {
			cls: []locksv1.CommandLock{mirror(hubJudged(judged, nightly()), "")}, now: time.Date(2026, 3, 29, 2, 0, 1, 0, time.UTC), skew: 2 * time.Second,
			want: got{Frozen: true, Message: nightlyOpen, Next: time.Date(2026, 3, 29, 2, 0, 2, 0, time.UTC)}},
		"a one-second window wholly inside the skew interval, judged at its opening: held": {
			cls: []locksv1.CommandLock{mirror(hubJudged(judged, second()), "")}, now: opens.Add(-time.Second), skew: 2 * time.Second,
			want: got{Frozen: true, Message: "Apply commands are frozen by window blip of commandlock apply: Deny window in force until 2026-03-29T01:00:01Z", Next: opens.Add(3 * time.Second)}},
		"a manual freeze's until passed 1 s ago by the spoke's clock, the skew bound 2 s: still held": {
			cls: []locksv1.CommandLock{mirror(manualUntil(opens), "")}, now: opens.Add(time.Second), skew: 2 * time.Second,
			want: got{Frozen: true, Message: "Apply commands are locked globally: weekend", Next: opens.Add(2 * time.Second)}},
	} {
		fr, frozen, next := spoke.LocalFreeze(tc.cls, apply, cluster, nil, tc.now, tc.skew)
		if diff := cmp.Diff(tc.want, got{Frozen: frozen, Message: fr.Message, Next: next}); diff != "" {
			t.Errorf("%s: (-want +got)\n%s", name, diff)
		}
	}
}

// second is a Deny window of one second, at 01:00:00Z each day.
func second() locksv1.FreezeWindow {
	return locksv1.FreezeWindow{Name: "blip", Schedule: "0 1 * * *", Duration: metav1.Duration{Duration: time.Second},
		TimeZone: "UTC", Action: locksv1.WindowDeny}
}

// manualUntil is the hub's CommandLock apply locked by hand until until, as the hub judged it an
// hour before.
func manualUntil(until time.Time) *locksv1.CommandLock {
	cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "apply", Generation: 1},
		Spec: locksv1.CommandLockSpec{Locked: true, Reason: "weekend", Until: &metav1.Time{Time: until}}}
	cl.Status.ObservedGeneration = 1
	queue.SetCondition(&cl.Status.Conditions, locksv1.ConditionLocked, metav1.ConditionTrue, locksv1.ReasonFrozen, "Apply commands are locked globally: weekend", 1, until.Add(-time.Hour))
	return cl
}

// TestFrozenStatus: a hub grant held in the spoke stays Pending, blocked by the freeze, and
// says why and that the hub keeps the grant; nothing of the grant (token, locks) shows.
func TestFrozenStatus(t *testing.T) {
	now := time.Date(2026, 3, 29, 1, 0, 1, 0, time.UTC)
	lr := &locksv1.LockRequest{Status: locksv1.LockRequestStatus{Phase: locksv1.PhasePending, QueuePosition: 1}}
	st := spoke.FrozenStatus(lr, "eu-west-1", queue.Freeze{Source: "commandlock/apply", Message: "Apply commands are frozen by window nightly of commandlock apply: Deny window in force"}, now)
	c := meta.FindStatusCondition(st.Conditions, locksv1.ConditionGranted)
	want := "False/FrozenInSpoke: granted by the hub, but not let go in this spoke (cluster eu-west-1) while its freezes, as it judges them by its own clock, hold it: Apply commands are frozen by window nightly of commandlock apply: Deny window in force; the hub keeps the grant, and this request goes once the freeze ends here"
	if c == nil || string(c.Status)+"/"+c.Reason+": "+c.Message != want {
		t.Errorf("Granted = %+v, want %s", c, want)
	}
	if st.Phase != locksv1.PhasePending || st.BlockedBy != "commandlock/apply" || st.FencingToken != 0 {
		t.Errorf("status = %+v", st)
	}
}

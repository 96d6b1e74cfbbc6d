package spoke

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/fleet/skew"
)

func TestPartitionAction(t *testing.T) {
	for _, tc := range []struct {
		name          string
		running, keep bool
		v             skew.Verdict
		want          Action
	}{
		{"a running holder before its deadline runs on", true, false, skew.Verdict{LetGo: true}, Show},
		{"a running holder too close to its deadline to be let go still runs on", true, false, skew.Verdict{Why: "min run"}, Show},
		{"a running holder at its deadline is stopped", true, false, skew.Verdict{Stop: true, Why: "x"}, Stop},
		{"a running keep-running holder at its deadline runs on", true, true, skew.Verdict{Stop: true, Why: "x"}, Show},
		{"a grant is shown while the rule lets it go", false, false, skew.Verdict{LetGo: true}, Show},
		{"a grant is held while the rule lets nothing go", false, false, skew.Verdict{Why: "min run"}, Hold},
		{"a grant is held when the holders must stop", false, false, skew.Verdict{Stop: true, Why: "x"}, Hold},
		{"a keep-running grant is shown while the rule lets it go", false, true, skew.Verdict{LetGo: true}, Show},
		{"a keep-running grant is held while the rule lets nothing go: it may be stale", false, true, skew.Verdict{Stop: true, Why: "x"}, Hold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PartitionAction(tc.running, tc.keep, tc.v); got != tc.want {
				t.Errorf("PartitionAction(%v, %v, %+v) = %v, want %v", tc.running, tc.keep, tc.v, got, tc.want)
			}
		})
	}
}

func TestEarliestExpiry(t *testing.T) {
	at := func(s int) *metav1.Time { return &metav1.Time{Time: time.Unix(int64(s), 0)} }
	lr := func(phase locksv1.LockRequestPhase, release bool, exp *metav1.Time) locksv1.LockRequest {
		return locksv1.LockRequest{Spec: locksv1.LockRequestSpec{Release: release}, Status: locksv1.LockRequestStatus{Phase: phase, ExpiresAt: exp}}
	}
	for _, tc := range []struct {
		name string
		in   []locksv1.LockRequest
		want time.Time
	}{
		{"none", nil, time.Time{}},
		{"a grant without an end", []locksv1.LockRequest{lr(locksv1.PhaseGranted, false, nil)}, time.Time{}},
		{"the earliest grant's", []locksv1.LockRequest{lr(locksv1.PhaseGranted, false, at(30)), lr(locksv1.PhaseGranted, false, at(20)), lr(locksv1.PhaseGranted, false, nil)}, time.Unix(20, 0)},
		{"waiters, released and finished requests do not count", []locksv1.LockRequest{lr(locksv1.PhasePending, false, at(5)), lr(locksv1.PhaseGranted, true, at(6)), lr(locksv1.PhaseExpired, false, at(7)), lr(locksv1.PhaseGranted, false, at(40))}, time.Unix(40, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EarliestExpiry(tc.in); !got.Equal(tc.want) {
				t.Errorf("EarliestExpiry = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLostStatus(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 2, 40, 0, time.UTC)
	renewed := time.Date(2026, 11, 28, 10, 2, 13, 0, time.UTC)
	spoke := &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "job-apply"}, Status: locksv1.LockRequestStatus{
		Phase: locksv1.PhaseGranted, FencingToken: 7, ObservedGeneration: 2,
		Conditions: []metav1.Condition{
			{Type: locksv1.ConditionGranted, Status: metav1.ConditionTrue, Reason: locksv1.ReasonGranted},
			{Type: locksv1.ConditionReady, Status: metav1.ConditionTrue, Reason: locksv1.ReasonGranted},
		},
	}}
	st := skew.State{Renewed: renewed}
	v := skew.Verdict{Stop: true, StopAt: renewed.Add(20 * time.Second), Why: "the hub has not answered"}
	got := LostStatus(spoke, "spoke-eu-west-1", st, v, now)
	if got.Phase != locksv1.PhaseReleased || got.FencingToken != 7 {
		t.Errorf("phase %s token %d, want Released with the token it ran on (7)", got.Phase, got.FencingToken)
	}
	for _, typ := range []string{locksv1.ConditionGranted, locksv1.ConditionStalled, locksv1.ConditionReady} {
		c := meta.FindStatusCondition(got.Conditions, typ)
		if c == nil || c.Reason != ReasonHubUnreachable {
			t.Fatalf("%s condition %+v, want reason %s", typ, c, ReasonHubUnreachable)
		}
		want := map[string]metav1.ConditionStatus{locksv1.ConditionGranted: metav1.ConditionFalse, locksv1.ConditionStalled: metav1.ConditionTrue, locksv1.ConditionReady: metav1.ConditionFalse}[typ]
		if c.Status != want {
			t.Errorf("%s = %s, want %s", typ, c.Status, want)
		}
		for _, part := range []string{"team-a/spoke-eu-west-1", "since 2026-11-28T10:02:13Z", "deadline 2026-11-28T10:02:33Z"} {
			if !strings.Contains(c.Message, part) {
				t.Errorf("%s message %q does not say %q", typ, c.Message, part)
			}
		}
	}
	if !LostToPartition(&locksv1.LockRequest{Status: got}) {
		t.Error("LostToPartition(LostStatus) = false")
	}
	if spoke.Status.Phase != locksv1.PhaseGranted {
		t.Error("LostStatus changed its argument")
	}
	// An agent restarted during a partition: no renewal answered, the verdict's reason is said.
	restarted := LostStatus(spoke, "spoke-eu-west-1", skew.State{}, skew.Verdict{Stop: true, Why: "the hub has not answered a renewal yet"}, now)
	if c := meta.FindStatusCondition(restarted.Conditions, locksv1.ConditionGranted); !strings.Contains(c.Message, "has not answered a renewal yet") {
		t.Errorf("restarted message %q", c.Message)
	}
}

// TestSkewStatus: a grant given back for a clock skew over --max-clock-skew is final (Released),
// reason ClockSkewTooLarge, says the bound, the flag, what happened to the workload and to fix
// the clock of the cluster; it stays so (LostToPartition).
func TestSkewStatus(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 3, 0, 0, time.UTC)
	waiting := &locksv1.LockRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "job-apply"},
		Status: locksv1.LockRequestStatus{Phase: locksv1.PhasePending, QueuePosition: 1, BlockedBy: "alice"}}
	running := waiting.DeepCopy()
	running.Status = locksv1.LockRequestStatus{Phase: locksv1.PhaseGranted, FencingToken: 7}
	for _, tc := range []struct {
		name string
		lr   *locksv1.LockRequest
		did  string
	}{{"a workload waiting", waiting, "its workload was not let go"}, {"a running holder", running, "its holder was stopped"}} {
		got := SkewStatus(tc.lr, "eu-west-1", 9812*time.Millisecond, 2*time.Second, now)
		if got.Phase != locksv1.PhaseReleased || got.QueuePosition != 0 || got.BlockedBy != "" || got.FinishedAt == nil {
			t.Errorf("%s: status %+v, want Released, out of the queue, finished", tc.name, got)
		}
		want := "the clock of cluster eu-west-1 is off the hub's by up to 9.812s (measured by the renewals of its hub Lease team-a/spoke-eu-west-1), over --max-clock-skew 2s: this spoke cannot tell when the hub hands its locks on, so " +
			tc.did + " and its hub grant was given back (released on the hub); fix the clock (NTP) on cluster eu-west-1, then request again"
		for typ, status := range map[string]metav1.ConditionStatus{locksv1.ConditionGranted: metav1.ConditionFalse, locksv1.ConditionStalled: metav1.ConditionTrue, locksv1.ConditionReady: metav1.ConditionFalse} {
			c := meta.FindStatusCondition(got.Conditions, typ)
			if c == nil || c.Status != status || c.Reason != ReasonClockSkewTooLarge || c.Message != want {
				t.Errorf("%s: %s condition %+v, want %s/%s: %s", tc.name, typ, c, status, ReasonClockSkewTooLarge, want)
			}
		}
		if !LostToPartition(&locksv1.LockRequest{Status: got}) {
			t.Errorf("%s: LostToPartition(SkewStatus) = false", tc.name)
		}
	}
}

func TestLostToPartition(t *testing.T) {
	cond := func(reason string) []metav1.Condition {
		return []metav1.Condition{{Type: locksv1.ConditionGranted, Status: metav1.ConditionFalse, Reason: reason}}
	}
	for _, tc := range []struct {
		name string
		st   locksv1.LockRequestStatus
		want bool
	}{
		{"released by the agent", locksv1.LockRequestStatus{Phase: locksv1.PhaseReleased, Conditions: cond(ReasonHubUnreachable)}, true},
		{"released by the hub", locksv1.LockRequestStatus{Phase: locksv1.PhaseReleased, Conditions: cond(locksv1.ReasonHolderLost)}, false},
		{"given back by the agent for its clock", locksv1.LockRequestStatus{Phase: locksv1.PhaseReleased, Conditions: cond(ReasonClockSkewTooLarge)}, true},
		{"not final", locksv1.LockRequestStatus{Phase: locksv1.PhasePending, Conditions: cond(ReasonHubUnreachable)}, false},
		{"no condition", locksv1.LockRequestStatus{Phase: locksv1.PhaseReleased}, false},
	} {
		if got := LostToPartition(&locksv1.LockRequest{Status: tc.st}); got != tc.want {
			t.Errorf("%s: LostToPartition = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHeldStatus(t *testing.T) {
	renewed := time.Date(2026, 11, 28, 10, 2, 13, 0, time.UTC)
	v := skew.Verdict{Why: "nothing is let go until it answers"}
	for _, tc := range []struct {
		name      string
		in        locksv1.LockRequestStatus
		st        skew.State
		wantPhase locksv1.LockRequestPhase
		wantBlock string
	}{
		{"a waiter stays pending", locksv1.LockRequestStatus{Phase: locksv1.PhasePending, QueuePosition: 1, BlockedBy: "alice"}, skew.State{Renewed: renewed}, locksv1.PhasePending, "the hub is unreachable since 2026-11-28T10:02:13Z; nothing is granted until it answers (nothing is let go until it answers)"},
		{"a request the hub has not answered yet is pending", locksv1.LockRequestStatus{}, skew.State{}, locksv1.PhasePending, "the hub is unreachable since the agent started; nothing is granted until it answers (nothing is let go until it answers)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := HeldStatus(&locksv1.LockRequest{Status: tc.in}, tc.st, v)
			want := *tc.in.DeepCopy()
			want.Phase, want.BlockedBy = tc.wantPhase, tc.wantBlock
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("HeldStatus (-want +got):\n%s", d)
			}
		})
	}
}

func TestDateRecorder(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/nodate" {
			w.Header()["Date"] = nil
		} else {
			w.Header().Set("Date", "Sat, 28 Nov 2026 10:02:13 GMT")
		}
	}))
	defer srv.Close()
	c := &http.Client{Transport: dateRecorder{next: http.DefaultTransport}}
	for _, tc := range []struct {
		path string
		ask  bool
		want time.Time
	}{
		{"/", true, time.Date(2026, 11, 28, 10, 2, 13, 0, time.UTC)},
		{"/", false, time.Time{}},
		{"/nodate", true, time.Time{}},
	} {
		d := &hubDate{}
		req, _ := http.NewRequest(http.MethodGet, srv.URL+tc.path, nil)
		if tc.ask {
			req = req.WithContext(context.WithValue(t.Context(), dateKey{}, d))
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if got := d.get(); !got.Equal(tc.want) {
			t.Errorf("%s (asked %v): Date %v, want %v", tc.path, tc.ask, got, tc.want)
		}
		if got := HubTimes(d.get()); len(got) != map[bool]int{true: 0, false: 1}[tc.want.IsZero()] {
			t.Errorf("HubTimes(%v) = %v", d.get(), got)
		}
	}
}

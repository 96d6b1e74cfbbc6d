package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/queue"
)

// TestWindowStatusAndWakeUps steps a fake clock through windows and checks, at each step, the
// CommandLock's Locked condition and how long the reconciler sleeps: exactly until the next
// transition (plus the millisecond that puts it past the edge), never a polling interval.
func TestWindowStatusAndWakeUps(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	friday := locksv1.FreezeWindow{Name: "friday", Schedule: "0 16 * * 5", Duration: metav1.Duration{Duration: 64 * time.Hour},
		TimeZone: "Europe/Berlin", Action: locksv1.WindowDeny}
	nightly := locksv1.FreezeWindow{Name: "nightly", Schedule: "0 22 * * *", Duration: metav1.Duration{Duration: 4 * time.Hour}, Action: locksv1.WindowDeny}
	maint := locksv1.FreezeWindow{Name: "maint", Schedule: "0 10 * * 6", Duration: metav1.Duration{Duration: 2 * time.Hour}, Action: locksv1.WindowAllow}
	type step struct {
		at         time.Time
		wantLocked string
		wantWake   time.Duration
	}
	cases := map[string]struct {
		windows []locksv1.FreezeWindow
		steps   []step
	}{
		"the Friday freeze across the spring DST change (2027-03-28)": {
			windows: []locksv1.FreezeWindow{friday},
			steps: []step{
				{at: time.Date(2027, time.March, 26, 15, 59, 0, 0, berlin), wantLocked: "False/Thawed", wantWake: time.Minute},
				{at: time.Date(2027, time.March, 26, 16, 0, 0, 0, berlin), wantLocked: "True/Window", wantWake: 63 * time.Hour},
				{at: time.Date(2027, time.March, 29, 7, 59, 59, 0, berlin), wantLocked: "True/Window", wantWake: time.Second},
				{at: time.Date(2027, time.March, 29, 8, 0, 0, 0, berlin), wantLocked: "False/Thawed", wantWake: 4*24*time.Hour + 8*time.Hour},
			},
		},
		"a nightly window across midnight (UTC)": {
			windows: []locksv1.FreezeWindow{nightly},
			steps: []step{
				{at: time.Date(2027, time.May, 4, 21, 0, 0, 0, time.UTC), wantLocked: "False/Thawed", wantWake: time.Hour},
				{at: time.Date(2027, time.May, 4, 23, 59, 0, 0, time.UTC), wantLocked: "True/Window", wantWake: 2*time.Hour + time.Minute},
				{at: time.Date(2027, time.May, 5, 1, 0, 0, 0, time.UTC), wantLocked: "True/Window", wantWake: time.Hour},
				{at: time.Date(2027, time.May, 5, 2, 0, 0, 0, time.UTC), wantLocked: "False/Thawed", wantWake: 20 * time.Hour},
			},
		},
		"an Allow window: frozen outside, open inside": {
			windows: []locksv1.FreezeWindow{maint},
			steps: []step{
				{at: time.Date(2027, time.May, 8, 9, 0, 0, 0, time.UTC), wantLocked: "True/Window", wantWake: time.Hour},
				{at: time.Date(2027, time.May, 8, 10, 0, 0, 0, time.UTC), wantLocked: "False/Thawed", wantWake: 2 * time.Hour},
				{at: time.Date(2027, time.May, 8, 12, 0, 0, 0, time.UTC), wantLocked: "True/Window", wantWake: 7*24*time.Hour - 2*time.Hour},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(tc.steps[0].at)
			cl := &locksv1.CommandLock{ObjectMeta: metav1.ObjectMeta{Name: "apply", Generation: 1}, Spec: locksv1.CommandLockSpec{Windows: tc.windows}}
			for _, s := range tc.steps {
				clk.SetTime(s.at)
				cl.Status = CommandLockStatus(cl, nil, queue.FreezeFlags{}, clk.Now(), 0)
				c := meta.FindStatusCondition(cl.Status.Conditions, locksv1.ConditionLocked)
				if got := string(c.Status) + "/" + c.Reason; got != s.wantLocked {
					t.Errorf("at %s: Locked = %s (%s), want %s", s.at, got, c.Message, s.wantLocked)
				}
				if got, want := nextWakeUp(cl, clk.Now()), s.wantWake+time.Millisecond; got != want {
					t.Errorf("at %s: wakes up after %s, want %s", s.at, got, want)
				}
			}
		})
	}
}

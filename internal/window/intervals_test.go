package window

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

func TestIntervals(t *testing.T) {
	b := berlin(t)
	in := func(mo time.Month, d, h, mi int) time.Time { return time.Date(2026, mo, d, h, mi, 0, 0, b) }
	utc := func(mo time.Month, d, h, mi int) time.Time { return time.Date(2026, mo, d, h, mi, 0, 0, time.UTC) }
	named := func(w locksv1.FreezeWindow, name string, action locksv1.WindowAction) locksv1.FreezeWindow {
		w.Name, w.Action = name, action
		return w
	}
	friday := named(win("0 16 * * 5", 64*time.Hour, "Europe/Berlin"), "friday", locksv1.WindowDeny)
	cases := map[string]struct {
		windows []locksv1.FreezeWindow
		now     time.Time
		want    []Interval
	}{
		"no windows: nothing to judge": {now: in(time.March, 18, 12, 0)},
		"a weekly freeze, 8 days ahead, then not judged": {
			windows: []locksv1.FreezeWindow{friday},
			now:     in(time.March, 18, 12, 0), // Wednesday
			want: []Interval{
				{From: in(time.March, 20, 16, 0), Until: in(time.March, 23, 8, 0), Window: "friday"},
				// The next opening (the 27th 16:00) is past the 8 days (the 26th 12:00).
				{From: in(time.March, 26, 12, 0), Window: NotJudgedPast},
			},
		},
		"in force: from now, until its close on the wall clock across the spring DST change": {
			windows: []locksv1.FreezeWindow{friday},
			now:     in(time.March, 28, 9, 30),
			want: []Interval{
				{From: in(time.March, 28, 9, 30), Until: utc(time.March, 30, 6, 0), Window: "friday"},
				// It opens before the 8 days are over and is followed to its close; past it
				// nothing is judged.
				{From: in(time.April, 3, 16, 0), Until: in(time.April, 6, 8, 0), Window: "friday"},
				{From: in(time.April, 6, 8, 0), Window: NotJudgedPast},
			},
		},
		"an Allow window: frozen outside it": {
			windows: []locksv1.FreezeWindow{named(win("0 22 * * 2", 4*time.Hour, "UTC"), "maint", locksv1.WindowAllow)},
			now:     utc(time.March, 17, 12, 0), // Tuesday
			want: []Interval{
				{From: utc(time.March, 17, 12, 0), Until: utc(time.March, 17, 22, 0), Window: "outside maint"},
				{From: utc(time.March, 18, 2, 0), Until: utc(time.March, 24, 22, 0), Window: "outside maint"},
				{From: utc(time.March, 25, 2, 0), Until: utc(time.March, 25, 12, 0), Window: "outside maint"},
				{From: utc(time.March, 25, 12, 0), Window: NotJudgedPast},
			},
		},
		"an invalid window freezes from now, for good": {
			windows: []locksv1.FreezeWindow{friday, named(win("0 16 * * 5", time.Hour, "Mars/Base"), "mars", locksv1.WindowAllow)},
			now:     in(time.March, 18, 12, 0),
			want:    []Interval{{From: in(time.March, 18, 12, 0), Window: "mars"}},
		},
		"overlapping windows merge; a fraction of a second is rounded": {
			windows: []locksv1.FreezeWindow{
				named(win("0 10 * * *", 2*time.Hour, "UTC"), "a", locksv1.WindowDeny),
				named(win("0 11 * * *", 2*time.Hour, "UTC"), "b", locksv1.WindowDeny),
			},
			now: utc(time.March, 18, 11, 30).Add(300 * time.Millisecond),
			want: func() []Interval {
				out := []Interval{{From: utc(time.March, 18, 11, 30), Until: utc(time.March, 18, 13, 0), Window: "a"}}
				for d := 19; d <= 26; d++ {
					out = append(out, Interval{From: utc(time.March, d, 10, 0), Until: utc(time.March, d, 13, 0), Window: "a"})
				}
				return append(out, Interval{From: utc(time.March, 26, 13, 0), Window: NotJudgedPast})
			}(),
		},
		"at most MaxIntervals: the rest is not judged": {
			windows: []locksv1.FreezeWindow{named(win("0 */6 * * *", time.Hour, "UTC"), "often", locksv1.WindowDeny)},
			now:     utc(time.March, 18, 0, 30),
			want: func() []Interval {
				out := []Interval{{From: utc(time.March, 18, 0, 30), Until: utc(time.March, 18, 1, 0), Window: "often"}}
				for i := 1; i < MaxIntervals-1; i++ {
					from := utc(time.March, 18, 0, 0).Add(time.Duration(6*i) * time.Hour)
					out = append(out, Interval{From: from, Until: from.Add(time.Hour), Window: "often"})
				}
				return append(out, Interval{From: out[len(out)-1].Until, Window: NotJudgedPast})
			}(),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Intervals(tc.windows, tc.now)
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
				t.Errorf("Intervals (-want +got):\n%s", diff)
			}
		})
	}
}

// TestIntervalsAgreeWithAt: every second judged frozen by At is in an interval, and every
// other second of the 8 days is not, for a window that opens on weekdays.
func TestIntervalsAgreeWithAt(t *testing.T) {
	w := win("30 7 * * 1-5", 90*time.Minute, "Europe/Berlin")
	w.Name = "standup"
	now := time.Date(2026, time.March, 27, 8, 0, 0, 0, time.UTC)
	s, err := Parse(&w)
	if err != nil {
		t.Fatal(err)
	}
	ivs := Intervals([]locksv1.FreezeWindow{w}, now)
	for at := now; at.Before(now.Add(AheadHorizon)); at = at.Add(7 * time.Minute) {
		inside := false
		for _, iv := range ivs {
			if !at.Before(iv.From) && (iv.Until.IsZero() || at.Before(iv.Until)) && iv.Window != NotJudgedPast {
				inside = true
			}
		}
		if got := s.At(at).Active; got != inside {
			t.Fatalf("at %s: At says active=%v, the intervals say %v (%v)", at, got, inside, ivs)
		}
	}
}

// TestIntervalsAcrossDaylightSaving: the intervals the policy reads agree with At, minute by
// minute over the 8 days, for windows whose openings the spring-forward gap skips (they open
// as the clocks jump) and whose openings the autumn's repeated hour shows twice (they open
// once), in zones that change by an hour and by half an hour.
func TestIntervalsAcrossDaylightSaving(t *testing.T) {
	for _, tc := range []struct {
		zone, schedule string
		d              time.Duration
		now            time.Time
	}{
		{"Europe/Berlin", "30 2 * * *", time.Hour, time.Date(2026, time.March, 26, 12, 0, 0, 0, time.UTC)},
		{"Europe/Berlin", "30 2 * * *", time.Hour, time.Date(2026, time.October, 22, 12, 0, 0, 0, time.UTC)},
		{"America/New_York", "15 2 * * 0", 3 * time.Hour, time.Date(2026, time.March, 5, 0, 0, 0, 0, time.UTC)},
		{"America/New_York", "30 1 * * *", 30 * time.Minute, time.Date(2026, time.October, 29, 0, 0, 0, 0, time.UTC)},
		{"Australia/Lord_Howe", "45 1 * * *", 20 * time.Minute, time.Date(2026, time.October, 1, 0, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.zone+" "+tc.now.Format("2006-01"), func(t *testing.T) {
			w := win(tc.schedule, tc.d, tc.zone)
			w.Name = "night"
			s, err := Parse(&w)
			if err != nil {
				t.Fatal(err)
			}
			ivs := Intervals([]locksv1.FreezeWindow{w}, tc.now)
			if len(ivs) == 0 {
				t.Fatal("no intervals")
			}
			for at := tc.now; at.Before(tc.now.Add(AheadHorizon)); at = at.Add(time.Minute) {
				inside := false
				for _, iv := range ivs {
					if !at.Before(iv.From) && (iv.Until.IsZero() || at.Before(iv.Until)) && iv.Window != NotJudgedPast {
						inside = true
					}
				}
				if got := s.At(at).Active; got != inside {
					t.Fatalf("at %s: At says active=%v, the intervals say %v (%v)", at, got, inside, ivs)
				}
			}
		})
	}
}

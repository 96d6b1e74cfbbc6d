package window

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

func berlin(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func win(schedule string, d time.Duration, zone string) locksv1.FreezeWindow {
	return locksv1.FreezeWindow{Name: "w", Schedule: schedule, Duration: metav1.Duration{Duration: d}, TimeZone: zone, Action: locksv1.WindowDeny}
}

func TestAt(t *testing.T) {
	b := berlin(t)
	in := func(y int, mo time.Month, d, h, mi int) time.Time { return time.Date(y, mo, d, h, mi, 0, 0, b) }
	utc := func(y int, mo time.Month, d, h, mi int) time.Time { return time.Date(y, mo, d, h, mi, 0, 0, time.UTC) }
	friday := win("0 16 * * 5", 64*time.Hour, "Europe/Berlin")
	cases := map[string]struct {
		tc   locksv1.FreezeWindow
		now  time.Time
		want State
	}{
		"the Friday freeze before it opens": {
			tc: friday, now: in(2026, time.March, 20, 15, 59),
			want: State{Next: in(2026, time.March, 20, 16, 0)},
		},
		"the Friday freeze at its opening": {
			tc: friday, now: in(2026, time.March, 20, 16, 0),
			want: State{Active: true, Next: in(2026, time.March, 23, 8, 0)},
		},
		"the Friday freeze on Sunday": {
			tc: friday, now: in(2026, time.March, 22, 12, 0),
			want: State{Active: true, Next: in(2026, time.March, 23, 8, 0)},
		},
		"the Friday freeze at its close": {
			tc: friday, now: in(2026, time.March, 23, 8, 0),
			want: State{Next: in(2026, time.March, 27, 16, 0)},
		},
		// Clocks go forward on the last Sunday of March (2026-03-29, 02:00 CET -> 03:00 CEST):
		// the freeze still ends at 08:00 on the wall clock, which is 06:00 UTC, not 07:00.
		"the Friday freeze across the spring DST change ends Monday 08:00 local": {
			tc: friday, now: in(2026, time.March, 29, 12, 0),
			want: State{Active: true, Next: utc(2026, time.March, 30, 6, 0)},
		},
		"the Friday freeze is over at 08:00 CEST after the DST change": {
			tc: friday, now: utc(2026, time.March, 30, 6, 0),
			want: State{Next: in(2026, time.April, 3, 16, 0)},
		},
		"the Friday freeze still in force at 07:59 CEST after the DST change": {
			tc: friday, now: utc(2026, time.March, 30, 5, 59),
			want: State{Active: true, Next: utc(2026, time.March, 30, 6, 0)},
		},
		"a nightly window across midnight, before midnight": {
			tc: win("0 22 * * *", 4*time.Hour, "UTC"), now: utc(2026, time.May, 4, 23, 30),
			want: State{Active: true, Next: utc(2026, time.May, 5, 2, 0)},
		},
		"a nightly window across midnight, after midnight": {
			tc: win("0 22 * * *", 4*time.Hour, "UTC"), now: utc(2026, time.May, 5, 1, 59),
			want: State{Active: true, Next: utc(2026, time.May, 5, 2, 0)},
		},
		"a nightly window across midnight, closed in the morning": {
			tc: win("0 22 * * *", 4*time.Hour, ""), now: utc(2026, time.May, 5, 2, 0),
			want: State{Next: utc(2026, time.May, 5, 22, 0)},
		},
		"openings that overlap for good are followed up to the horizon (192h)": {
			tc: win("*/10 * * * *", 15*time.Minute, "UTC"), now: utc(2026, time.May, 5, 9, 3),
			want: State{Active: true, Next: utc(2026, time.May, 13, 9, 15)},
		},
		"openings that overlap keep the window open until the last closes": {
			tc: win("0 9-11 * * *", 90*time.Minute, "UTC"), now: utc(2026, time.May, 5, 9, 3),
			want: State{Active: true, Next: utc(2026, time.May, 5, 12, 30)},
		},
		"a minute schedule with 20 s": {
			tc: win("* * * * *", 20*time.Second, "UTC"), now: utc(2026, time.May, 5, 9, 3).Add(25 * time.Second),
			want: State{Next: utc(2026, time.May, 5, 9, 4)},
		},
		"a schedule in a zone: 09:00 Berlin is 08:00 UTC in winter": {
			tc: win("0 9 * * *", time.Hour, "Europe/Berlin"), now: utc(2026, time.January, 5, 8, 30),
			want: State{Active: true, Next: utc(2026, time.January, 5, 9, 0)},
		},
		"a schedule that names no real day never opens": {
			tc: win("0 0 30 2 *", time.Hour, "UTC"), now: utc(2026, time.May, 5, 9, 0),
			want: State{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := Parse(&tc.tc)
			if err != nil {
				t.Fatal(err)
			}
			got := s.At(tc.now)
			if got.Active != tc.want.Active || !got.Next.Equal(tc.want.Next) {
				t.Errorf("At(%s) = %+v (next %s), want %+v (next %s)", tc.now, got, got.Next.UTC(), tc.want, tc.want.Next.UTC())
			}
		})
	}
}

func TestAtOverlapCap(t *testing.T) {
	// Every minute for 168h: the judgement stops early and comes back, never loops for long.
	w := win("* * * * *", 168*time.Hour, "UTC")
	s, err := Parse(&w)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, time.May, 5, 9, 0, 30, 0, time.UTC)
	got := s.At(now)
	if !got.Active || !got.Next.After(now) {
		t.Errorf("At = %+v, want active with a next transition after now", got)
	}
}

func TestParseInvalid(t *testing.T) {
	cases := map[string]struct {
		tc   locksv1.FreezeWindow
		want string
	}{
		"unknown zone":          {tc: win("0 16 * * 5", time.Hour, "Mars/Olympus"), want: `window w: unknown time zone "Mars/Olympus"`},
		"unparsable cron":       {tc: win("0 25 * * 5", time.Hour, "UTC"), want: `window w: schedule "0 25 * * 5"`},
		"@every names no times": {tc: win("@every 1h", time.Hour, "UTC"), want: "names no fixed times"},
		"zero duration":         {tc: win("0 16 * * 5", 0, "UTC"), want: "must be positive"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(&tc.tc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	now := time.Date(2026, time.May, 5, 9, 0, 0, 0, time.UTC)
	deny := win("0 8 * * *", 2*time.Hour, "UTC")
	deny.Name = "morning"
	allow := win("0 12 * * *", time.Hour, "UTC")
	allow.Name, allow.Action, allow.Repos = "noon", locksv1.WindowAllow, []string{"acme/*"}
	bad := win("0 8 * * *", time.Hour, "Nowhere/City")
	bad.Name = "bad"
	got, next := Judge([]locksv1.FreezeWindow{deny, allow, bad}, now)
	ts := func(h int) *metav1.Time {
		t := metav1.NewTime(time.Date(2026, time.May, 5, h, 0, 0, 0, time.UTC))
		return &t
	}
	want := []locksv1.FreezeWindowStatus{
		{Name: "morning", Action: locksv1.WindowDeny, State: locksv1.WindowOpen, NextTransition: ts(10)},
		{Name: "noon", Action: locksv1.WindowAllow, State: locksv1.WindowClosed, NextTransition: ts(12), WindowScope: locksv1.WindowScope{Repos: []string{"acme/*"}}},
		{Name: "bad", Action: locksv1.WindowDeny, Invalid: `window bad: unknown time zone "Nowhere/City"`},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Judge (-want +got):\n%s", diff)
	}
	if !next.Equal(ts(10).Time) {
		t.Errorf("next = %s, want 10:00", next)
	}
}

package window

import (
	"archive/zip"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// TestDaylightSaving: Europe/Berlin in 2026. Spring: 2026-03-29 at 01:00 UTC the wall clock
// goes from 01:59:59 CET to 03:00 CEST (02:xx is skipped). Autumn: 2026-10-25 at 01:00 UTC it
// goes from 02:59:59 CEST back to 02:00 CET (02:xx is shown twice).
func TestDaylightSaving(t *testing.T) {
	utc := func(mo time.Month, d, h, mi int) time.Time { return time.Date(2026, mo, d, h, mi, 0, 0, time.UTC) }
	spring := utc(time.March, 29, 1, 0)
	cases := map[string]struct {
		schedule string
		duration time.Duration
		now      time.Time
		want     State
	}{
		// The three: openings in the skipped hour open as it ends, and last their
		// duration on the wall clock from there (03:00 CEST + 2h = 05:00 CEST = 03:00 UTC).
		"a daily 02:00 opens at 03:00 CEST, the first instant after the gap": {
			schedule: "0 2 * * *", duration: 2 * time.Hour, now: spring.Add(-time.Second),
			want: State{Next: spring},
		},
		"a daily 02:00 for 2h is in force at 03:30 CEST": {
			schedule: "0 2 * * *", duration: 2 * time.Hour, now: utc(time.March, 29, 1, 30),
			want: State{Active: true, Next: utc(time.March, 29, 3, 0)},
		},
		"a Sunday 02:30 is not skipped that Sunday": {
			schedule: "30 2 * * 0", duration: time.Hour, now: utc(time.March, 29, 1, 30),
			want: State{Active: true, Next: utc(time.March, 29, 2, 0)},
		},
		"a Sunday 02:30 opens that Sunday, not the next": {
			schedule: "30 2 * * 0", duration: time.Hour, now: utc(time.March, 28, 12, 0),
			want: State{Next: spring},
		},
		"March 29th 02:00 opens in 2026, not 2027": {
			schedule: "0 2 29 3 *", duration: 2 * time.Hour, now: utc(time.January, 1, 0, 0),
			want: State{Next: spring},
		},
		"March 29th 02:00 in force at 03:30 CEST": {
			schedule: "0 2 29 3 *", duration: 2 * time.Hour, now: utc(time.March, 29, 1, 30),
			want: State{Active: true, Next: utc(time.March, 29, 3, 0)},
		},
		"a window wholly inside the gap still lasts its duration after it": {
			schedule: "30 2 * * *", duration: 20 * time.Minute, now: spring.Add(10 * time.Minute),
			want: State{Active: true, Next: spring.Add(20 * time.Minute)},
		},
		// An end the clock skips closes as the clock jumps over it: 01:30 CET + 1h = 02:30,
		// passed at 03:00 CEST, after 30 minutes.
		"an end in the gap closes at the first instant after it": {
			schedule: "30 1 * * *", duration: time.Hour, now: utc(time.March, 29, 0, 45),
			want: State{Active: true, Next: spring},
		},
		"after an end in the gap": {
			schedule: "30 1 * * *", duration: time.Hour, now: spring,
			want: State{Next: utc(time.March, 29, 23, 30)},
		},
		// Wildcard schedules follow the running clock: nothing opens for the skipped 02:30.
		"an hourly :30 skips the skipped hour": {
			schedule: "30 * * * *", duration: 20 * time.Minute, now: utc(time.March, 29, 0, 59),
			want: State{Next: utc(time.March, 29, 1, 30)},
		},
		"*/30 in the hour field's place skips it too": {
			schedule: "*/30 2 * * *", duration: 10 * time.Minute, now: utc(time.March, 28, 23, 0),
			want: State{Next: utc(time.March, 30, 0, 0)},
		},
		// Autumn: a fixed time in the repeated hour opens once, at its first occurrence
		// (02:30 CEST = 00:30 UTC); its 20 minutes end at 02:50 CEST.
		"a daily 02:30 opens at the first 02:30": {
			schedule: "30 2 * * *", duration: 20 * time.Minute, now: utc(time.October, 25, 0, 40),
			want: State{Active: true, Next: utc(time.October, 25, 0, 50)},
		},
		"a daily 02:30 does not open again at the second 02:30": {
			schedule: "30 2 * * *", duration: 20 * time.Minute, now: utc(time.October, 25, 0, 50),
			want: State{Next: utc(time.October, 26, 1, 30)},
		},
		"a daily 02:30 is not in force in the second 02:30": {
			schedule: "30 2 * * *", duration: 20 * time.Minute, now: utc(time.October, 25, 1, 40),
			want: State{Next: utc(time.October, 26, 1, 30)},
		},
		"an hourly :30 opens in both 02:30s": {
			schedule: "30 * * * *", duration: 20 * time.Minute, now: utc(time.October, 25, 1, 40),
			want: State{Active: true, Next: utc(time.October, 25, 1, 50)},
		},
		"an hourly :30, after the first 02:30": {
			schedule: "30 * * * *", duration: 20 * time.Minute, now: utc(time.October, 25, 0, 50),
			want: State{Next: utc(time.October, 25, 1, 30)},
		},
		// Durations count on the wall clock: 00:00 CEST + 4h is 04:00 CET, five hours later.
		"four hours from midnight last five that night": {
			schedule: "0 0 * * *", duration: 4 * time.Hour, now: utc(time.October, 25, 2, 30),
			want: State{Active: true, Next: utc(time.October, 25, 3, 0)},
		},
		// An end in the repeated hour is its first occurrence after the opening.
		"an end in the repeated hour is its first occurrence": {
			schedule: "0 1 * * *", duration: 90 * time.Minute, now: utc(time.October, 25, 0, 0),
			want: State{Active: true, Next: utc(time.October, 25, 0, 30)},
		},
		// And the four hours from midnight in spring last three.
		"four hours from midnight last three in spring": {
			schedule: "0 0 * * *", duration: 4 * time.Hour, now: utc(time.March, 29, 1, 30),
			want: State{Active: true, Next: utc(time.March, 29, 2, 0)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := win(tc.schedule, tc.duration, "Europe/Berlin")
			s, err := Parse(&w)
			if err != nil {
				t.Fatal(err)
			}
			got := s.At(tc.now)
			if got.Active != tc.want.Active || !got.Next.Equal(tc.want.Next) {
				t.Errorf("At(%s) = active %v, next %s; want active %v, next %s", tc.now.UTC(), got.Active, got.Next.UTC(), tc.want.Active, tc.want.Next.UTC())
			}
		})
	}
}

// TestJudgeDaylightSaving: Judge, which the controller writes into status and wakes up by, and
// which the freeze check and the plugin read, reports an Allow window opened by the gap as open
// (and a Deny one the same).
func TestJudgeDaylightSaving(t *testing.T) {
	now := time.Date(2026, time.March, 29, 1, 30, 0, 0, time.UTC) // 03:30 CEST
	allow := win("0 2 * * *", 2*time.Hour, "Europe/Berlin")
	allow.Name, allow.Action = "maintenance", locksv1.WindowAllow
	deny := win("0 2 * * *", 2*time.Hour, "Europe/Berlin")
	deny.Name = "nightly"
	got, next := Judge([]locksv1.FreezeWindow{allow, deny}, now)
	closes := time.Date(2026, time.March, 29, 3, 0, 0, 0, time.UTC)
	for _, st := range got {
		if st.State != locksv1.WindowOpen || st.NextTransition == nil || !st.NextTransition.Equal(&metav1.Time{Time: closes}) {
			t.Errorf("%s (%s): %s until %v, want Open until %s", st.Name, st.Action, st.State, st.NextTransition, closes)
		}
	}
	if !next.Equal(closes) {
		t.Errorf("next = %s, want %s", next, closes)
	}
}

// zoneTransition is one change of a zone's offset.
type zoneTransition struct {
	at          time.Time
	before, off time.Duration // the offsets before and after
}

// transitions are loc's offset changes in [from, to).
func transitions(loc *time.Location, from, to time.Time) []zoneTransition {
	var out []zoneTransition
	for t := from; t.Before(to); {
		l := t.In(loc)
		_, off := l.Zone()
		_, end := l.ZoneBounds()
		if end.IsZero() || !end.Before(to) {
			break
		}
		_, next := end.In(loc).Zone()
		if next != off {
			out = append(out, zoneTransition{at: end, before: time.Duration(off) * time.Second, off: time.Duration(next) * time.Second})
		}
		t = end
	}
	return out
}

// zones loads every zone of the Go toolchain's tzdata ($GOROOT/lib/time/zoneinfo.zip, what
// time/tzdata embeds in the manager), by name.
func zones(t *testing.T) map[string]*time.Location {
	t.Helper()
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	path := filepath.Join(strings.TrimSpace(string(goroot)), "lib", "time", "zoneinfo.zip")
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatalf("the toolchain's zone database: %v", err)
	}
	defer zr.Close()
	out := map[string]*time.Location{}
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		loc, err := time.LoadLocationFromTZData(f.Name, b)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		out[f.Name] = loc
	}
	return out
}

// TestEveryZone: in every zone of the tzdata, for every change of the clock in 2026 and 2027, a
// window that opens at a wall time the change skips opens at the first instant after the gap and
// lasts its duration from there; a fixed-time window at a wall time the change repeats opens once,
// at the first of them, and an hourly one at both. The gaps and repeats are found by scanning each
// zone's offsets, from a fixed now.
func TestEveryZone(t *testing.T) {
	now := time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)
	until := now.AddDate(2, 0, 0)
	gaps, repeats := 0, 0
	for name, loc := range zones(t) {
		for _, tr := range transitions(loc, now, until) {
			shift := tr.off - tr.before
			if shift > 0 {
				gaps++
				t.Run(fmt.Sprintf("%s gap at %s", name, tr.at.Format(time.RFC3339)), func(t *testing.T) { checkGap(t, loc, tr) })
			} else {
				repeats++
				t.Run(fmt.Sprintf("%s repeat at %s", name, tr.at.Format(time.RFC3339)), func(t *testing.T) { checkRepeat(t, loc, tr) })
			}
		}
	}
	t.Logf("%d gaps and %d repeated hours in 2026 and 2027", gaps, repeats)
	if gaps < 100 || repeats < 100 {
		t.Errorf("found %d gaps and %d repeats: the scan does not see the zones' changes", gaps, repeats)
	}
}

// judge is At for a window in loc.
func judge(t *testing.T, loc *time.Location, schedule string, d time.Duration, now time.Time) State {
	t.Helper()
	w := win(schedule, d, loc.String())
	s, err := parseIn(&w, loc)
	if err != nil {
		t.Fatal(err)
	}
	return s.At(now)
}

func expect(t *testing.T, what string, got State, active bool, next time.Time) {
	t.Helper()
	if got.Active != active || !got.Next.Equal(next) {
		t.Errorf("%s: active %v, next %s; want active %v, next %s", what, got.Active, got.Next.UTC(), active, next.UTC())
	}
}

func checkGap(t *testing.T, loc *time.Location, tr zoneTransition) {
	// The middle of the skipped wall times, on a whole minute.
	skipped := tr.at.Add(tr.before).UTC()
	c := skipped.Add((tr.off - tr.before) / 2).Truncate(time.Minute)
	yearly := fmt.Sprintf("%d %d %d %d *", c.Minute(), c.Hour(), c.Day(), int(c.Month()))
	daily := fmt.Sprintf("%d %d * * *", c.Minute(), c.Hour())
	// The end, two hours on the wall clock after the wall time that follows the gap.
	end := tr.at.Add(2 * time.Hour)
	if more := transitions(loc, tr.at.Add(time.Second), end.Add(time.Second)); len(more) > 0 {
		t.Skipf("another change within two hours: %v", more)
	}
	expect(t, yearly+" a second before the gap", judge(t, loc, yearly, 2*time.Hour, tr.at.Add(-time.Second)), false, tr.at)
	expect(t, yearly+" a month before", judge(t, loc, yearly, 2*time.Hour, tr.at.AddDate(0, -1, 0)), false, tr.at)
	expect(t, yearly+" as the gap ends", judge(t, loc, yearly, 2*time.Hour, tr.at), true, end)
	expect(t, yearly+" a minute into it", judge(t, loc, yearly, 2*time.Hour, tr.at.Add(time.Minute)), true, end)
	if got := judge(t, loc, yearly, 2*time.Hour, end); got.Active || !got.Next.After(tr.at.AddDate(0, 11, 0)) {
		t.Errorf("%s as it ends: active %v, next %s; want closed until next year", yearly, got.Active, got.Next.UTC())
	}
	if got := judge(t, loc, daily, 30*time.Minute, tr.at.Add(time.Minute)); !got.Active {
		t.Errorf("%s: not in force a minute after the gap", daily)
	}
}

func checkRepeat(t *testing.T, loc *time.Location, tr zoneTransition) {
	// The middle of the repeated wall times, on a whole minute; its first and second occurrence.
	repeated := tr.at.Add(tr.off).UTC()
	c := repeated.Add((tr.before - tr.off) / 2).Truncate(time.Minute)
	first, second := c.Add(-tr.before), c.Add(-tr.off)
	yearly := fmt.Sprintf("%d %d %d %d *", c.Minute(), c.Hour(), c.Day(), int(c.Month()))
	hourly := fmt.Sprintf("%d * * * *", c.Minute())
	const d = 10 * time.Minute
	expect(t, yearly+" before the first", judge(t, loc, yearly, d, first.Add(-time.Second)), false, first)
	expect(t, yearly+" in the first", judge(t, loc, yearly, d, first.Add(time.Minute)), true, first.Add(d))
	got := judge(t, loc, yearly, d, second.Add(time.Minute))
	if got.Active || !got.Next.After(first.AddDate(0, 11, 0)) {
		t.Errorf("%s in the second: active %v, next %s; want closed until next year", yearly, got.Active, got.Next.UTC())
	}
	expect(t, hourly+" in the second", judge(t, loc, hourly, d, second.Add(time.Minute)), true, second.Add(d))
}

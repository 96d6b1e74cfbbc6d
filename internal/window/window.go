// Package window judges CommandLock freeze windows: whether a window (a cron schedule, a duration
// on its zone's wall clock, a time zone) is in force at a given time, and when it next opens or
// closes. Pure: the time is an argument, so every rule is tested by tables with any clock.
//
// Schedules name wall-clock times, and a zone's wall clock skips an hour in spring and repeats
// one in autumn. A window follows its clock as cronie's cron daemon runs jobs (src/cron.c, the
// "DST begins" and "DST ends" cases; cron(8): "Local time changes of less than three hours ...
// are handled specially"):
//
//   - A fixed-time schedule (neither its minute nor its hour field starts with '*') opens at
//     each wall time it names once: an opening whose wall time the clock skips opens at the
//     first instant after the gap (cronie runs a skipped fixed-time job at once), and one whose
//     wall time the clock shows twice opens at the first of them only (cronie does not run a
//     fixed-time job again when the clock goes back).
//   - A wildcard schedule ('*' or '*/N' in its minute or hour field, and @hourly) follows the
//     clock as it runs: it opens at each instant the clock shows one of its times (both of a
//     repeated hour), and not at times the clock skips (cronie runs wildcard jobs for the
//     current minute only).
//
// A window lasts its duration on the wall clock from the instant it opened, and closes when the
// clock first shows that end after the opening; an end the clock skips closes at the first
// instant after the gap.
package window

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// maxSteps bounds the schedule steps one judgement takes (a window of 168h that opens every
// minute takes about 10,000). Past it the judgement stops early and its next transition comes
// sooner than the real one: the controller then simply judges again.
const maxSteps = 20000

// horizon is how far ahead a window whose openings overlap is followed.
const horizon = 192 * time.Hour

// slack covers the difference between a wall-clock duration and elapsed time across
// daylight-saving changes (at most 2h anywhere): starts are searched that far further back.
const slack = 3 * time.Hour

// State is a window as judged at one time.
type State struct {
	// Active is true while the window is in force.
	Active bool
	// Next is when the window next opens (not active) or closes (active); zero when it never
	// will (a schedule that names no real date, e.g. February 30th).
	Next time.Time
	// Invalid says why the window cannot be judged; empty when it can. An invalid window is
	// reported, never silently ignored: the freeze check treats it as freezing its scope.
	Invalid string
}

// Schedule is a parsed window: its cron schedule, its zone and its duration.
type Schedule struct {
	// spec iterates wall-clock times: its location is UTC, and a time.Time in UTC stands for
	// the wall clock of loc that reads the same (a civil time).
	spec     *cron.SpecSchedule
	loc      *time.Location
	duration time.Duration
	// wild is a wildcard schedule (cronie's MIN_STAR or HR_STAR): it follows the clock as it
	// runs through skipped and repeated hours instead of opening once per wall time.
	wild bool
}

var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse reads a window's schedule, zone and duration, or says what is wrong with them.
func Parse(w *locksv1.FreezeWindow) (*Schedule, error) {
	zone := w.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("window %s: unknown time zone %q", w.Name, w.TimeZone)
	}
	return parseIn(w, loc)
}

// parseIn is Parse in a zone already loaded.
func parseIn(w *locksv1.FreezeWindow, loc *time.Location) (*Schedule, error) {
	sched, err := parser.Parse(w.Schedule)
	if err != nil {
		return nil, fmt.Errorf("window %s: schedule %q: %w", w.Name, w.Schedule, err)
	}
	spec, ok := sched.(*cron.SpecSchedule)
	if !ok {
		// @every counts from whenever it was parsed: it names no times of its own.
		return nil, fmt.Errorf("window %s: schedule %q names no fixed times (use a cron expression, not @every)", w.Name, w.Schedule)
	}
	if w.Duration.Duration <= 0 {
		return nil, fmt.Errorf("window %s: duration %s must be positive", w.Name, w.Duration.Duration)
	}
	spec.Location = time.UTC
	return &Schedule{spec: spec, loc: loc, duration: w.Duration.Duration, wild: wildcard(w.Schedule)}, nil
}

// wildcard reports whether schedule is one cronie calls a wildcard job: its minute or its hour
// field starts with '*' ('?' is robfig/cron's other spelling of it), or it is @hourly.
func wildcard(schedule string) bool {
	f := strings.Fields(schedule)
	if len(f) > 0 && (strings.HasPrefix(f[0], "TZ=") || strings.HasPrefix(f[0], "CRON_TZ=")) {
		f = f[1:]
	}
	if len(f) == 1 {
		return f[0] == "@hourly"
	}
	for _, field := range f[:min(2, len(f))] {
		if strings.HasPrefix(field, "*") || strings.HasPrefix(field, "?") {
			return true
		}
	}
	return false
}

// civil is the wall clock of loc at t, as a time in UTC that reads the same.
func (s *Schedule) civil(t time.Time) time.Time {
	l := t.In(s.loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// instants are the instants at which loc's wall clock reads c, in order: one, two in a repeated
// hour, none in a skipped one; then jump is the instant the clock skips over c.
func (s *Schedule) instants(c time.Time) (at []time.Time, jump time.Time) {
	// Every zone period from two days before c (read as UTC) to two days after it: an instant
	// whose wall clock reads c is c minus the offset of the period it falls in.
	t := c.Add(-48 * time.Hour)
	for range 16 {
		l := t.In(s.loc)
		_, off := l.Zone()
		start, end := l.ZoneBounds()
		cand := c.Add(-time.Duration(off) * time.Second)
		if (start.IsZero() || !cand.Before(start)) && (end.IsZero() || cand.Before(end)) {
			if len(at) == 0 || !at[len(at)-1].Equal(cand) {
				at = append(at, cand)
			}
		} else if len(at) == 0 && jump.IsZero() && !start.IsZero() && start.Add(time.Duration(off)*time.Second).After(c) {
			// The first period whose wall clock starts past c, with none that read c before it:
			// the clock jumped over c as this period began.
			jump = start
		}
		if end.IsZero() || end.After(c.Add(48*time.Hour)) {
			break
		}
		t = end
	}
	if len(at) > 0 {
		jump = time.Time{}
	}
	return at, jump
}

// openingsAt are the instants an opening at civil time c opens, by the rules of the package
// comment.
func (s *Schedule) openingsAt(c time.Time) []time.Time {
	at, jump := s.instants(c)
	switch {
	case s.wild:
		return at
	case len(at) == 0 && !jump.IsZero():
		// guard:window-gap-opens-after
		return []time.Time{jump}
	case len(at) > 1:
		// guard:window-repeat-opens-once
		return at[:1]
	}
	return at
}

// spread is how far the zone's offset moves within slack of t: how far out of order the
// openings of consecutive wall times can come there.
func (s *Schedule) spread(t time.Time) time.Duration {
	lo, hi := 0, 0
	first := true
	for u := t.Add(-slack); !u.After(t.Add(slack)); {
		l := u.In(s.loc)
		_, off := l.Zone()
		if first || off < lo {
			lo = off
		}
		if first || off > hi {
			hi = off
		}
		first = false
		_, end := l.ZoneBounds()
		if end.IsZero() {
			break
		}
		u = end
	}
	return time.Duration(hi-lo) * time.Second
}

// nextOpening is the first opening after t (zero when there is none), counting steps.
func (s *Schedule) nextOpening(t time.Time, steps *int) time.Time {
	var best time.Time
	from := s.civil(t).Add(-s.spread(t) - time.Second)
	for c := s.spec.Next(from); !c.IsZero() && *steps < maxSteps; c = s.spec.Next(c) {
		*steps++
		// Wall times past the best opening by more than the offset moves there open after it.
		if !best.IsZero() && c.After(s.civil(best).Add(s.spread(best))) {
			break
		}
		for _, o := range s.openingsAt(c) {
			if o.After(t) && (best.IsZero() || o.Before(best)) {
				best = o
			}
		}
	}
	return best
}

// end is when an opening at start closes: start plus the duration on the zone's wall clock, so
// Friday 16:00 plus 64h is Monday 08:00 even when the clocks changed over the weekend; the first
// time the clock shows it after start (in a repeated hour), or the first instant after the gap
// when the clock skips it.
func (s *Schedule) end(start time.Time) time.Time {
	c := s.civil(start).Add(s.duration)
	at, jump := s.instants(c)
	for _, t := range at {
		if t.After(start) {
			return t
		}
	}
	if jump.After(start) {
		return jump
	}
	return start.Add(s.duration)
}

// At judges the window at now.
func (s *Schedule) At(now time.Time) State {
	// The latest opening still open at now, if any.
	var closes time.Time
	steps := 0
	openings := []time.Time{}
	for o := s.nextOpening(now.Add(-s.duration-slack), &steps); !o.IsZero() && !o.After(now) && steps < maxSteps; o = s.nextOpening(o, &steps) {
		openings = append(openings, o)
	}
	for _, o := range openings {
		if e := s.end(o); e.After(now) && e.After(closes) {
			closes = e
		}
	}
	if closes.IsZero() {
		return State{Next: s.nextOpening(now, &steps)}
	}
	// Openings before it closes keep it open: it closes when the last of them does. Openings
	// that overlap for good are followed up to the horizon: the close found by then is reported
	// as the next transition, where the window is simply judged again.
	for o := s.nextOpening(now, &steps); !o.IsZero() && !o.After(closes) && o.Before(now.Add(horizon)) && steps < maxSteps; o = s.nextOpening(o, &steps) {
		if e := s.end(o); e.After(closes) {
			closes = e
		}
	}
	return State{Active: true, Next: closes}
}

// Judge judges every window of spec at now: each window's status (invalid ones say why), and
// the earliest next transition of all of them (zero when none comes).
func Judge(windows []locksv1.FreezeWindow, now time.Time) ([]locksv1.FreezeWindowStatus, time.Time) {
	if len(windows) == 0 {
		return nil, time.Time{}
	}
	out := make([]locksv1.FreezeWindowStatus, 0, len(windows))
	var next time.Time
	for i := range windows {
		w := &windows[i]
		st := locksv1.FreezeWindowStatus{Name: w.Name, Action: w.Action, WindowScope: *w.WindowScope.DeepCopy()}
		s, err := Parse(w)
		if err != nil {
			st.Invalid = err.Error()
			out = append(out, st)
			continue
		}
		state := s.At(now)
		st.State = locksv1.WindowClosed
		if state.Active {
			st.State = locksv1.WindowOpen
		}
		if !state.Next.IsZero() {
			// The status keeps whole seconds (as the API server stores it), so a rewrite of the
			// same judgement is no change; the returned next is exact.
			st.NextTransition = &metav1.Time{Time: state.Next.Truncate(time.Second)}
			if next.IsZero() || state.Next.Before(next) {
				next = state.Next
			}
		}
		out = append(out, st)
	}
	return out, next
}

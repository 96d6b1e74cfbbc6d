// Package window judges CommandLock freeze windows: whether a window (a cron schedule, a duration
// on its zone's wall clock, a time zone) is in force at a given time, and when it next opens or
// closes. Pure: the time is an argument, so every rule is tested by tables with any clock.
package window

import (
	"fmt"
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

// Schedule is a parsed window: its cron schedule in its zone and its duration.
type Schedule struct {
	spec     *cron.SpecSchedule
	loc      *time.Location
	duration time.Duration
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
	spec.Location = loc
	return &Schedule{spec: spec, loc: loc, duration: w.Duration.Duration}, nil
}

// end is when an opening at start closes: start plus the duration on the zone's wall clock, so
// Friday 16:00 plus 64h is Monday 08:00 even when the clocks changed over the weekend. Never
// before start plus one second (a wall-clock sum inside a skipped or repeated hour may land
// anywhere in it).
func (s *Schedule) end(start time.Time) time.Time {
	l := start.In(s.loc)
	e := time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond()+int(s.duration), s.loc)
	if !e.After(start) {
		return start.Add(s.duration)
	}
	return e
}

// At judges the window at now.
func (s *Schedule) At(now time.Time) State {
	// The latest opening still open at now, if any.
	var closes time.Time
	steps := 0
	for t := s.spec.Next(now.Add(-s.duration - slack)); !t.IsZero() && !t.After(now) && steps < maxSteps; t = s.spec.Next(t) {
		steps++
		if e := s.end(t); e.After(now) && e.After(closes) {
			closes = e
		}
	}
	if closes.IsZero() {
		return State{Next: s.spec.Next(now)}
	}
	// Openings before it closes keep it open: it closes when the last of them does. Openings
	// that overlap for good are followed up to the horizon: the close found by then is reported
	// as the next transition, where the window is simply judged again.
	for t := s.spec.Next(now); !t.IsZero() && !t.After(closes) && t.Before(now.Add(horizon)) && steps < maxSteps; t = s.spec.Next(t) {
		steps++
		if e := s.end(t); e.After(closes) {
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

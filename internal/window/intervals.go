package window

import (
	"sort"
	"time"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// AheadHorizon is how far ahead Intervals judges the windows for the API server, and
// MaxIntervals how many intervals it reports at most: a manager judges again at every
// transition, so these only matter while none runs.
const (
	AheadHorizon = 8 * 24 * time.Hour
	MaxIntervals = 16
)

// Interval is a time the windows freeze: [From, Until). A zero Until is open-ended.
type Interval struct {
	From, Until time.Time
	// Window names the window that freezes (the first one, when several do), or why the
	// interval has no end.
	Window string
}

// NotJudgedPast is the Window of the open-ended interval Intervals appends at its horizon.
const NotJudgedPast = "not judged past the horizon"

// Intervals judges windows ahead of now for an admission policy, which has no clock of its own
// to run cron with: the intervals in which they freeze (Deny windows in force, or, when there
// are Allow windows, the times outside all of them), earliest first, from the one in force at
// now on, at most MaxIntervals of them, up to AheadHorizon. Past the horizon the windows are not
// judged, so an open-ended interval freezes from there (fail closed: what nobody judged is
// frozen), as an invalid window freezes from now. Times are whole seconds, as the API server
// stores and compares them: a start is rounded down, an end up.
func Intervals(windows []locksv1.FreezeWindow, now time.Time) []Interval {
	if len(windows) == 0 {
		return nil
	}
	now = now.Truncate(time.Second)
	horizon := now.Add(AheadHorizon)
	var deny, allow []Interval
	hasAllow := false
	for i := range windows {
		w := &windows[i]
		if w.Action == locksv1.WindowAllow {
			hasAllow = true
		}
		s, err := Parse(w)
		if err != nil {
			// An invalid window freezes its scope, whatever its action, until it is fixed.
			deny = append(deny, Interval{From: now, Window: w.Name})
			continue
		}
		spans := s.spans(now, horizon, w.Name)
		if w.Action == locksv1.WindowAllow {
			allow = append(allow, spans...)
		} else {
			deny = append(deny, spans...)
		}
	}
	frozen := deny
	if hasAllow {
		frozen = append(frozen, gaps(merge(allow), now, horizon, allowGapName(windows))...)
	}
	frozen = merge(frozen)
	// Past the horizon nothing is judged: freeze from there (or from the end of the last
	// interval, when it ends later), unless the last interval already freezes for good.
	if n := len(frozen); n == 0 || !frozen[n-1].Until.IsZero() {
		from := horizon
		if n > 0 && frozen[n-1].Until.After(from) {
			from = frozen[n-1].Until
		}
		frozen = append(frozen, Interval{From: from, Window: NotJudgedPast})
	}
	if len(frozen) > MaxIntervals {
		// The rest is not judged either: freeze from the end of the last one kept.
		frozen = append(frozen[:MaxIntervals-1:MaxIntervals-1], Interval{From: frozen[MaxIntervals-2].Until, Window: NotJudgedPast})
	}
	return frozen
}

// allowGapName names a time outside every Allow window.
func allowGapName(windows []locksv1.FreezeWindow) string {
	for _, w := range windows {
		if w.Action == locksv1.WindowAllow {
			return "outside " + w.Name
		}
	}
	return ""
}

// spans are the openings of s from the one in force at now up to horizon, each [start, end):
// At and end judge them, so the wall-clock duration rules are At's. Openings that overlap are
// merged by the caller.
func (s *Schedule) spans(now, horizon time.Time, name string) []Interval {
	var out []Interval
	t := now
	for i := 0; i < 4*MaxIntervals && t.Before(horizon); i++ {
		st := s.At(t)
		if st.Next.IsZero() {
			if st.Active {
				out = append(out, Interval{From: t, Window: name})
			}
			break
		}
		if st.Active {
			out = append(out, Interval{From: t, Until: ceil(st.Next), Window: name})
		}
		t = st.Next
	}
	return out
}

// ceil rounds t up to a whole second.
func ceil(t time.Time) time.Time {
	if r := t.Truncate(time.Second); r.Before(t) {
		return r.Add(time.Second)
	}
	return t
}

// merge sorts intervals and joins those that overlap or touch.
func merge(in []Interval) []Interval {
	if len(in) == 0 {
		return nil
	}
	sort.SliceStable(in, func(i, j int) bool { return in[i].From.Before(in[j].From) })
	out := []Interval{in[0]}
	for _, iv := range in[1:] {
		last := &out[len(out)-1]
		if last.Until.IsZero() {
			break // frozen for good already
		}
		if !iv.From.After(last.Until) {
			if iv.Until.IsZero() || iv.Until.After(last.Until) {
				last.Until = iv.Until
			}
			continue
		}
		out = append(out, iv)
	}
	return out
}

// gaps are the times between now and horizon outside the merged intervals in.
func gaps(in []Interval, now, horizon time.Time, name string) []Interval {
	var out []Interval
	t := now
	for _, iv := range in {
		if iv.From.After(t) {
			out = append(out, Interval{From: t, Until: iv.From, Window: name})
		}
		if iv.Until.IsZero() {
			return out
		}
		t = iv.Until
	}
	if t.Before(horizon) {
		out = append(out, Interval{From: t, Until: horizon, Window: name})
	}
	return out
}

// Package skew is a fleet spoke's partition clock (docs/fleet.md, "Partition: the rule, with
// numbers" and "Clock skew between clusters"): how far the spoke's clock may be from the hub's,
// measured from the round trips of its hub Lease renewals, and from that when the spoke must
// stop its running holders so that they are gone before the hub can hand their locks on, and
// whether it may let a workload go at all. It calls no client and reads no clock: the agent
// passes the times in, as internal/queue's callers do, so every rule here is tested by tables.
//
// The hub lets a spoke's grants go when its Lease lapses: at renewTime + L by the hub's clock,
// where renewTime is the spoke's clock when it sent the renewal. A hub clock ahead of the
// spoke's by s makes that happen s early by the spoke's clock, so the spoke stops its holders
// by
//
//	stop deadline = min(renewTime + L, expiresAt) − skew bound − margin − grace
//
// (expiresAt: the hub's end of the grant, by its clock; the same skew applies), and lets a
// workload go only while now + L/4 (its minimum run) is before that deadline.
package skew

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

const (
	// Margin is how long before the hub may let a lock go the spoke's holders must be gone: the
	// moments between a stop and the workload's deletion being confirmed, and the difference
	// between the hub API server's clock (which the skew is measured against) and its managers'
	// (which judge the Lease). The same 3 s as run's (internal/plugin/keeper.StopMargin).
	Margin = 3 * time.Second
	// Window is how many renewals the skew bound looks back over.
	Window = 10
	// Precision is how finely the hub's times are read: the Date header and managedFields[].time
	// are whole seconds.
	Precision = time.Second
	// MinMaxSkew is the lowest --max-clock-skew that clocks in step can meet: the hub's time is
	// read in whole seconds, so a round trip's bound is up to a second plus the round trip even
	// when the clocks agree exactly.
	MinMaxSkew = 1500 * time.Millisecond

	// DefaultLease is --hub-lease-duration's default: a dead spoke's locks pass on within 40 s.
	DefaultLease = 40 * time.Second
	// DefaultGrace is --fleet-grace's default: the longest grace that fits in DefaultLease.
	DefaultGrace = 15 * time.Second
	// DefaultMaxSkew is --max-clock-skew's default: NTP keeps clocks within milliseconds, so
	// 2 s is a broken clock, not a slow network.
	DefaultMaxSkew = 2 * time.Second
)

// Settings are the agent's flags the partition rule reads.
type Settings struct {
	// Lease is --hub-lease-duration, L: the spoke's hub Leases' duration.
	Lease time.Duration
	// Grace is --fleet-grace: how long a holder's stop may take (a Pod's deletion grace).
	Grace time.Duration
	// MaxSkew is --max-clock-skew: past it the spoke stops every holder and lets nothing go
	// (Verdict.SkewTooLarge: it gives their hub grants back).
	MaxSkew time.Duration
}

// Defaults are the settings docs/fleet.md states: L = 40 s, grace 15 s, skew at most 2 s.
func Defaults() Settings {
	return Settings{Lease: DefaultLease, Grace: DefaultGrace, MaxSkew: DefaultMaxSkew}
}

// RenewEvery is how often the agent renews its hub Leases: a third of L, so that one failed
// renewal and its retry (RetryAfter later) both come before the stop must begin.
func (s Settings) RenewEvery() time.Duration { return s.Lease / 3 }

// RetryAfter is how soon a failed renewal is tried again: a sixth of L.
func (s Settings) RetryAfter() time.Duration { return s.Lease / 6 }

// MinRun is the least time a workload must have before the stop deadline to be let go: a
// quarter of L, so a workload is not started only to be stopped at once.
func (s Settings) MinRun() time.Duration { return s.Lease / 4 }

// Validate says why the settings cannot keep the promise (nil when they can): a spoke cut off
// right after a renewal must be able to stop its holders, grace included, Margin and the
// largest skew allowed before the hub can let their locks go, and still leave room for a failed
// renewal and its retry (half of L). The error names the numbers that would fit.
func (s Settings) Validate() error {
	var errs []error
	if s.Lease <= 0 || s.Lease%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--hub-lease-duration %s: a Lease's duration is a positive whole number of seconds", Secs(s.Lease)))
	}
	if s.Grace < 0 {
		errs = append(errs, fmt.Errorf("--fleet-grace %s: must not be negative", Secs(s.Grace)))
	}
	if s.MaxSkew < MinMaxSkew {
		errs = append(errs, fmt.Errorf("--max-clock-skew %s: the hub's time is read in whole seconds, so even clocks in step measure up to 1s plus the round trip; use at least %s", Secs(s.MaxSkew), Secs(MinMaxSkew)))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// guard:skew-grace-unchecked
	if s.Grace+Margin+s.MaxSkew <= s.Lease/2 {
		return nil
	}
	return fmt.Errorf("--fleet-grace %s does not fit in --hub-lease-duration %s: a spoke cut off from the hub must have stopped its holders, grace included, %s (margin) and %s (--max-clock-skew) before the hub can hand their locks on, with room for a failed renewal and its retry; a %s grace needs --hub-lease-duration of at least %s, or use --fleet-grace of at most %s",
		Secs(s.Grace), Secs(s.Lease), Secs(Margin), Secs(s.MaxSkew), Secs(s.Grace),
		Secs(ceilSecond(2*(s.Grace+Margin+s.MaxSkew))), Secs(max(0, s.Lease/2-Margin-s.MaxSkew)))
}

// RoundTrip is one renewal of a hub Lease, as the agent saw it.
type RoundTrip struct {
	// Sent is the spoke's clock just before the request was sent (the renewTime it carries, or
	// later), Received just after its response was read. With monotonic readings (time.Now)
	// their difference is the monotonic one: a step of the wall clock in between does not
	// shorten the round trip.
	Sent, Received time.Time
	// Hub are the hub's times from the response: the Date header and the Lease's
	// managedFields[].time of the write. Both are whole seconds (truncated: a time with a
	// fraction is read as its second); each was taken between Sent and Received.
	Hub []time.Time
}

// Sample is what one round trip says of the skew: the hub's clock minus the spoke's lies in
// [Low, High].
type Sample struct {
	Low, High time.Duration
}

// Skew is the middle of the sample's interval: the estimate of hub − spoke.
func (s Sample) Skew() time.Duration { return s.Low + (s.High-s.Low)/2 }

// Uncertainty is half the interval's width: half the round trip and half a second.
func (s Sample) Uncertainty() time.Duration { return (s.High - s.Low) / 2 }

// Beyond says the clocks are apart by more than d for certain: the whole interval lies past it,
// on one side.
func (s Sample) Beyond(d time.Duration) bool { return s.Low > d || s.High < -d }

// Bound is |Skew| + Uncertainty: the farthest the clocks can be apart by this sample.
func (s Sample) Bound() time.Duration { return max(abs(s.Low), abs(s.High)) }

// Measure reads one round trip. The hub read H (whole seconds) at a real moment when its clock
// showed between H and H+1s, and the spoke's showed between Sent and Sent+rtt, so
// hub − spoke ∈ [H − Sent − rtt, H + 1s − Sent]: the interval docs/fleet.md writes as the skew
// H − (t0+t1)/2 with an uncertainty of rtt/2 + 1s, centred half a second later (H is truncated,
// never rounded up) and so half a second narrower — which keeps clocks in step well under the
// 2 s default. Several hub times must all hold: their intervals are intersected, and joined
// when they do not meet (one of them is wrong; the bound must cover either).
func Measure(rt RoundTrip) (Sample, error) {
	if len(rt.Hub) == 0 {
		return Sample{}, errors.New("the renewal's response carries no time of the hub's (no Date header, no managedFields time)")
	}
	if rt.Sent.IsZero() || rt.Received.IsZero() {
		return Sample{}, errors.New("the renewal's send or receive time is missing")
	}
	rtt := rt.Received.Sub(rt.Sent)
	// guard:skew-round-trip-backwards
	if rtt < 0 {
		return Sample{}, fmt.Errorf("the renewal's response came %s before it was sent: the spoke's clock went back", Secs(-rtt))
	}
	sent := rt.Sent.Round(0) // the wall clock: the hub's times are wall times
	var meet, join Sample
	for i, h := range rt.Hub {
		h = h.Truncate(Precision)
		// guard:skew-round-trip-counted
		// guard:skew-second-precision
		s := Sample{Low: h.Sub(sent) - rtt, High: h.Sub(sent) + Precision}
		if i == 0 {
			meet, join = s, s
			continue
		}
		meet = Sample{Low: max(meet.Low, s.Low), High: min(meet.High, s.High)}
		join = Sample{Low: min(join.Low, s.Low), High: max(join.High, s.High)}
	}
	// guard:skew-hub-times-disagree
	if meet.Low > meet.High {
		return join, nil
	}
	return meet, nil
}

// Bound is the rolling skew bound over the last Window renewals. The zero value has seen none.
// It is a value: Add returns the new one.
type Bound struct {
	last [Window]Sample
	n    int // samples added, ever
}

// Add is the bound after one more renewal.
func (b Bound) Add(s Sample) Bound {
	// guard:skew-window-forgets
	b.last[b.n%Window] = s
	b.n++
	return b
}

// Max is the largest Sample.Bound of the last Window renewals; false before the first.
func (b Bound) Max() (time.Duration, bool) {
	if b.n == 0 {
		return 0, false
	}
	var m time.Duration
	for _, s := range b.last[:min(b.n, Window)] {
		// guard:skew-window-keeps-max
		m = max(m, s.Bound())
	}
	return m, true
}

// Last is the latest sample (for the fleet view's estimate); false before the first.
func (b Bound) Last() (Sample, bool) {
	if b.n == 0 {
		return Sample{}, false
	}
	return b.last[(b.n-1)%Window], true
}

// State is what the agent knows of its hub Lease when it judges.
type State struct {
	// Renewed is the renewTime of the last renewal the hub accepted: the spoke's clock, read
	// before the renewal was sent. Zero before the first.
	Renewed time.Time
	// Expires is the earliest status.expiresAt of the hub's grants the spoke holds or would let
	// go (the hub's clock); zero when unknown or when none expires.
	Expires time.Time
	// Skew is the rolling bound of the renewals so far.
	Skew Bound
}

// Verdict is the partition rule's answer at one moment.
type Verdict struct {
	// StopAt is when the running holders must begin to stop (SIGTERM, the Pod's deletion with
	// the grace): zero when they must stop now for want of a usable skew bound.
	StopAt time.Time
	// Stop says the running holders must stop now.
	Stop bool
	// LetGo says a granted workload may be let go now.
	LetGo bool
	// Why says why not (empty when LetGo): for the spoke request's blockedBy and the events.
	Why string
	// Expiry says StopAt is the grant's own end (State.Expires, before the hub Lease's lapse):
	// the holder stops because its grant ends, not because the hub stopped answering.
	Expiry bool
	// SkewTooLarge says the holders stop, and nothing is let go, because the spoke's clock is
	// off the hub's by more than MaxSkew, for certain: the latest renewal's whole interval lies
	// past it (Sample.Beyond). The spoke cannot tell when the hub hands its locks on until its
	// clock is fixed, and a grant it holds back for it is given back. A bound over MaxSkew only
	// by a slow round trip's width (the clocks may agree) stops the holders too, but holds the
	// grants: the next renewals, on a faster network, may let them go.
	SkewTooLarge bool
}

// Judge applies the rule at now (the spoke's clock).
func (s Settings) Judge(now time.Time, st State) Verdict {
	bound, known := st.Skew.Max()
	switch {
	// guard:skew-unknown-refused
	case !known || st.Renewed.IsZero():
		return Verdict{Stop: true, Why: "the hub has not answered a renewal of the spoke's hub Lease yet: nothing is let go until it does"}
	// guard:skew-over-max-refused
	case bound > s.MaxSkew:
		last, _ := st.Skew.Last()
		// guard:skew-give-back-only-when-certain
		if last.Beyond(s.MaxSkew) {
			return Verdict{Stop: true, SkewTooLarge: true, Why: fmt.Sprintf("clock skew with the hub is %s, over --max-clock-skew %s: every holder is stopped and nothing is let go until it is back under", Secs(bound), Secs(s.MaxSkew))}
		}
		return Verdict{Stop: true, Why: fmt.Sprintf("clock skew with the hub is up to %s, over --max-clock-skew %s, by a slow round trip (the clocks may agree): every holder is stopped and nothing is let go until it is back under", Secs(bound), Secs(s.MaxSkew))}
	}
	stop := s.StopAt(st.Renewed, st.Expires, bound)
	v := Verdict{StopAt: stop, Expiry: !st.Expires.IsZero() && st.Expires.Before(st.Renewed.Add(s.Lease))}
	switch {
	// guard:skew-stop-at-deadline
	case !now.Before(stop):
		v.Stop = true
		v.Why = fmt.Sprintf("the hub has not answered since %s: its holders were stopped at %s, before the hub can hand their locks on", stamp(st.Renewed), stamp(stop))
		if v.Expiry {
			v.Why = fmt.Sprintf("its grant ends at %s by the hub's clock (spec.ttl, not renewed): it was stopped at %s, before the hub hands its locks on", stamp(st.Expires), stamp(stop))
		}
	// guard:skew-let-go-min-run
	case !now.Add(s.MinRun()).Before(stop):
		v.Why = fmt.Sprintf("the hub has not answered since %s; nothing is let go until it answers (a workload needs %s before its stop at %s)", stamp(st.Renewed), Secs(s.MinRun()), stamp(stop))
		if v.Expiry {
			v.Why = fmt.Sprintf("its grant ends at %s by the hub's clock (spec.ttl): too soon to let a workload go (it needs %s before its stop at %s)", stamp(st.Expires), Secs(s.MinRun()), stamp(stop))
		}
	default:
		v.LetGo = true
	}
	return v
}

// StopAt is the stop deadline: the hub may let the spoke's locks go at renewed + L by its clock,
// or at expires (its clock; zero when unknown), whichever is first; by the spoke's clock that is
// no earlier than that minus the skew bound, and the holders must be gone, grace included,
// Margin before it.
func (s Settings) StopAt(renewed, expires time.Time, bound time.Duration) time.Time {
	lapse := renewed.Add(s.Lease)
	// guard:skew-deadline-ignores-expiry
	if !expires.IsZero() && expires.Before(lapse) {
		lapse = expires
	}
	// guard:skew-deadline-ignores-skew
	// guard:skew-deadline-ignores-grace
	return lapse.Add(-bound - Margin - s.Grace)
}

// Secs writes a duration in seconds, as the flags' docs do ("130s", "2.4s").
func Secs(d time.Duration) string {
	return strconv.FormatFloat(d.Round(time.Millisecond).Seconds(), 'f', -1, 64) + "s"
}

// ceilSecond rounds d up to whole seconds (a Lease's duration is whole seconds).
func ceilSecond(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

package skew

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// t0 is the moment of a renewal in these tables (the spoke's clock).
var t0 = time.Date(2026, 11, 28, 10, 2, 13, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestValidate(t *testing.T) {
	cases := map[string]struct {
		s       Settings
		wantErr []string // each must be in the error; nil: valid
	}{
		"the defaults fit exactly: 15 + 3 + 2 = 20 = L/2": {s: Defaults()},
		"a second more grace does not fit": {
			s:       Settings{Lease: 40 * time.Second, Grace: 16 * time.Second, MaxSkew: 2 * time.Second},
			wantErr: []string{"--fleet-grace 16s does not fit in --hub-lease-duration 40s", "--hub-lease-duration of at least 42s", "--fleet-grace of at most 15s"},
		},
		"a 60 s grace needs a 130 s lease (docs/fleet.md)": {
			s:       Settings{Lease: 40 * time.Second, Grace: 60 * time.Second, MaxSkew: 2 * time.Second},
			wantErr: []string{"a 60s grace needs --hub-lease-duration of at least 130s"},
		},
		"and fits in it": {s: Settings{Lease: 130 * time.Second, Grace: 60 * time.Second, MaxSkew: 2 * time.Second}},
		"a larger skew allowed takes from the grace": {
			s:       Settings{Lease: 40 * time.Second, Grace: 15 * time.Second, MaxSkew: 3 * time.Second},
			wantErr: []string{"3s (--max-clock-skew)", "at least 42s", "--fleet-grace of at most 14s"},
		},
		"no grace in a short lease": {s: Settings{Lease: 10 * time.Second, MaxSkew: 2 * time.Second}},
		"a lease too short for any grace": {
			s:       Settings{Lease: 8 * time.Second, MaxSkew: 2 * time.Second},
			wantErr: []string{"a 0s grace needs --hub-lease-duration of at least 10s", "--fleet-grace of at most 0s"},
		},
		"a lease of a fraction of a second": {
			s:       Settings{Lease: 40500 * time.Millisecond, Grace: 15 * time.Second, MaxSkew: 2 * time.Second},
			wantErr: []string{"--hub-lease-duration 40.5s: a Lease's duration is a positive whole number of seconds"},
		},
		"no lease": {
			s:       Settings{Grace: 15 * time.Second, MaxSkew: 2 * time.Second},
			wantErr: []string{"--hub-lease-duration 0s"},
		},
		"a negative grace": {
			s:       Settings{Lease: 40 * time.Second, Grace: -time.Second, MaxSkew: 2 * time.Second},
			wantErr: []string{"--fleet-grace -1s: must not be negative"},
		},
		"a skew bound whole seconds cannot measure": {
			s:       Settings{Lease: 40 * time.Second, Grace: 15 * time.Second, MaxSkew: time.Second},
			wantErr: []string{"--max-clock-skew 1s", "use at least 1.5s"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := tc.s.Validate()
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error with %q", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to say %q", err, w)
				}
			}
		})
	}
}

func TestIntervals(t *testing.T) {
	s := Defaults()
	got := []time.Duration{s.RenewEvery(), s.RetryAfter(), s.MinRun()}
	want := []time.Duration{40 * time.Second / 3, 40 * time.Second / 6, 10 * time.Second}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("renew, retry, minimum run (-want +got):\n%s", diff)
	}
}

func TestMeasure(t *testing.T) {
	cases := map[string]struct {
		rt         RoundTrip
		want       Sample
		wantErr    string
		wantSkew   time.Duration
		wantUncert time.Duration
	}{
		"clocks in step, the hub read 300 ms into the spoke's second": {
			rt:   RoundTrip{Sent: t0.Add(ms(300)), Received: t0.Add(ms(400)), Hub: []time.Time{t0}},
			want: Sample{Low: ms(-400), High: ms(700)}, wantSkew: ms(150), wantUncert: ms(550),
		},
		"the hub 2.5 s ahead": {
			// The hub read at the spoke's 10:02:13.100, its clock showing 10:02:15.600.
			rt:   RoundTrip{Sent: t0, Received: t0.Add(ms(200)), Hub: []time.Time{t0.Add(2 * time.Second)}},
			want: Sample{Low: ms(1800), High: ms(3000)}, wantSkew: ms(2400), wantUncert: ms(600),
		},
		"the hub 1.2 s behind": {
			// Read at the spoke's 10:02:13.550, the hub's 10:02:12.350.
			rt:   RoundTrip{Sent: t0.Add(ms(500)), Received: t0.Add(ms(600)), Hub: []time.Time{t0.Add(-time.Second)}},
			want: Sample{Low: ms(-1600), High: ms(-500)}, wantSkew: ms(-1050), wantUncert: ms(550),
		},
		"a fraction in the hub's time is read as its second": {
			rt:   RoundTrip{Sent: t0.Add(ms(300)), Received: t0.Add(ms(400)), Hub: []time.Time{t0.Add(ms(350))}},
			want: Sample{Low: ms(-400), High: ms(700)}, wantSkew: ms(150), wantUncert: ms(550),
		},
		"the Date header and managedFields straddle a second: both hold": {
			// Sent at .900, received at 1.200; the write stamped at .950 (10:02:13), the Date at
			// 1.100 (10:02:14), the clocks in step.
			rt:   RoundTrip{Sent: t0.Add(ms(900)), Received: t0.Add(ms(1200)), Hub: []time.Time{t0.Add(time.Second), t0}},
			want: Sample{Low: ms(-200), High: ms(100)}, wantSkew: ms(-50), wantUncert: ms(150),
		},
		"two hub times that cannot both hold: the bound covers either": {
			rt:   RoundTrip{Sent: t0, Received: t0.Add(ms(100)), Hub: []time.Time{t0, t0.Add(4 * time.Second)}},
			want: Sample{Low: ms(-100), High: ms(5000)}, wantSkew: ms(2450), wantUncert: ms(2550),
		},
		"no hub time": {
			rt:      RoundTrip{Sent: t0, Received: t0.Add(ms(100))},
			wantErr: "no time of the hub's",
		},
		"no send time": {
			rt:      RoundTrip{Received: t0, Hub: []time.Time{t0}},
			wantErr: "send or receive time is missing",
		},
		"received before sent": {
			rt:      RoundTrip{Sent: t0, Received: t0.Add(-ms(1500)), Hub: []time.Time{t0}},
			wantErr: "came 1.5s before it was sent",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Measure(tc.rt)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Measure() = %v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Measure() = %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Measure() (-want +got):\n%s", diff)
			}
			if got.Skew() != tc.wantSkew || got.Uncertainty() != tc.wantUncert {
				t.Errorf("skew %s ± %s, want %s ± %s", got.Skew(), got.Uncertainty(), tc.wantSkew, tc.wantUncert)
			}
			if got.Bound() != abs(got.Skew())+got.Uncertainty() {
				t.Errorf("Bound() = %s, want |%s| + %s", got.Bound(), got.Skew(), got.Uncertainty())
			}
		})
	}
}

// TestMeasureCoversTheTruth: for round trips at random moments, of random lengths, with the hub
// read at a random moment inside each and its clock off by a random skew, the sample holds the
// skew, and is no wider than the round trip and the second's precision. Clocks in step measure
// at most a second plus the round trip, so the 2 s default is not tripped by precision alone.
func TestMeasureCoversTheTruth(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 1))
	for i := range 100000 {
		skew := time.Duration(rng.Int64N(int64(6*time.Second))) - 3*time.Second
		if i%4 == 0 {
			skew = 0
		}
		sent := t0.Add(time.Duration(rng.Int64N(int64(time.Hour))))
		rtt := time.Duration(rng.Int64N(int64(500 * time.Millisecond)))
		at := sent.Add(time.Duration(rng.Int64N(int64(rtt) + 1)))
		hub := []time.Time{at.Add(skew).Truncate(time.Second)}
		if i%2 == 0 { // a second hub time, read a little later in the same round trip
			later := at.Add(time.Duration(rng.Int64N(int64(sent.Add(rtt).Sub(at)) + 1)))
			hub = append(hub, later.Add(skew).Truncate(time.Second))
		}
		s, err := Measure(RoundTrip{Sent: sent, Received: sent.Add(rtt), Hub: hub})
		if err != nil {
			t.Fatal(err)
		}
		if skew < s.Low || skew > s.High {
			t.Fatalf("skew %s outside the sample [%s, %s] (sent %s, rtt %s, hub %v)", skew, s.Low, s.High, sent, rtt, hub)
		}
		if w := s.High - s.Low; w > rtt+time.Second {
			t.Fatalf("the sample [%s, %s] is %s wide, more than the round trip %s and a second", s.Low, s.High, w, rtt)
		}
		if skew == 0 && s.Bound() > time.Second+rtt {
			t.Fatalf("clocks in step bound at %s, over a second and the round trip %s", s.Bound(), rtt)
		}
	}
}

func TestBound(t *testing.T) {
	sample := func(b time.Duration) Sample { return Sample{Low: -b / 2, High: b} }
	add := func(bounds ...time.Duration) Bound {
		var b Bound
		for _, d := range bounds {
			b = b.Add(sample(d))
		}
		return b
	}
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	cases := map[string]struct {
		b         Bound
		want      time.Duration
		wantKnown bool
		wantLast  Sample
	}{
		"none yet": {b: Bound{}},
		"one":      {b: add(sec(1)), want: sec(1), wantKnown: true, wantLast: sample(sec(1))},
		"the largest of several": {
			b:    add(sec(1), sec(3), sec(2)),
			want: sec(3), wantKnown: true, wantLast: sample(sec(2)),
		},
		"a broken clock is remembered for ten renewals": {
			b:    add(sec(5), sec(1), sec(1), sec(1), sec(1), sec(1), sec(1), sec(1), sec(1), sec(1)),
			want: sec(5), wantKnown: true, wantLast: sample(sec(1)),
		},
		"and forgotten at the eleventh": {
			b:    add(sec(5), sec(1), sec(1), sec(1), sec(1), sec(1), sec(1), sec(1), sec(1), sec(1), sec(1)),
			want: sec(1), wantKnown: true, wantLast: sample(sec(1)),
		},
		"a bound below zero's sample is its magnitude": {
			b:    Bound{}.Add(Sample{Low: -sec(4), High: -sec(3)}),
			want: sec(4), wantKnown: true, wantLast: Sample{Low: -sec(4), High: -sec(3)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, known := tc.b.Max()
			if got != tc.want || known != tc.wantKnown {
				t.Errorf("Max() = %s, %v; want %s, %v", got, known, tc.want, tc.wantKnown)
			}
			last, ok := tc.b.Last()
			if ok != tc.wantKnown || last != tc.wantLast {
				t.Errorf("Last() = %v, %v; want %v, %v", last, ok, tc.wantLast, tc.wantKnown)
			}
		})
	}
}

// bounded is a Bound whose largest sample is b.
func bounded(b time.Duration) Bound { return Bound{}.Add(Sample{Low: -b / 4, High: b}) }

func TestJudge(t *testing.T) {
	sec := func(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }
	at := func(n float64) time.Time { return t0.Add(sec(n)) }
	renewed := State{Renewed: t0, Skew: bounded(sec(2))}
	cases := map[string]struct {
		s        Settings
		now      time.Time
		st       State
		want     Verdict
		wantWhy  string
		whyEmpty bool
	}{
		// docs/fleet.md: cut off at t, SIGTERM at t + 20 s, gone by t + 35 s, the hub hands
		// the locks on at t + 40 s.
		"right after a renewal: let go": {
			now: at(0.2), st: renewed, want: Verdict{StopAt: at(20), LetGo: true}, whyEmpty: true,
		},
		"ten seconds before the stop: no longer let go": {
			now: at(10), st: renewed, want: Verdict{StopAt: at(20)},
			wantWhy: "the hub has not answered since 2026-11-28T10:02:13Z; nothing is let go until it answers (a workload needs 10s before its stop at 2026-11-28T10:02:33Z)",
		},
		"just before it: let go": {
			now: at(9.999), st: renewed, want: Verdict{StopAt: at(20), LetGo: true}, whyEmpty: true,
		},
		"at t + 20 s: stop": {
			now: at(20), st: renewed, want: Verdict{StopAt: at(20), Stop: true},
			wantWhy: "the hub has not answered since 2026-11-28T10:02:13Z: its holders were stopped at 2026-11-28T10:02:33Z",
		},
		"a moment before: run on": {
			now: at(19.999), st: renewed, want: Verdict{StopAt: at(20)}, wantWhy: "nothing is let go until it answers",
		},
		"a smaller bound stops later": {
			now: at(20), st: State{Renewed: t0, Skew: bounded(sec(0.8))}, want: Verdict{StopAt: at(21.2)}, wantWhy: "nothing is let go",
		},
		"a grant that expires before the Lease lapses stops first": {
			now: at(10), st: State{Renewed: t0, Expires: at(30), Skew: bounded(sec(2))}, want: Verdict{StopAt: at(10), Stop: true, Expiry: true}, wantWhy: "its grant ends at 2026-11-28T10:02:43Z by the hub's clock (spec.ttl, not renewed): it was stopped at 2026-11-28T10:02:23Z",
		},
		"a grant that expires after it does not": {
			now: at(0), st: State{Renewed: t0, Expires: at(60), Skew: bounded(sec(2))}, want: Verdict{StopAt: at(20), LetGo: true}, whyEmpty: true,
		},
		"a skew bound over --max-clock-skew: stop everything, let nothing go": {
			now: at(0.2), st: State{Renewed: t0, Skew: bounded(sec(2.4))}, want: Verdict{Stop: true},
			wantWhy: "clock skew with the hub is up to 2.4s, over --max-clock-skew 2s, by a slow round trip",
		},
		"a clock off by more than --max-clock-skew for certain: give the grants back": {
			now: at(0.2), st: State{Renewed: t0, Skew: Bound{}.Add(Sample{Low: sec(2.1), High: sec(3.3)})}, want: Verdict{Stop: true, SkewTooLarge: true},
			wantWhy: "clock skew with the hub is 3.3s, over --max-clock-skew 2s: every holder",
		},
		"behind it for certain: the same": {
			now: at(0.2), st: State{Renewed: t0, Skew: Bound{}.Add(Sample{Low: -sec(9.5), High: -sec(8.2)})}, want: Verdict{Stop: true, SkewTooLarge: true},
			wantWhy: "clock skew with the hub is 9.5s",
		},
		"certain before, only a slow round trip's width now: held, not given back": {
			now: at(0.2), st: State{Renewed: t0, Skew: Bound{}.Add(Sample{Low: sec(2.1), High: sec(3.3)}).Add(Sample{Low: -sec(2.5), High: sec(1)})}, want: Verdict{Stop: true},
			wantWhy: "by a slow round trip",
		},
		"at the bound: fine": {
			now: at(0.2), st: State{Renewed: t0, Skew: bounded(sec(2))}, want: Verdict{StopAt: at(20), LetGo: true}, whyEmpty: true,
		},
		"no renewal answered yet": {
			now: at(0), st: State{}, want: Verdict{Stop: true}, wantWhy: "has not answered a renewal",
		},
		"a longer lease and grace": {
			s:   Settings{Lease: 130 * time.Second, Grace: 60 * time.Second, MaxSkew: 2 * time.Second},
			now: at(30), st: renewed, want: Verdict{StopAt: at(65), LetGo: true}, whyEmpty: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := tc.s
			if s == (Settings{}) {
				s = Defaults()
			}
			got := s.Judge(tc.now, tc.st)
			why := got.Why
			got.Why = ""
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Judge(t + %s) (-want +got):\n%s", tc.now.Sub(t0), diff)
			}
			if tc.whyEmpty != (why == "") || !strings.Contains(why, tc.wantWhy) {
				t.Errorf("Why = %q, want %q (empty: %v)", why, tc.wantWhy, tc.whyEmpty)
			}
		})
	}
}

// TestNoHolderPastTheLapse is the promise, end to end in real time: a spoke whose clock is off
// the hub's by any skew the renewals let through, cut off after any renewal, has every holder
// it let go gone (its stop begun at StopAt, its grace spent) Margin before the hub's clock
// reaches the Lease's lapse, and lets a workload go only with L/4 left to run.
func TestNoHolderPastTheLapse(t *testing.T) {
	s := Defaults()
	rng := rand.New(rand.NewPCG(45, 2))
	for range 20000 {
		// The hub's clock is the spoke's plus skew; real time is the spoke's clock.
		skew := time.Duration(rng.Int64N(int64(5*time.Second))) - 2500*time.Millisecond
		var b Bound
		var renewed time.Time
		sent := t0.Add(time.Duration(rng.Int64N(int64(time.Minute))))
		for range 1 + rng.IntN(12) { // renewals every L/3, each a round trip of up to 300 ms
			rtt := time.Duration(rng.Int64N(int64(300 * time.Millisecond)))
			at := sent.Add(time.Duration(rng.Int64N(int64(rtt) + 1)))
			sample, err := Measure(RoundTrip{Sent: sent, Received: sent.Add(rtt), Hub: []time.Time{at.Add(skew).Truncate(time.Second)}})
			if err != nil {
				t.Fatal(err)
			}
			b, renewed = b.Add(sample), sent
			sent = sent.Add(s.RenewEvery())
		}
		st := State{Renewed: renewed, Skew: b}
		// The hub lapses the Lease when its clock shows renewed + L: in real time, L − skew
		// after the renewal.
		lapse := renewed.Add(s.Lease - skew)
		// Judged at any moment after the cut-off.
		now := renewed.Add(time.Duration(rng.Int64N(int64(s.Lease))))
		v := s.Judge(now, st)
		bound, _ := b.Max()
		if bound <= s.MaxSkew && v.StopAt.IsZero() {
			t.Fatalf("bound %s within %s, but no stop deadline: %+v", bound, s.MaxSkew, v)
		}
		if v.LetGo && !now.Add(s.MinRun()).Before(v.StopAt) {
			t.Fatalf("let go at %s with less than %s before the stop at %s", now, s.MinRun(), v.StopAt)
		}
		if !v.StopAt.IsZero() {
			if gone := v.StopAt.Add(s.Grace); gone.After(lapse.Add(-Margin)) {
				t.Fatalf("skew %s (bound %s): the holders are gone at %s, after the hub's lapse at %s less the margin", skew, bound, gone, lapse)
			}
		}
		if v.Stop != !now.Before(v.StopAt) && !v.StopAt.IsZero() {
			t.Fatalf("at %s, stop at %s: Stop = %v", now, v.StopAt, v.Stop)
		}
	}
}

package main

// The fleet spoke's partition clock (issue #45, internal/fleet/skew: the skew bound from the hub
// Lease's renewals, the stop deadline, when a workload may be let go), killed by its tables and
// its random round trips. In a file of its own, as workload.go.
const skewPkg = "./internal/fleet/skew/"

func init() {
	mutants = append(mutants,
		mutant{name: "skew-grace-unchecked", pkg: skewPkg, focus: "run:TestValidate", guard: "a --fleet-grace that cannot be spent, with the margin and the largest skew allowed, in half the hub lease is refused", edits: []edit{
			{"skew-grace-unchecked", "	if s.Grace+Margin+s.MaxSkew <= s.Lease/2 {", "	if true || s.Grace+Margin+s.MaxSkew <= s.Lease/2 {"},
		}},
		mutant{name: "skew-round-trip-backwards", pkg: skewPkg, focus: "run:TestMeasure$", guard: "a renewal answered before it was sent (the spoke's clock went back) measures nothing", edits: []edit{
			{"skew-round-trip-backwards", "	if rtt < 0 {", "	if false {"},
		}},
		mutant{name: "skew-round-trip-counted", pkg: skewPkg, focus: "run:TestMeasureCoversTheTruth|TestNoHolderPastTheLapse", guard: "the hub's time may have been read at any moment of the round trip: its length is in the sample", edits: []edit{
			{"skew-round-trip-counted", "Low: h.Sub(sent) - rtt,", "Low: h.Sub(sent),"},
		}},
		mutant{name: "skew-second-precision", pkg: skewPkg, focus: "run:TestMeasureCoversTheTruth|TestNoHolderPastTheLapse", guard: "the hub's times are whole seconds (truncated): the second they show is in the sample", edits: []edit{
			{"skew-second-precision", "High: h.Sub(sent) + Precision}", "High: h.Sub(sent)}"},
		}},
		mutant{name: "skew-hub-times-disagree", pkg: skewPkg, focus: "run:TestMeasure$", guard: "two hub times that cannot both hold give a sample that covers either", edits: []edit{
			{"skew-hub-times-disagree", "	if meet.Low > meet.High {", "	if false {"},
		}},
		mutant{name: "skew-window-forgets", pkg: skewPkg, focus: "run:TestBound", guard: "the skew bound looks back over the last ten renewals only (a clock fixed since is trusted again)", edits: []edit{
			{"skew-window-forgets", "	b.last[b.n%Window] = s", "	b.last[min(b.n, Window-1)] = s"},
		}},
		mutant{name: "skew-window-keeps-max", pkg: skewPkg, focus: "run:TestBound|TestNoHolderPastTheLapse", guard: "the skew bound is the largest of the last renewals', not the latest's", edits: []edit{
			{"skew-window-keeps-max", "		m = max(m, s.Bound())", "		m = s.Bound()"},
		}},
		mutant{name: "skew-unknown-refused", pkg: skewPkg, focus: "run:TestJudge", guard: "before a renewal is answered (no skew measured, no renewal time) every holder stops and nothing is let go", edits: []edit{
			{"skew-unknown-refused", "	case !known || st.Renewed.IsZero():", "	case false && (!known || st.Renewed.IsZero()):"},
		}},
		mutant{name: "skew-over-max-refused", pkg: skewPkg, focus: "run:TestJudge|TestNoHolderPastTheLapse", guard: "a skew bound over --max-clock-skew stops every holder and lets nothing go", edits: []edit{
			{"skew-over-max-refused", "	case bound > s.MaxSkew:", "	case false:"},
		}},
		mutant{name: "skew-give-back-only-when-certain", pkg: skewPkg, focus: "run:TestJudge", guard: "a grant is given back for the skew only when the clock is off for certain, not when a slow round trip widens the bound", edits: []edit{
			{"skew-give-back-only-when-certain", "		if last.Beyond(s.MaxSkew) {", "		if last.Beyond(s.MaxSkew) || true {"},
		}},
		mutant{name: "skew-stop-at-deadline", pkg: skewPkg, focus: "run:TestJudge|TestNoHolderPastTheLapse", guard: "the running holders stop at the stop deadline", edits: []edit{
			{"skew-stop-at-deadline", "	case !now.Before(stop):", "	case false:"},
		}},
		mutant{name: "skew-let-go-min-run", pkg: skewPkg, focus: "run:TestJudge|TestNoHolderPastTheLapse", guard: "a workload is let go only with L/4 left before the stop deadline", edits: []edit{
			{"skew-let-go-min-run", "	case !now.Add(s.MinRun()).Before(stop):", "	case !now.Before(stop):"},
		}},
		mutant{name: "skew-deadline-ignores-expiry", pkg: skewPkg, focus: "run:TestJudge", guard: "the holders stop before the hub's grant expires, not only before the Lease lapses", edits: []edit{
			{"skew-deadline-ignores-expiry", "	if !expires.IsZero() && expires.Before(lapse) {", "	if false && expires.Before(lapse) {"},
		}},
		mutant{name: "skew-deadline-ignores-skew", pkg: skewPkg, focus: "run:TestJudge|TestNoHolderPastTheLapse", guard: "the stop deadline comes the skew bound earlier (a hub clock ahead lapses the Lease early)", edits: []edit{
			{"skew-deadline-ignores-skew", "	return lapse.Add(-bound - Margin - s.Grace)", "	return lapse.Add(-Margin - s.Grace)"},
		}},
		mutant{name: "skew-deadline-ignores-grace", pkg: skewPkg, focus: "run:TestJudge|TestNoHolderPastTheLapse", guard: "the stop begins a grace before the holders must be gone", edits: []edit{
			{"skew-deadline-ignores-grace", "	return lapse.Add(-bound - Margin - s.Grace)", "	return lapse.Add(-bound - Margin)"},
		}},
	)
}

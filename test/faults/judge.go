package faults

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/testing/lincheck"
)

// Verdict is what the judge decided from the clients' records alone.
type Verdict struct {
	// Holds is how many holds were checked (granted, worked, released).
	Holds int
	// Violations are the broken promises, one line each.
	Violations []string
	// Recovery is, per heal and key that had a waiter when the fault healed, how long after the
	// heal the key's next grant was seen by its client.
	Recovery []time.Duration
	// Porcupine is porcupine's verdict on the acquires and releases as a fenced lock.
	Porcupine string
}

// Fault is one fault's window on the records' clock. Liveness counts from Heal; recovery from
// Served, when the API server answered /readyz ok again after the heal (zero: Heal). A control
// plane restart is healed when the API server is ready, not when its process was started.
type Fault struct {
	Start, Heal, Served time.Duration
}

func (f Fault) served() time.Duration {
	if f.Served == 0 {
		return f.Heal
	}
	return f.Served
}

// Judge checks the clients' records: no two holds of one key overlap in real time; fencing
// tokens increase in the real-time order of the holds; every acquire is granted within bound of
// its call or, if a fault was on meanwhile, of the heal that ended it; nothing is lost (every
// request the clients made was granted, worked under, and released with the API server's
// acknowledgement); and porcupine finds the history that of a fenced lock. faults are the
// faults injected.
func Judge(holds []Hold, faults []Fault, bound time.Duration) Verdict {
	var v Verdict
	byKey := map[string][]Hold{}
	h := lincheck.NewHistory()
	for _, hd := range holds {
		if hd.Err != "" {
			v.Violations = append(v.Violations, fmt.Sprintf("lost: %s (%s) on %s: %s", hd.Request, hd.Client, hd.Key, hd.Err))
			continue
		}
		v.Holds++
		byKey[hd.Key] = append(byKey[hd.Key], hd)
		h.Add(lincheck.Input{Kind: lincheck.Acquire, Key: hd.Key, Client: locksv1.HolderID{Owner: hd.Request}},
			lincheck.Output{KeyToken: hd.Token, RequestToken: hd.Token}, int64(hd.Call), int64(hd.Granted))
		h.Add(lincheck.Input{Kind: lincheck.Release, Key: hd.Key, Client: locksv1.HolderID{Owner: hd.Request}},
			lincheck.Output{}, int64(hd.ReleaseCall), int64(hd.Release))
		from := hd.Call
		for _, f := range faults {
			if f.Start < hd.Granted && f.Heal > from {
				from = max(from, f.Heal)
			}
		}
		if wait := hd.Granted - from; wait > bound {
			v.Violations = append(v.Violations, fmt.Sprintf("slow: %s on %s granted %s after its call or the last heal (bound %s)",
				hd.Request, hd.Key, wait.Round(time.Millisecond), bound))
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		hs := byKey[k]
		sort.Slice(hs, func(i, j int) bool { return hs[i].WorkStart < hs[j].WorkStart })
		for i := 1; i < len(hs); i++ {
			prev, cur := hs[i-1], hs[i]
			// prev is the latest-ending hold so far when holds do not overlap; compare with
			// every earlier one so a long hold is not hidden by a short one after it.
			for j := i - 1; j >= 0; j-- {
				if hs[j].WorkEnd > cur.WorkStart {
					v.Violations = append(v.Violations, fmt.Sprintf("overlap on %s: %s worked [%s, %s] (token %d) and %s worked [%s, %s] (token %d)",
						k, hs[j].Request, hs[j].WorkStart, hs[j].WorkEnd, hs[j].Token, cur.Request, cur.WorkStart, cur.WorkEnd, cur.Token))
				}
			}
			if cur.Token <= prev.Token {
				v.Violations = append(v.Violations, fmt.Sprintf("token order on %s: %s (token %d) held after %s (token %d)",
					k, cur.Request, cur.Token, prev.Request, prev.Token))
			}
		}
		for _, f := range faults {
			// The first of the key's waiters at the heal to be granted after it.
			heal := f.served()
			next := time.Duration(-1)
			for _, x := range hs {
				if x.Call <= heal && x.Granted >= heal && (next < 0 || x.Granted < next) {
					next = x.Granted
				}
			}
			if next >= 0 {
				v.Recovery = append(v.Recovery, next-heal)
			}
		}
	}
	res := h.Check(time.Minute)
	v.Porcupine = res.String()
	if res.Verdict != porcupine.Ok {
		v.Violations = append(v.Violations, fmt.Sprintf("porcupine: %s\n%s", res, res.Explanation))
	}
	return v
}

// percentile is the p-th percentile (0..1) of ds, nearest rank; 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s)+1)) - 1
	return s[min(max(i, 0), len(s)-1)]
}

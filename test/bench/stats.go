package bench

import (
	"math"
	"slices"
	"time"
)

// Latency summarizes samples in milliseconds.
type Latency struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50ms"`
	P90  float64 `json:"p90ms"`
	P99  float64 `json:"p99ms"`
	Mean float64 `json:"meanms"`
	Max  float64 `json:"maxms"`
}

// summarize computes nearest-rank percentiles.
func summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	rank := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return ms(s[max(0, min(i, len(s)-1))])
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Latency{N: len(s), P50: rank(0.50), P90: rank(0.90), P99: rank(0.99), Mean: ms(sum / time.Duration(len(s))), Max: ms(s[len(s)-1])}
}

// perSecond is n over d, zero when d is.
func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// ratio is a / b, NaN-free: zero when b is zero.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

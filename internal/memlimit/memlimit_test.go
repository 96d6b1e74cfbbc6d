package memlimit

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSet(t *testing.T) {
	const mi = 1 << 20
	cases := []struct {
		name    string
		env     map[string]string
		ratio   float64
		want    Limit
		set     []int64 // what Set asked the runtime for
		wantErr bool
	}{
		{name: "the chart's: 90% of the container's limit, in bytes", env: map[string]string{Env: "268435456"}, ratio: 0.9,
			want: Limit{Bytes: 241591910, Source: Env, Container: 256 * mi}, set: []int64{241591910}},
		{name: "a quantity", env: map[string]string{Env: "384Mi"}, ratio: 0.5,
			want: Limit{Bytes: 192 * mi, Source: Env, Container: 384 * mi}, set: []int64{192 * mi}},
		{name: "ratio 1: the container's limit itself", env: map[string]string{Env: "128Mi"}, ratio: 1,
			want: Limit{Bytes: 128 * mi, Source: Env, Container: 128 * mi}, set: []int64{128 * mi}},
		{name: "GOMEMLIMIT is the user's and wins", env: map[string]string{Env: "256Mi", "GOMEMLIMIT": "200MiB"}, ratio: 0.9,
			want: Limit{Bytes: 4242, Source: "GOMEMLIMIT", Container: 256 * mi}, set: []int64{-1}},
		{name: "no limit anywhere", env: nil, ratio: 0.9,
			want: Limit{Bytes: 4242, Source: "none"}, set: []int64{-1}},
		{name: "not a quantity", env: map[string]string{Env: "lots"}, ratio: 0.9, wantErr: true},
		{name: "zero", env: map[string]string{Env: "0"}, ratio: 0.9, wantErr: true},
		{name: "negative", env: map[string]string{Env: "-5Mi"}, ratio: 0.9, wantErr: true},
		{name: "ratio 0", env: map[string]string{Env: "256Mi"}, ratio: 0, wantErr: true},
		{name: "ratio above 1", env: map[string]string{Env: "256Mi"}, ratio: 1.5, wantErr: true},
		{name: "ratio NaN", env: map[string]string{Env: "256Mi"}, ratio: math.NaN(), wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var asked []int64
			got, err := Set(func(k string) string { return c.env[k] }, c.ratio, func(n int64) int64 {
				asked = append(asked, n)
				return 4242 // the runtime's limit before (or, for -1, now)
			})
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, want an error: %t", err, c.wantErr)
			}
			if c.wantErr {
				if len(asked) != 0 {
					t.Errorf("set the runtime's limit %v on bad input", asked)
				}
				return
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("limit (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.set, asked); diff != "" {
				t.Errorf("runtime asked (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSetRuntime sets the real runtime's limit and reads it back.
func TestSetRuntime(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	got, err := Set(func(k string) string { return map[string]string{Env: "1Gi"}[k] }, 0.75, debug.SetMemoryLimit)
	if err != nil {
		t.Fatal(err)
	}
	if now := debug.SetMemoryLimit(-1); now != 768<<20 || got.Bytes != now {
		t.Errorf("runtime limit %d, Set said %d; want %d", now, got.Bytes, 768<<20)
	}
}

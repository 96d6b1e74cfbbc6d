package memlimit

import (
	"runtime/debug"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSet(t *testing.T) {
	const mi = 1 << 20
	cases := []struct {
		name    string
		env     map[string]string
		reserve int64
		want    Limit
		set     []int64 // what Set asked the runtime for
		wantErr bool
	}{
		{name: "the chart's: the container's limit in bytes, less the reserve", env: map[string]string{Env: "402653184"}, reserve: DefaultReserve,
			want: Limit{Bytes: 336 * mi, Source: Env, Container: 384 * mi}, set: []int64{336 * mi}},
		{name: "a quantity", env: map[string]string{Env: "256Mi"}, reserve: 16 * mi,
			want: Limit{Bytes: 240 * mi, Source: Env, Container: 256 * mi}, set: []int64{240 * mi}},
		{name: "no reserve: the container's limit itself", env: map[string]string{Env: "128Mi"}, reserve: 0,
			want: Limit{Bytes: 128 * mi, Source: Env, Container: 128 * mi}, set: []int64{128 * mi}},
		{name: "a small limit keeps half of it", env: map[string]string{Env: "96Mi"}, reserve: DefaultReserve,
			want: Limit{Bytes: 48 * mi, Source: Env, Container: 96 * mi}, set: []int64{48 * mi}},
		{name: "GOMEMLIMIT is the user's and wins", env: map[string]string{Env: "256Mi", "GOMEMLIMIT": "200MiB"}, reserve: DefaultReserve,
			want: Limit{Bytes: 4242, Source: "GOMEMLIMIT", Container: 256 * mi}, set: []int64{-1}},
		{name: "no limit anywhere", env: nil, reserve: DefaultReserve,
			want: Limit{Bytes: 4242, Source: "none"}, set: []int64{-1}},
		{name: "not a quantity", env: map[string]string{Env: "lots"}, reserve: DefaultReserve, wantErr: true},
		{name: "zero", env: map[string]string{Env: "0"}, reserve: DefaultReserve, wantErr: true},
		{name: "negative", env: map[string]string{Env: "-5Mi"}, reserve: DefaultReserve, wantErr: true},
		{name: "negative reserve", env: map[string]string{Env: "256Mi"}, reserve: -1, wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var asked []int64
			got, err := Set(func(k string) string { return c.env[k] }, c.reserve, func(n int64) int64 {
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
	got, err := Set(func(k string) string { return map[string]string{Env: "1Gi"}[k] }, DefaultReserve, debug.SetMemoryLimit)
	if err != nil {
		t.Fatal(err)
	}
	if now := debug.SetMemoryLimit(-1); now != 1024<<20-DefaultReserve || got.Bytes != now {
		t.Errorf("runtime limit %d, Set said %d; want %d", now, got.Bytes, 1024<<20-DefaultReserve)
	}
}

package lincheck

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/go-cmp/cmp"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
)

// op is one recorded operation for the tables: who, what, on which key, when, and the tokens.
type op struct {
	kind           Kind
	client, key    string
	call, ret      int64
	keyTok, reqTok int64
}

func TestModel(t *testing.T) {
	acq := func(c, k string, call, ret, tok, req int64) op { return op{Acquire, c, k, call, ret, tok, req} }
	rel := func(c, k string, call, ret int64) op { return op{Release, c, k, call, ret, 0, 0} }
	cases := map[string]struct {
		ops  []op
		want porcupine.CheckResult
	}{
		"one after the other, tokens rising": {
			ops:  []op{acq("a", "k", 0, 10, 5, 5), rel("a", "k", 11, 12), acq("b", "k", 1, 20, 7, 7), rel("b", "k", 21, 22)},
			want: porcupine.Ok,
		},
		"b asked before a released and was granted after: fine": {
			ops:  []op{acq("a", "k", 0, 2, 5, 5), acq("b", "k", 1, 30, 7, 7), rel("a", "k", 10, 12)},
			want: porcupine.Ok,
		},
		"b granted while a still held (a released only later)": {
			ops:  []op{acq("a", "k", 0, 2, 5, 5), acq("b", "k", 3, 4, 7, 7), rel("a", "k", 10, 12)},
			want: porcupine.Illegal,
		},
		"the next holder's token is not above": {
			ops:  []op{acq("a", "k", 0, 2, 5, 5), rel("a", "k", 3, 4), acq("b", "k", 5, 6, 5, 5)},
			want: porcupine.Illegal,
		},
		"the next holder's token is below the request token the last one showed": {
			ops:  []op{acq("a", "k", 0, 2, 5, 9), rel("a", "k", 3, 4), acq("b", "k", 5, 6, 7, 7)},
			want: porcupine.Illegal,
		},
		"two keys are independent": {
			ops:  []op{acq("a", "k1", 0, 2, 5, 5), acq("b", "k2", 1, 3, 3, 3), rel("a", "k1", 4, 5), rel("b", "k2", 4, 5)},
			want: porcupine.Ok,
		},
		"a release by someone who does not hold": {
			ops:  []op{acq("a", "k", 0, 2, 5, 5), rel("b", "k", 3, 4)},
			want: porcupine.Illegal,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := NewHistory()
			for _, o := range tc.ops {
				h.Add(Input{Kind: o.kind, Key: o.key, Client: locksv1.HolderID{Owner: o.client}}, Output{KeyToken: o.keyTok, RequestToken: o.reqTok}, o.call, o.ret)
			}
			got := h.Check(10 * time.Second)
			if diff := cmp.Diff(tc.want, got.Verdict); diff != "" {
				t.Errorf("verdict (-want +got):\n%s\n%s", diff, got.Explanation)
			}
		})
	}
}

// Clients are holder identities compared field by field: owner "alice#1" is not alice's pull 1,
// so the second cannot release what the first acquired.
func TestModelComparesClientsStructurally(t *testing.T) {
	h := NewHistory()
	h.Add(Input{Kind: Acquire, Key: "k", Client: locksv1.HolderID{Owner: "alice", Pull: 1}}, Output{KeyToken: 5, RequestToken: 5}, 0, 2)
	h.Add(Input{Kind: Release, Key: "k", Client: locksv1.HolderID{Owner: "alice#1"}}, Output{}, 3, 4)
	if got := h.Check(10 * time.Second); got.Verdict != porcupine.Illegal {
		t.Fatalf("a release by another identity rendering alike: %v, want Illegal", got.Verdict)
	}
}

// A holder in one cluster of a fleet and its namesake in another are two clients (docs/fleet.md
// "Identity is per cluster"): the second cannot release what the first acquired; the first can.
func TestModelTellsClustersApart(t *testing.T) {
	eu := locksv1.HolderID{Owner: "ci/deploy", Pull: 7, Session: "job/apply", Cluster: "eu-west-1"}
	us := eu
	us.Cluster = "us-east-1"
	for _, tc := range []struct {
		releaser locksv1.HolderID
		want     porcupine.CheckResult
	}{{us, porcupine.Illegal}, {eu, porcupine.Ok}} {
		h := NewHistory()
		h.Add(Input{Kind: Acquire, Key: "k", Client: eu}, Output{KeyToken: 5, RequestToken: 5}, 0, 2)
		h.Add(Input{Kind: Release, Key: "k", Client: tc.releaser}, Output{}, 3, 4)
		if got := h.Check(10 * time.Second); got.Verdict != tc.want {
			t.Errorf("%s acquires, %s releases: %v, want %v", eu, tc.releaser, got.Verdict, tc.want)
		}
	}
}

package v1alpha1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Identity is what the protocol compares, Describe what people read.
func TestHolderIdentityAndDescribe(t *testing.T) {
	type names struct{ Identity, Describe string }
	cases := map[string]struct {
		holder Holder
		want   names
	}{
		"owner and pull": {holder: Holder{Owner: "alice", Pull: 100}, want: names{"alice#100", "pull #100 (alice)"}},
		"owner only":     {holder: Holder{Owner: "ci/deploy"}, want: names{"ci/deploy", "ci/deploy"}},
		"session":        {holder: Holder{Owner: "bob", Session: "run-1"}, want: names{"bob (session run-1)", "bob"}},
		"in a cluster":   {holder: Holder{Owner: "alice", Session: "s", Cluster: "eu-west-1"}, want: names{"alice (session s) in eu-west-1", "alice in eu-west-1"}},
		"pull in a cluster": {holder: Holder{Owner: "alice", Pull: 100, Session: "job/apply", Cluster: "eu-west-1"},
			want: names{"alice#100 (session job/apply) in eu-west-1", "pull #100 (alice) in eu-west-1"}},
	}
	for name, tc := range cases {
		got := names{tc.holder.ID().String(), tc.holder.Describe()}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

// Identities are compared field by field: holders whose joined "owner#pull" would be one string
// are different identities, and so are their index keys.
func TestHolderIDIsStructural(t *testing.T) {
	ids := []HolderID{
		{Owner: "alice", Pull: 1},
		{Owner: "alice#1"},
		{Owner: "alice", Pull: 1, Session: "s"},
		{Owner: "alice#1", Session: "s"},
		{Owner: "https://issuer.example#alice"},
		{Owner: "https://issuer.example", Session: "alice"},
		{Owner: "a:b", Session: "c"},
		{Owner: "a", Session: "b:c"},
		{Owner: "1:a/0/0:"},
		// The cluster is a field of its own (docs/fleet.md "Identity is per cluster"): one
		// owner, pull and session in two clusters, or in a cluster and in none, are three
		// identities, and no session or cluster text can stand for another split.
		{Owner: "alice", Pull: 1, Session: "job/apply", Cluster: "eu-west-1"},
		{Owner: "alice", Pull: 1, Session: "job/apply", Cluster: "us-east-1"},
		{Owner: "alice", Pull: 1, Session: "job/apply"},
		{Owner: "alice", Pull: 1, Session: "job/apply/9:eu-west-1"},
		{Owner: "alice", Pull: 1, Session: "job/apply/9:eu-west-1", Cluster: "eu-west-1"},
		{Owner: "a", Session: "b", Cluster: "c"},
		{Owner: "a", Session: "b/1:c"},
	}
	keys := map[string]HolderID{}
	for i, a := range ids {
		for j, b := range ids {
			if (a == b) != (i == j) {
				t.Errorf("%#v == %#v is %v", a, b, a == b)
			}
		}
		if prev, dup := keys[a.Key()]; dup {
			t.Errorf("%#v and %#v share the key %q", prev, a, a.Key())
		}
		keys[a.Key()] = a
	}
}

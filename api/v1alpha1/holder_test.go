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
	}
	for name, tc := range cases {
		got := names{tc.holder.Identity(), tc.holder.Describe()}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
}

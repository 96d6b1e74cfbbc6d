package v1alpha1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestIdentityAndDescribe(t *testing.T) {
	cases := map[string]struct {
		tc           Holder
		wantIdentity string
		wantDescribe string
	}{
		"owner and pull": {tc: Holder{Owner: "alice", Pull: 100}, wantIdentity: "alice#100", wantDescribe: "pull #100 (alice)"},
		"owner only":     {tc: Holder{Owner: "ci/deploy"}, wantIdentity: "ci/deploy", wantDescribe: "ci/deploy"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.wantIdentity, tc.tc.Identity()); diff != "" {
				t.Errorf("Identity (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantDescribe, tc.tc.Describe()); diff != "" {
				t.Errorf("Describe (-want +got):\n%s", diff)
			}
		})
	}
}

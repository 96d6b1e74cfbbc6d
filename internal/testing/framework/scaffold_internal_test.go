package framework

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestOutsideClusterArgs(t *testing.T) {
	cases := map[string]struct {
		deployment []string
		want       []string
	}{
		"listen addresses move to loopback, the rest stays, the namespace is added": {
			deployment: []string{"--leader-elect", "--metrics-bind-address=:8443", "--health-probe-bind-address=:8081", "--active-active"},
			want: []string{"--leader-elect", "--metrics-bind-address=127.0.0.1:1", "--health-probe-bind-address=127.0.0.1:2", "--active-active",
				"--leader-election-namespace=team", "--membership-namespace=team"},
		},
		"no listen addresses: only the namespace is added": {
			deployment: nil,
			want:       []string{"--leader-election-namespace=team", "--membership-namespace=team"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := OutsideClusterArgs(tc.deployment, "team", "127.0.0.1:1", "127.0.0.1:2")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseManifests(t *testing.T) {
	text := "---\n# only a comment\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: turnstile-controller-manager\n" +
		"spec:\n  template:\n    spec:\n      terminationGracePeriodSeconds: 10\n---\n\n---\nkind: ServiceAccount\nmetadata:\n  name: sa\n"
	ms, err := ParseManifests(text)
	if err != nil {
		t.Fatal(err)
	}
	type summary struct{ Kind, Name string }
	var got []summary
	for _, m := range ms {
		got = append(got, summary{m.Kind(), m.Meta("name")})
	}
	want := []summary{{"Deployment", "turnstile-controller-manager"}, {"ServiceAccount", "sa"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("manifests (-want +got):\n%s", diff)
	}
	if grace := ms[0].Path("spec", "template", "spec", "terminationGracePeriodSeconds"); grace != float64(10) {
		t.Errorf("Path to terminationGracePeriodSeconds = %#v, want 10", grace)
	}
	if v := ms[0].Path("spec", "template", "spec", "terminationGracePeriodSeconds", "deeper"); v != nil {
		t.Errorf("Path through a number = %#v, want nil", v)
	}
	if _, err := ParseManifests("kind: [unclosed"); err == nil {
		t.Error("a broken document parsed without an error")
	}
}

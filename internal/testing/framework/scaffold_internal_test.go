package framework

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestOutsideClusterArgs(t *testing.T) {
	cases := map[string]struct {
		deployment []string
		want       []string
	}{
		"listen addresses move to loopback, the rest stays, nothing is added": {
			deployment: []string{"--leader-elect", "--metrics-bind-address=:8443", "--health-probe-bind-address=:8081", "--active-active"},
			want:       []string{"--leader-elect", "--metrics-bind-address=127.0.0.1:1", "--health-probe-bind-address=127.0.0.1:2", "--active-active"},
		},
		"no listen addresses: nothing changes": {
			deployment: []string{"--active-active"},
			want:       []string{"--active-active"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := OutsideClusterArgs(tc.deployment, "127.0.0.1:1", "127.0.0.1:2")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDownwardEnv(t *testing.T) {
	env := []corev1.EnvVar{
		{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "PLAIN", Value: "v"},
	}
	got, err := DownwardEnv(env, "team", "manager-a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"POD_NAMESPACE=team", "POD_NAME=manager-a", "PLAIN=v"}, got); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if _, err := DownwardEnv([]corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}}}, "team", "a"); err == nil {
		t.Error("status.hostIP resolved to something")
	}
}

func TestContainerEnvResourceFieldRef(t *testing.T) {
	ctr := corev1.Container{
		Env: []corev1.EnvVar{
			{Name: "MEMORY_LIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}},
			{Name: "MEM_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.memory", Divisor: resource.MustParse("1Mi")}}},
			{Name: "CPUS", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
		},
		Resources: corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("384Mi"), corev1.ResourceCPU: resource.MustParse("500m")},
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
	}
	got, err := ContainerEnv(ctr, "team", "manager-a")
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet rounds up: 500m of a core is 1.
	if diff := cmp.Diff([]string{"MEMORY_LIMIT=402653184", "MEM_MI=64", "CPUS=1"}, got); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	ctr.Resources = corev1.ResourceRequirements{}
	if _, err := ContainerEnv(ctr, "team", "a"); err == nil {
		t.Error("a limit the container does not set resolved to something")
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

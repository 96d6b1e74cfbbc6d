package kubelet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestResolveValueFrom(t *testing.T) {
	container := map[string]any{"resources": map[string]any{
		"limits":   map[string]any{"memory": "256Mi", "cpu": "500m"},
		"requests": map[string]any{"memory": "64Mi"},
	}}
	pod := PodOf{Namespace: "ns", Name: "p-1", Node: "node-a", ServiceAccount: "sa", IP: "10.0.0.7"}
	for _, tc := range []struct {
		from map[string]any
		want string
	}{
		{map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.namespace"}}, "ns"},
		{map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}}, "p-1"},
		{map[string]any{"fieldRef": map[string]any{"fieldPath": "spec.nodeName"}}, "node-a"},
		{map[string]any{"resourceFieldRef": map[string]any{"resource": "limits.memory"}}, "268435456"},
		{map[string]any{"resourceFieldRef": map[string]any{"resource": "limits.memory", "divisor": "1Mi"}}, "256"},
		{map[string]any{"resourceFieldRef": map[string]any{"resource": "requests.memory", "divisor": "1Mi"}}, "64"},
		// The kubelet rounds up: 500m of a core is 1.
		{map[string]any{"resourceFieldRef": map[string]any{"resource": "limits.cpu"}}, "1"},
		{map[string]any{"resourceFieldRef": map[string]any{"resource": "limits.cpu", "divisor": "1m"}}, "500"},
	} {
		got, err := ResolveValueFrom(tc.from, container, pod)
		if err != nil || got != tc.want {
			t.Errorf("%v = %q, %v; want %q", tc.from, got, err, tc.want)
		}
	}
	if _, err := ResolveValueFrom(map[string]any{"resourceFieldRef": map[string]any{"resource": "requests.cpu"}}, container, pod); err == nil {
		t.Error("requests.cpu without a request resolved to something")
	}
}

func TestCommand(t *testing.T) {
	img := Image{Entrypoint: []string{"/manager"}, Cmd: []string{"--default"}}
	for name, tc := range map[string]struct {
		container map[string]any
		want      []string
	}{
		"the image's entrypoint and cmd":      {map[string]any{}, []string{"/manager", "--default"}},
		"args replace the image's cmd":        {map[string]any{"args": []any{"--a"}}, []string{"/manager", "--a"}},
		"a command drops the image's cmd too": {map[string]any{"command": []any{"/other"}}, []string{"/other"}},
		"command and args":                    {map[string]any{"command": []any{"/manager"}, "args": []any{"--b"}}, []string{"/manager", "--b"}},
	} {
		if diff := cmp.Diff(tc.want, Command(tc.container, img)); diff != "" {
			t.Errorf("%s: (-want +got)\n%s", name, diff)
		}
	}
}

func TestUser(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0::/root:/sbin/nologin\nnonroot:x:65532:65533::/home/nonroot:/sbin/nologin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	nonRoot := map[string]any{"securityContext": map[string]any{"runAsNonRoot": true}}
	for name, tc := range map[string]struct {
		podSpec, container map[string]any
		img                Image
		want, wantErr      string
	}{
		"the image's user":                  {nonRoot, map[string]any{}, Image{User: "65532:65532"}, "65532:65532", ""},
		"its group from the image's passwd": {nonRoot, map[string]any{}, Image{User: "65532", Root: root}, "65532:65533", ""},
		"runAsUser wins":                    {nonRoot, map[string]any{"securityContext": map[string]any{"runAsUser": 1000.0, "runAsGroup": 1000.0}}, Image{User: "65532:65532"}, "1000:1000", ""},
		"a named user cannot be verified":   {nonRoot, map[string]any{}, Image{User: "nonroot"}, "", "non-numeric user (nonroot)"},
		"root is refused":                   {nonRoot, map[string]any{}, Image{User: "0:0"}, "", "non-root"},
		"no user is root, refused":          {nonRoot, map[string]any{}, Image{}, "", "will run as root"},
		"root without runAsNonRoot":         {map[string]any{}, map[string]any{}, Image{}, "0:0", ""},
	} {
		got, err := User(tc.podSpec, tc.container, tc.img)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: %q, %v; want an error with %q", name, got, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("%s: %q, %v; want %q", name, got, err, tc.want)
		}
	}
}

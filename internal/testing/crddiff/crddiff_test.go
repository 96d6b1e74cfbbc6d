package crddiff

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

func lockRequestCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "crd", "bases", "locks.turnstile.dev_lockrequests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

// schemaAt is the schema node at a path of dot-separated property names ("[*]" steps into
// items) of the CRD as plain maps, for a test to change.
func schemaAt(crd map[string]any, path string) map[string]any {
	versions := crd["spec"].(map[string]any)["versions"].([]any)
	s := versions[0].(map[string]any)["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)
	for _, name := range strings.Split(path, ".") {
		if name == "[*]" {
			s = s["items"].(map[string]any)
			continue
		}
		s = s["properties"].(map[string]any)[name].(map[string]any)
	}
	return s
}

// mutated is the LockRequest CRD with f applied to it as plain maps.
func mutated(t *testing.T, f func(crd map[string]any)) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := yaml.Marshal(lockRequestCRD(t))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	if data, err = yaml.Marshal(m); err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

func TestCompare(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(crd map[string]any)
		want   []string
	}{
		"the same CRD": {func(map[string]any) {}, nil},
		"a description rewritten": {func(c map[string]any) {
			schemaAt(c, "spec.priority")["description"] = "another text"
		}, nil},
		"an optional field added": {func(c map[string]any) {
			schemaAt(c, "spec")["properties"].(map[string]any)["newField"] = map[string]any{"type": "string"}
		}, nil},
		"a limit raised, a rule and an enum value dropped": {func(c map[string]any) {
			repo := schemaAt(c, "spec.locks.[*].repo")
			repo["maxLength"] = 400
			repo["x-kubernetes-validations"] = repo["x-kubernetes-validations"].([]any)[:1]
			mode := schemaAt(c, "spec.locks.[*].mode")
			mode["enum"] = append(mode["enum"].([]any), "Intent")
		}, nil},
		"a field removed": {func(c map[string]any) {
			delete(schemaAt(c, "spec")["properties"].(map[string]any), "reason")
		}, []string{"v1alpha1 .spec.reason: field removed"}},
		"a default changed": {func(c map[string]any) {
			schemaAt(c, "spec.priority")["default"] = "High"
		}, []string{`v1alpha1 .spec.priority: default changed from "Normal" to "High"`}},
		"a default added": {func(c map[string]any) {
			schemaAt(c, "spec.locks.[*].project")["default"] = "main"
		}, []string{`v1alpha1 .spec.locks[*].project: default "main" added`}},
		"validation tightened": {func(c map[string]any) {
			repo := schemaAt(c, "spec.locks.[*].repo")
			repo["maxLength"] = 100
			repo["x-kubernetes-validations"] = append(repo["x-kubernetes-validations"].([]any), map[string]any{"rule": "!self.contains('_')"})
			schemaAt(c, "spec.locks")["maxItems"] = 8
			item := schemaAt(c, "spec.locks.[*]")
			item["required"] = append(item["required"].([]any), "project")
			priority := schemaAt(c, "spec.priority")
			priority["enum"] = priority["enum"].([]any)[:3]
		}, []string{
			`v1alpha1 .spec.locks: maxItems lowered from 32 to 8`,
			`v1alpha1 .spec.locks[*].project: field became required`,
			`v1alpha1 .spec.locks[*].repo: maxLength lowered from 200 to 100`,
			`v1alpha1 .spec.locks[*].repo: validation rule added or changed: !self.contains('_')`,
			`v1alpha1 .spec.priority: enum value "Critical" removed`,
		}},
		"a field added with rules that hold without it": {func(c map[string]any) {
			item := schemaAt(c, "spec.locks.[*]")
			item["properties"].(map[string]any)["weight"] = map[string]any{"type": "integer"}
			item["x-kubernetes-validations"] = append(item["x-kubernetes-validations"].([]any),
				map[string]any{"rule": "!has(self.weight) || (has(self.mode) && self.mode == 'Shared')"},
				map[string]any{"rule": "has(self.weight) ? self.weight > 0 : true"},
				map[string]any{"rule": "!(has(self.weight) && self.weight > 100)"})
		}, nil},
		"a field added with rules that refuse objects without it": {func(c map[string]any) {
			item := schemaAt(c, "spec.locks.[*]")
			item["properties"].(map[string]any)["weight"] = map[string]any{"type": "integer"}
			item["x-kubernetes-validations"] = append(item["x-kubernetes-validations"].([]any),
				// Absent, weight makes each of these false or an error: stored objects fail them.
				map[string]any{"rule": "has(self.weight) && self.weight > 0"},
				map[string]any{"rule": "self.weight > 0 || !has(self.weight) && self.mode == 'Shared'"},
				map[string]any{"rule": "(self.path != '' ? true : true) || !has(self.weight) && false"},
				// A guard of a field the old schema had says nothing about stored objects.
				map[string]any{"rule": "!has(self.project) || size(self.project) > 1"},
				map[string]any{"rule": "!has(self.weight) ||"})
		}, []string{
			`v1alpha1 .spec.locks[*]: validation rule added or changed: !has(self.project) || size(self.project) > 1`,
			`v1alpha1 .spec.locks[*]: validation rule added or changed: !has(self.weight) ||`,
			`v1alpha1 .spec.locks[*]: validation rule added or changed: (self.path != '' ? true : true) || !has(self.weight) && false`,
			`v1alpha1 .spec.locks[*]: validation rule added or changed: has(self.weight) && self.weight > 0`,
			`v1alpha1 .spec.locks[*]: validation rule added or changed: self.weight > 0 || !has(self.weight) && self.mode == 'Shared'`,
		}},
		"a type changed": {func(c map[string]any) {
			schemaAt(c, "spec.priority")["type"] = "integer"
		}, []string{`v1alpha1 .spec.priority: type changed from "string" to "integer"`}},
		"the list semantics changed": {func(c map[string]any) {
			schemaAt(c, "spec.locks")["x-kubernetes-list-type"] = "set"
		}, []string{`v1alpha1 .spec.locks: x-kubernetes-list-type changed from "atomic" to "set"`}},
		"the version no longer served": {func(c map[string]any) {
			c["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)["served"] = false
		}, []string{"v1alpha1: version no longer served"}},
		"the status subresource removed": {func(c map[string]any) {
			delete(c["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any), "subresources")
		}, []string{"v1alpha1: status subresource removed"}},
		"a short name removed": {func(c map[string]any) {
			delete(c["spec"].(map[string]any)["names"].(map[string]any), "shortNames")
		}, []string{"CRD lockrequests.locks.turnstile.dev: short name lr removed"}},
	} {
		t.Run(name, func(t *testing.T) {
			old, changed := lockRequestCRD(t), mutated(t, tc.mutate)
			var got []string
			for _, c := range Compare(old, changed) {
				got = append(got, c.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCompareBothWays: a field added is nothing to an upgrade and a removal to a downgrade.
func TestCompareBothWays(t *testing.T) {
	old := lockRequestCRD(t)
	changed := mutated(t, func(c map[string]any) {
		schemaAt(c, "spec")["properties"].(map[string]any)["intent"] = map[string]any{"type": "string"}
	})
	if up := Compare(old, changed); len(up) != 0 {
		t.Errorf("upgrade: %v", up)
	}
	down := Compare(changed, old)
	if len(down) != 1 || down[0].String() != "v1alpha1 .spec.intent: field removed" {
		t.Errorf("downgrade: %v", down)
	}
}

// TestCompareGuardWhereUnknownFieldsWereKept: a node that kept unknown fields did not prune a
// field it did not know, so a stored object may have the field the new schema adds, and a
// rule guarded by its absence may refuse it.
func TestCompareGuardWhereUnknownFieldsWereKept(t *testing.T) {
	preserve := func(c map[string]any) { schemaAt(c, "spec.locks.[*]")["x-kubernetes-preserve-unknown-fields"] = true }
	old := mutated(t, preserve)
	changed := mutated(t, func(c map[string]any) {
		preserve(c)
		item := schemaAt(c, "spec.locks.[*]")
		item["properties"].(map[string]any)["weight"] = map[string]any{"type": "integer"}
		item["x-kubernetes-validations"] = append(item["x-kubernetes-validations"].([]any),
			map[string]any{"rule": "!has(self.weight) || self.weight > 0"})
	})
	var got []string
	for _, c := range Compare(old, changed) {
		got = append(got, c.String())
	}
	want := []string{"v1alpha1 .spec.locks[*]: validation rule added or changed: !has(self.weight) || self.weight > 0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}

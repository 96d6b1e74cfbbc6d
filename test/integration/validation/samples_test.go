package validation

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
)

// TestSamples checks that every sample in config/samples decodes strictly into its Go type and
// is accepted by the API server with strict field validation (so a misspelled field fails too).
func TestSamples(t *testing.T) {
	ns := newNamespace(t)
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "config", "samples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var samples []string
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			samples = append(samples, f)
		}
	}
	if len(samples) == 0 {
		t.Fatal("no samples found in config/samples")
	}
	for _, f := range samples {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(data, &u.Object); err != nil {
				t.Fatalf("decode: %v", err)
			}
			gvk := u.GroupVersionKind()
			typed, err := framework.Scheme.New(gvk)
			if err != nil {
				t.Fatalf("kind %s is not a Turnstile type: %v", gvk, err)
			}
			if err := yaml.UnmarshalStrict(data, typed); err != nil {
				t.Fatalf("strict decode into %T: %v", typed, err)
			}
			if u.GetNamespace() != "" {
				t.Fatalf("samples carry no namespace (it is the team's lock space), found %q", u.GetNamespace())
			}
			mapping, err := k.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Fatal(err)
			}
			if mapping.Scope.Name() == "namespace" {
				u.SetNamespace(ns)
			}
			if err := k.Create(ctx(t), u, client.FieldValidation("Strict")); err != nil {
				t.Fatalf("sample rejected: %v", err)
			}
			if u.GetNamespace() == "" {
				// Cluster-scoped (CommandLock): do not leave it behind for other tests.
				if err := k.Delete(context.Background(), u); err != nil {
					t.Errorf("delete %s: %v", u.GetName(), err)
				}
			}
			if strings.TrimSpace(u.GetName()) == "" {
				t.Errorf("sample has no name")
			}
		})
	}
}

package framework

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// Manifest is one rendered Kubernetes manifest (helm template, kubectl kustomize), as plain
// maps: what the install tools produce, read without a scheme.
type Manifest map[string]any

// Kind is the manifest's kind.
func (m Manifest) Kind() string { s, _ := m["kind"].(string); return s }

// Meta is a string field of the manifest's metadata ("name", "namespace").
func (m Manifest) Meta(field string) string {
	md, _ := m["metadata"].(map[string]any)
	s, _ := md[field].(string)
	return s
}

// Path is the value at keys below the manifest's root, nil when any step is missing or not a map.
func (m Manifest) Path(keys ...string) any {
	var v any = map[string]any(m)
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

var documentSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// ParseManifests splits a multi-document YAML stream into its manifests, skipping empty
// documents.
func ParseManifests(text string) ([]Manifest, error) {
	var out []Manifest
	for _, doc := range documentSeparator.Split(text, -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var m Manifest
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return nil, fmt.Errorf("parse manifest: %w\n%s", err, doc)
		}
		if m != nil {
			out = append(out, m)
		}
	}
	return out, nil
}

// Unstructured converts a typed object to an unstructured one of kind gvk, as a client that
// writes without a scheme (or keeps the API server's response as it is) needs it.
func Unstructured(obj runtime.Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

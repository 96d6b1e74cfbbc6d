package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const bundleFile = "install.yaml"

// writeBundle builds config/default with kustomize (its library, at the version kubectl
// embeds), the manager's image set to the release's digest, into out/install.yaml: what
// `kubectl apply --server-side -f install.yaml` installs. As Kueue's manifests.yaml, it is the
// kustomize build, not a rendering of the chart: the two install paths stay the two that
// test/chart and test/install compare and install.
func writeBundle(o options, digest v1.Hash, work string) error {
	config := filepath.Join(work, "config")
	if err := copyTree(filepath.Join(o.source, "config"), config); err != nil {
		return err
	}
	overlay := filepath.Join(config, "release")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		return err
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../default
images:
- name: controller
  newName: %s
  digest: %s
`, o.image, digest)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		return err
	}
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
	if err != nil {
		return fmt.Errorf("kustomize build config/default: %w", err)
	}
	want := o.image + "@" + digest.String()
	var images []string
	for _, r := range resources.Resources() {
		if r.GetKind() != "Deployment" {
			continue
		}
		containers, err := r.GetSlice("spec.template.spec.containers")
		if err != nil {
			return err
		}
		for _, c := range containers {
			if m, ok := c.(map[string]any); ok {
				images = append(images, fmt.Sprint(m["image"]))
			}
		}
	}
	if len(images) != 1 || images[0] != want {
		return fmt.Errorf("the bundle's Deployment runs %q, want exactly [%s]", images, want)
	}
	body, err := resources.AsYaml()
	if err != nil {
		return err
	}
	header := strings.Join([]string{
		"# Turnstile install bundle: CRDs, RBAC, admission policies, the manager's Deployment.",
		"#   kubectl apply --server-side -f " + bundleFile,
		"# Image: " + want,
		"",
	}, "\n")
	return os.WriteFile(filepath.Join(o.out, bundleFile), append([]byte(header), body...), 0o644)
}

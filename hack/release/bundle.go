package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// bundle is one install bundle: a kustomize entry point of config/, built with the image set,
// for the Kubernetes versions whose admission it matches (docs/install.md, "Supported
// Kubernetes versions").
type bundle struct {
	file     string // in the release
	dir      string // under config/
	clusters string // the clusters it is for
}

// bundleFile is the bundle of config/default, for Kubernetes 1.36 and later.
const bundleFile = "install.yaml"

// bundles are the install bundles, one per kustomize entry point docs/install.md names: the
// default, and the two for clusters that serve no MutatingAdmissionPolicy v1 (1.33 to 1.35).
var bundles = []bundle{
	{bundleFile, "default", "Kubernetes 1.36 and later (MutatingAdmissionPolicy v1)"},
	{"install-validating-only.yaml", "overlays/validating-only", "Kubernetes 1.33 to 1.35 (no MutatingAdmissionPolicy served)"},
	{"install-mutating-v1beta1.yaml", "overlays/mutating-v1beta1", "Kubernetes 1.34 and 1.35 with MutatingAdmissionPolicy v1beta1 enabled"},
}

// writeBundles builds every bundle of bundles with kustomize (its library, at the version
// kubectl embeds), the manager's image set to the release's digest: what `kubectl apply
// --server-side -f install.yaml` installs. As Kueue's manifests.yaml, each is the kustomize
// build, not a rendering of the chart: the two install paths stay the two that test/chart and
// test/install compare and install.
func writeBundles(o options, digest v1.Hash, work string) error {
	config := filepath.Join(work, "config")
	if err := copyTree(filepath.Join(o.source, "config"), config); err != nil {
		return err
	}
	for i, b := range bundles {
		if _, err := os.Stat(filepath.Join(config, b.dir)); errors.Is(err, fs.ErrNotExist) && b.file != bundleFile {
			// A source from before the overlay (the previous release test/release builds):
			// its release has the bundles its tree has, as it would have had then.
			continue
		}
		if err := writeBundle(o, digest, config, fmt.Sprintf("release-%d", i), b); err != nil {
			return fmt.Errorf("%s: %w", b.file, err)
		}
	}
	return nil
}

// writeBundle writes b: an overlay beside config/default (config/NAME) that sets the image on
// b.dir, built into out/b.file.
func writeBundle(o options, digest v1.Hash, config, name string, b bundle) error {
	overlay := filepath.Join(config, name)
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		return err
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ../%s
images:
- name: controller
  newName: %s
  digest: %s
`, b.dir, o.image, digest)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		return err
	}
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
	if err != nil {
		return fmt.Errorf("kustomize build config/%s: %w", b.dir, err)
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
		"# For " + b.clusters + "; docs/install.md says which bundle is for which version.",
		"#   kubectl apply --server-side -f " + b.file,
		"# Image: " + want,
		"",
	}, "\n")
	return os.WriteFile(filepath.Join(o.out, b.file), append([]byte(header), body...), 0o644)
}

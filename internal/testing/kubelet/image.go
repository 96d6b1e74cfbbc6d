package kubelet

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// ReleaseImageSpec is the path, below the repository's root, of the release image's runtime
// definition: the user, entrypoint, working directory and environment that make release
// (hack/release) writes into the image's config.
const ReleaseImageSpec = "hack/release/image.yaml"

// ImageConfig reads ReleaseImageSpec: the image config that the release's image has, for a
// test that runs the manager as the image would without building the image (test/chart).
func ImageConfig(repoRoot string) (Image, error) {
	data, err := os.ReadFile(filepath.Join(repoRoot, ReleaseImageSpec))
	if err != nil {
		return Image{}, err
	}
	var spec struct {
		User       string   `json:"user"`
		UserName   string   `json:"userName"`
		Entrypoint []string `json:"entrypoint"`
		WorkingDir string   `json:"workingDir"`
		Env        []string `json:"env"`
	}
	if err := yaml.UnmarshalStrict(data, &spec); err != nil {
		return Image{}, fmt.Errorf("%s: %w", ReleaseImageSpec, err)
	}
	return Image{User: spec.User, Entrypoint: spec.Entrypoint, Env: spec.Env}, nil
}

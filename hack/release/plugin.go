package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

const (
	pluginName = "kubectl-turnstile"
	krewFile   = "krew/turnstile.yaml" // krew-index names a manifest after its plugin
)

// pluginArchive is the archive's file name for a platform, as krew plugins name theirs.
func pluginArchive(m meta, p platform) string {
	ext := ".tar.gz"
	if p.os == "windows" {
		ext = ".zip"
	}
	return fmt.Sprintf("%s_%s_%s_%s%s", pluginName, m.version, p.os, p.arch, ext)
}

// krewPlugin is krew's plugin manifest (krew.googlecontainertools.github.com/v1alpha2 Plugin),
// the fields this release sets.
type krewPlugin struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   krewMetadata `json:"metadata"`
	Spec       krewSpec     `json:"spec"`
}

type krewMetadata struct {
	Name string `json:"name"`
}

type krewSpec struct {
	Version          string         `json:"version"`
	Homepage         string         `json:"homepage"`
	ShortDescription string         `json:"shortDescription"`
	Description      string         `json:"description"`
	Caveats          string         `json:"caveats,omitempty"`
	Platforms        []krewPlatform `json:"platforms"`
}

type krewPlatform struct {
	Selector krewSelector `json:"selector"`
	URI      string       `json:"uri"`
	Sha256   string       `json:"sha256"`
	Bin      string       `json:"bin"`
}

type krewSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

// writePlugin writes the plugin's archives (the binary alone, mode 0755) and the krew manifest
// that names them by URL and sha256.
func writePlugin(o options, m meta, b binaries) error {
	manifest := krewPlugin{
		APIVersion: "krew.googlecontainertools.github.com/v1alpha2",
		Kind:       "Plugin",
		Metadata:   krewMetadata{Name: "turnstile"},
		Spec: krewSpec{
			Version:          m.version,
			Homepage:         projectURL,
			ShortDescription: "Take, wait for and release Turnstile locks; run a command under one",
			Description: `Turnstile serializes infrastructure changes with locks that are Kubernetes
resources. This plugin takes, waits for and releases them (acquire, release), runs a
command while holding one (run, like flock), freezes and thaws commands cluster-wide,
explains why a request waits (why), and serves a live dashboard.`,
			Caveats: `This plugin needs Turnstile installed in the cluster (its CRDs and manager):
see ` + projectURL + `/blob/main/docs/install.md`,
		},
	}
	base := strings.ReplaceAll(o.downloadURL, "{version}", m.version)
	for _, p := range pluginPlatforms {
		data, err := os.ReadFile(b.plugin[p])
		if err != nil {
			return err
		}
		files := []file{{name: p.exe(pluginName), mode: 0o755, data: data}}
		var archive []byte
		if p.os == "windows" {
			archive, err = zipBytes(files, m.epoch)
		} else {
			archive, err = tarGz(files, m.epoch)
		}
		if err != nil {
			return err
		}
		name := pluginArchive(m, p)
		if err := os.WriteFile(filepath.Join(o.out, name), archive, 0o644); err != nil {
			return err
		}
		sum := sha256.Sum256(archive)
		manifest.Spec.Platforms = append(manifest.Spec.Platforms, krewPlatform{
			Selector: krewSelector{MatchLabels: map[string]string{"os": p.os, "arch": p.arch}},
			URI:      strings.TrimSuffix(base, "/") + "/" + name,
			Sha256:   hex.EncodeToString(sum[:]),
			Bin:      p.exe(pluginName),
		})
	}
	out, err := yaml.Marshal(manifest)
	if err != nil {
		return err
	}
	header := "# krew plugin manifest of kubectl-turnstile " + m.version + ":\n#   kubectl krew install --manifest=" + krewFile + "\n"
	if err := os.MkdirAll(filepath.Join(o.out, filepath.Dir(krewFile)), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.out, krewFile), append([]byte(header), out...), 0o644)
}

// Package oci reads an OCI image layout as a container runtime reads an image, with none of
// the image builder's code: index.json, the image index it names, the manifest for a
// platform, its config and its layers, every blob checked against its digest and size, every
// layer's uncompressed content against the config's diff_ids; and it unpacks the layers in
// order into a root file system, applying each as the OCI image spec's changesets say
// (.wh.NAME deletes NAME from the layers below; .wh..wh..opq empties its directory of them).
// test/release runs the release's image from what it unpacks.
package oci

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Media types of the OCI image spec.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayerGz  = "application/vnd.oci.image.layer.v1.tar+gzip"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
	// AnnotationRefName names an index.json entry (a tag).
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// Descriptor points at a blob.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *Platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Platform is a manifest's platform in an index.
type Platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant,omitempty"`
}

// Index is an image index (index.json is one too).
type Index struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Manifests     []Descriptor      `json:"manifests"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// Manifest is an image manifest.
type Manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        Descriptor        `json:"config"`
	Layers        []Descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// Config is an image's configuration, the fields a runtime uses.
type Config struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Created      string `json:"created"`
	Config       struct {
		User       string            `json:"User"`
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd"`
		Env        []string          `json:"Env"`
		WorkingDir string            `json:"WorkingDir"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []struct {
		Created   string `json:"created"`
		CreatedBy string `json:"created_by"`
	} `json:"history"`
}

// Layout is an OCI image layout directory.
type Layout struct{ dir string }

// Open checks that dir is an OCI image layout (its oci-layout file).
func Open(dir string) (*Layout, error) {
	data, err := os.ReadFile(filepath.Join(dir, "oci-layout"))
	if err != nil {
		return nil, fmt.Errorf("%s is not an OCI image layout: %w", dir, err)
	}
	var v struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(data, &v); err != nil || v.Version != "1.0.0" {
		return nil, fmt.Errorf("%s/oci-layout: imageLayoutVersion %q (%w), want 1.0.0", dir, v.Version, err)
	}
	return &Layout{dir: dir}, nil
}

// Blob reads the blob a descriptor points at, and checks its size and digest.
func (l *Layout) Blob(d Descriptor) ([]byte, error) {
	alg, hexDigest, ok := strings.Cut(d.Digest, ":")
	if !ok || alg != "sha256" || len(hexDigest) != 64 || strings.ContainsAny(hexDigest, "/.") {
		return nil, fmt.Errorf("digest %q: want sha256:<64 hex digits>", d.Digest)
	}
	data, err := os.ReadFile(filepath.Join(l.dir, "blobs", alg, hexDigest))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != d.Size {
		return nil, fmt.Errorf("blob %s is %d bytes, its descriptor says %d", d.Digest, len(data), d.Size)
	}
	if got := Digest(data); got != d.Digest {
		return nil, fmt.Errorf("blob %s has digest %s", d.Digest, got)
	}
	return data, nil
}

// Digest is data's sha256 digest, as the OCI spec writes it.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// readJSON reads a blob and decodes it, checking its media type field against want.
func (l *Layout) readJSON(d Descriptor, want string, v any) error {
	if d.MediaType != want {
		return fmt.Errorf("%s: media type %q, want %q", d.Digest, d.MediaType, want)
	}
	data, err := l.Blob(d)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", d.Digest, err)
	}
	return nil
}

// ImageIndex is the image index that index.json names ref (org.opencontainers.image.ref.name),
// and its descriptor: its digest is what a registry would serve for the tag.
func (l *Layout) ImageIndex(ref string) (Descriptor, Index, error) {
	data, err := os.ReadFile(filepath.Join(l.dir, "index.json"))
	if err != nil {
		return Descriptor{}, Index{}, err
	}
	var top Index
	if err := json.Unmarshal(data, &top); err != nil {
		return Descriptor{}, Index{}, fmt.Errorf("index.json: %w", err)
	}
	var found []Descriptor
	for _, d := range top.Manifests {
		if d.Annotations[AnnotationRefName] == ref {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		return Descriptor{}, Index{}, fmt.Errorf("index.json names %q %d times, want once", ref, len(found))
	}
	var idx Index
	if err := l.readJSON(found[0], MediaTypeIndex, &idx); err != nil {
		return Descriptor{}, Index{}, err
	}
	if idx.SchemaVersion != 2 || idx.MediaType != MediaTypeIndex {
		return Descriptor{}, Index{}, fmt.Errorf("image index %s: schemaVersion %d, mediaType %q", found[0].Digest, idx.SchemaVersion, idx.MediaType)
	}
	return found[0], idx, nil
}

// Image is the manifest and config of the index's image for os/arch, as a runtime picks it.
func (l *Layout) Image(idx Index, os, arch string) (Descriptor, Manifest, Config, error) {
	var m Manifest
	var c Config
	for _, d := range idx.Manifests {
		if d.Platform == nil || d.Platform.OS != os || d.Platform.Architecture != arch {
			continue
		}
		if err := l.readJSON(d, MediaTypeManifest, &m); err != nil {
			return d, m, c, err
		}
		if m.SchemaVersion != 2 || m.MediaType != MediaTypeManifest {
			return d, m, c, fmt.Errorf("manifest %s: schemaVersion %d, mediaType %q", d.Digest, m.SchemaVersion, m.MediaType)
		}
		if err := l.readJSON(m.Config, MediaTypeConfig, &c); err != nil {
			return d, m, c, err
		}
		if c.OS != os || c.Architecture != arch {
			return d, m, c, fmt.Errorf("manifest %s for %s/%s has a config for %s/%s", d.Digest, os, arch, c.OS, c.Architecture)
		}
		if len(c.RootFS.DiffIDs) != len(m.Layers) || c.RootFS.Type != "layers" {
			return d, m, c, fmt.Errorf("manifest %s: %d layers, config rootfs %q with %d diff_ids", d.Digest, len(m.Layers), c.RootFS.Type, len(c.RootFS.DiffIDs))
		}
		return d, m, c, nil
	}
	return Descriptor{}, m, c, fmt.Errorf("the index has no image for %s/%s", os, arch)
}

// Layer is a layer's uncompressed tar stream, checked against its diff_id.
func (l *Layout) Layer(d Descriptor, diffID string) ([]byte, error) {
	blob, err := l.Blob(d)
	if err != nil {
		return nil, err
	}
	var data []byte
	switch d.MediaType {
	case MediaTypeLayerGz:
		zr, err := gzip.NewReader(bytes.NewReader(blob))
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", d.Digest, err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("layer %s: %w", d.Digest, err)
		}
	case MediaTypeLayer:
		data = blob
	default:
		return nil, fmt.Errorf("layer %s: media type %q is not one this reader unpacks", d.Digest, d.MediaType)
	}
	if got := Digest(data); got != diffID {
		return nil, fmt.Errorf("layer %s uncompresses to %s, the config's diff_id is %s", d.Digest, got, diffID)
	}
	return data, nil
}

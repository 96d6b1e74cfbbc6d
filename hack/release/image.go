package main

import (
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"sigs.k8s.io/yaml"
)

// imageYAML is the image's runtime definition, shared with test/chart.
//
//go:embed image.yaml
var imageYAML []byte

// imageSpec is image.yaml.
type imageSpec struct {
	User       string   `json:"user"`     // uid:gid
	UserName   string   `json:"userName"` // its name in /etc/passwd and /etc/group
	Entrypoint []string `json:"entrypoint"`
	WorkingDir string   `json:"workingDir"`
	Env        []string `json:"env"`
}

func loadImageSpec() (imageSpec, error) {
	var s imageSpec
	if err := yaml.UnmarshalStrict(imageYAML, &s); err != nil {
		return s, fmt.Errorf("image.yaml: %w", err)
	}
	if len(s.Entrypoint) != 1 || !strings.HasPrefix(s.Entrypoint[0], "/") {
		return s, fmt.Errorf("image.yaml: entrypoint %q: one absolute path, the manager's", s.Entrypoint)
	}
	if _, _, err := s.ids(); err != nil {
		return s, err
	}
	return s, nil
}

// ids are the user's numeric uid and gid, which must not be root's.
func (s imageSpec) ids() (uid, gid int, err error) {
	u, g, ok := strings.Cut(s.User, ":")
	if ok {
		uid, err = strconv.Atoi(u)
		if err == nil {
			gid, err = strconv.Atoi(g)
		}
	}
	if !ok || err != nil || uid == 0 || gid == 0 || s.UserName == "" {
		return 0, 0, fmt.Errorf("image.yaml: user %q (%q): want a named, numeric, non-root uid:gid, for the chart's runAsNonRoot", s.User, s.UserName)
	}
	return uid, gid, nil
}

// baseFiles are the base layer: the users and groups, the user's home, and /tmp. Nothing
// else: the manager is static, reaches only the API server (with the CA the kubelet mounts)
// and embeds the zone database.
func baseFiles(s imageSpec) []file {
	uid, gid, _ := s.ids()
	n := s.UserName
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", n, uid, gid, n, n)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", n, gid)
	return []file{
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "home/" + n, mode: 0o700, uid: uid, gid: gid, dir: true},
		{name: "root", mode: 0o700, dir: true},
		{name: "tmp", mode: 0o1777, dir: true},
	}
}

// imageResult is what the release records of the image.
type imageResult struct {
	digest    v1.Hash              // the image index's
	manifests map[platform]v1.Hash // each platform's image manifest
	layers    map[platform][]v1.Hash
}

// Labels and annotations of the image, as the OCI image spec names them.
const (
	annTitle       = "org.opencontainers.image.title"
	annDescription = "org.opencontainers.image.description"
	annSource      = "org.opencontainers.image.source"
	annURL         = "org.opencontainers.image.url"
	annVersion     = "org.opencontainers.image.version"
	annRevision    = "org.opencontainers.image.revision"
	annCreated     = "org.opencontainers.image.created"
	annRefName     = "org.opencontainers.image.ref.name"
	projectURL     = "https://github.com/turnstile-dev/turnstile"
)

func imageAnnotations(m meta) map[string]string {
	return map[string]string{
		annTitle:       "turnstile",
		annDescription: "Turnstile's manager: locks for infrastructure automation as Kubernetes custom resources",
		annSource:      projectURL,
		annURL:         projectURL,
		annVersion:     m.version,
		annRevision:    m.commit,
		annCreated:     m.epoch.Format(time.RFC3339),
	}
}

// writeImage writes the manager's image index into out/image (an OCI image layout whose
// index.json names it by the version) and its digest into out/image.digest.
func writeImage(o options, m meta, b binaries) (imageResult, error) {
	res := imageResult{manifests: map[platform]v1.Hash{}, layers: map[platform][]v1.Hash{}}
	spec, err := loadImageSpec()
	if err != nil {
		return res, err
	}
	base, err := layer(baseFiles(spec), m.epoch)
	if err != nil {
		return res, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range imagePlatforms {
		img, err := platformImage(spec, m, p, base, b.manager[p])
		if err != nil {
			return res, fmt.Errorf("%s: %w", p, err)
		}
		if res.manifests[p], err = img.Digest(); err != nil {
			return res, err
		}
		layers, err := img.Layers()
		if err != nil {
			return res, err
		}
		for _, l := range layers {
			d, err := l.Digest()
			if err != nil {
				return res, err
			}
			res.layers[p] = append(res.layers[p], d)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.os, Architecture: p.arch}},
		})
	}
	annotated, ok := mutate.Annotations(idx, imageAnnotations(m)).(v1.ImageIndex)
	if !ok {
		return res, fmt.Errorf("annotating the index did not give an index")
	}
	if res.digest, err = annotated.Digest(); err != nil {
		return res, err
	}
	lp, err := layout.Write(filepath.Join(o.out, "image"), empty.Index)
	if err != nil {
		return res, err
	}
	if err := lp.AppendIndex(annotated, layout.WithAnnotations(map[string]string{annRefName: m.version})); err != nil {
		return res, err
	}
	return res, os.WriteFile(filepath.Join(o.out, imageDigestFile), []byte(res.digest.String()+"\n"), 0o644)
}

const imageDigestFile = "image.digest"

// platformImage is the image for one platform: the base layer, then the manager at the
// entrypoint's path, run as the image's user.
func platformImage(spec imageSpec, m meta, p platform, base v1.Layer, manager string) (v1.Image, error) {
	data, err := os.ReadFile(manager)
	if err != nil {
		return nil, err
	}
	app, err := layer([]file{{name: strings.TrimPrefix(spec.Entrypoint[0], "/"), mode: 0o755, data: data}}, m.epoch)
	if err != nil {
		return nil, err
	}
	labels := imageAnnotations(m)
	created := v1.Time{Time: m.epoch}
	cfg := &v1.ConfigFile{
		Architecture: p.arch, OS: p.os, Created: created,
		Config: v1.Config{
			User: spec.User, Entrypoint: spec.Entrypoint, WorkingDir: spec.WorkingDir, Env: spec.Env, Labels: labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: "hack/release: base layer: /etc/passwd, /etc/group (" + spec.UserName + " " + spec.User + "), /home/" + spec.UserName + ", /root, /tmp",
		}},
		mutate.Addendum{Layer: app, MediaType: types.OCILayer, History: v1.History{
			Created: created, CreatedBy: fmt.Sprintf("hack/release: %s %s (%s), go build %s", spec.Entrypoint[0], m.version, p, strings.Join(buildFlags(m)[:3], " ")),
		}},
	)
	if err != nil {
		return nil, err
	}
	annotated, ok := mutate.Annotations(img, imageAnnotations(m)).(v1.Image)
	if !ok {
		return nil, fmt.Errorf("annotating the image did not give an image")
	}
	return annotated, nil
}

// layer is a gzip-compressed OCI layer of files.
func layer(files []file, mtime time.Time) (v1.Layer, error) {
	gz, err := tarGz(files, mtime)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(gz)), nil },
		tarball.WithMediaType(types.OCILayer))
}

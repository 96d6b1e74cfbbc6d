package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// layerEntry is a tar entry for a test layer.
type layerEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func tarOf(t *testing.T, entries ...layerEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ, mode := e.typ, e.mode
		if typ == 0 {
			typ = tar.TypeReg
		}
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: mode, Size: int64(len(e.body)), Linkname: e.link}
		if typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// tree lists root: "path" for files (with their content), "path/" for directories,
// "path -> target" for links.
func tree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out = append(out, rel+" -> "+target)
		case d.IsDir():
			out = append(out, rel+"/")
		default:
			data, _ := os.ReadFile(p)
			out = append(out, rel+"="+string(data))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestApplyLayerChangesets(t *testing.T) {
	root := t.TempDir()
	lower := tarOf(t,
		layerEntry{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "etc/passwd", body: "root"},
		layerEntry{name: "etc/group", body: "root"},
		layerEntry{name: "opaque/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "opaque/old", body: "old"},
		layerEntry{name: "opaque/sub/deep", body: "deep"},
		layerEntry{name: "gone/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "gone/file", body: "x"},
		layerEntry{name: "becomes-file/", typ: tar.TypeDir, mode: 0o755},
		layerEntry{name: "link", typ: tar.TypeSymlink, link: "etc/passwd"},
		layerEntry{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
	)
	upper := tarOf(t,
		layerEntry{name: "etc/.wh.group"},              // deletes etc/group
		layerEntry{name: "opaque/.wh..wh..opq"},        // empties opaque/ of the lower layer's files
		layerEntry{name: "opaque/new", body: "new"},    // but keeps this layer's
		layerEntry{name: ".wh.gone"},                   // deletes a whole directory
		layerEntry{name: "becomes-file", body: "file"}, // a file replaces a directory
		layerEntry{name: "etc/passwd", body: "root\nnonroot"},
		layerEntry{name: "hard", typ: tar.TypeLink, link: "etc/passwd"},
	)
	for _, l := range [][]byte{lower, upper} {
		if err := ApplyLayer(root, l); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"becomes-file=file", "etc/", "etc/passwd=root\nnonroot", "hard=root\nnonroot", "link -> etc/passwd",
		"opaque/", "opaque/new=new", "tmp/",
	}
	if diff := cmp.Diff(want, tree(t, root)); diff != "" {
		t.Errorf("root after both layers (-want +got):\n%s", diff)
	}
	fi, err := os.Stat(filepath.Join(root, "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&fs.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("tmp has mode %v, want sticky and 0777", fi.Mode())
	}
}

func TestApplyLayerRefusesEscapes(t *testing.T) {
	outside := t.TempDir()
	for name, layers := range map[string][][]byte{
		"a path out of the root": {tarOf(t, layerEntry{name: "../escaped", body: "x"})},
		"a write through a symbolic link": {
			tarOf(t, layerEntry{name: "evil", typ: tar.TypeSymlink, link: outside}),
			tarOf(t, layerEntry{name: "evil/escaped", body: "x"}),
		},
		"a hard link out of the root": {tarOf(t, layerEntry{name: "hard", typ: tar.TypeLink, link: "../../etc/passwd"})},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			var err error
			for _, l := range layers {
				if err = ApplyLayer(root, l); err != nil {
					break
				}
			}
			if err == nil {
				t.Fatal("applied")
			}
			if entries, _ := os.ReadDir(outside); len(entries) > 0 {
				t.Fatalf("wrote outside the root: %v", entries)
			}
		})
	}
}

// writeBlob stores data in the layout and returns its descriptor.
func writeBlob(t *testing.T, dir, mediaType string, data []byte) Descriptor {
	t.Helper()
	d := Descriptor{MediaType: mediaType, Digest: Digest(data), Size: int64(len(data))}
	p := filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(d.Digest, "sha256:"))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

func writeJSONBlob(t *testing.T, dir, mediaType string, v any) Descriptor {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return writeBlob(t, dir, mediaType, data)
}

func gz(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// testLayout writes a layout with one image index, tagged v1, of one linux/arm64 image.
func testLayout(t *testing.T, diffID func(layer []byte) string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	layer := tarOf(t, layerEntry{name: "manager", body: "#!binary", mode: 0o755})
	var cfg Config
	cfg.OS, cfg.Architecture = "linux", "arm64"
	cfg.Config.User = "65532:65532"
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{diffID(layer)}
	m := Manifest{SchemaVersion: 2, MediaType: MediaTypeManifest,
		Config: writeJSONBlob(t, dir, MediaTypeConfig, cfg),
		Layers: []Descriptor{writeBlob(t, dir, MediaTypeLayerGz, gz(t, layer))}}
	md := writeJSONBlob(t, dir, MediaTypeManifest, m)
	md.Platform = &Platform{OS: "linux", Architecture: "arm64"}
	idx := writeJSONBlob(t, dir, MediaTypeIndex, Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{md}})
	idx.Annotations = map[string]string{AnnotationRefName: "v1"}
	top, err := json.Marshal(Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{idx}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), top, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLayoutReadsAndUnpacks(t *testing.T) {
	l, err := Open(testLayout(t, Digest))
	if err != nil {
		t.Fatal(err)
	}
	_, idx, err := l.ImageIndex("v1")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := l.Image(idx, "linux", "amd64"); err == nil {
		t.Error("an image for linux/amd64, which the index has not")
	}
	_, m, c, err := l.Image(idx, "linux", "arm64")
	if err != nil {
		t.Fatal(err)
	}
	if c.Config.User != "65532:65532" {
		t.Errorf("user %q", c.Config.User)
	}
	root := t.TempDir()
	if err := l.Unpack(m, c, root); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"manager=#!binary"}, tree(t, root)); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func TestLayoutRefusesWhatDoesNotMatchItsDigest(t *testing.T) {
	t.Run("a layer whose content is not its diff_id", func(t *testing.T) {
		l, err := Open(testLayout(t, func([]byte) string { return Digest([]byte("another layer")) }))
		if err != nil {
			t.Fatal(err)
		}
		_, idx, err := l.ImageIndex("v1")
		if err != nil {
			t.Fatal(err)
		}
		_, m, c, err := l.Image(idx, "linux", "arm64")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unpack(m, c, t.TempDir()); err == nil || !strings.Contains(err.Error(), "diff_id") {
			t.Errorf("unpacked: %v", err)
		}
	})
	t.Run("a blob whose bytes are not its digest", func(t *testing.T) {
		dir := testLayout(t, Digest)
		blobs, err := filepath.Glob(filepath.Join(dir, "blobs", "sha256", "*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blobs {
			data, err := os.ReadFile(b)
			if err != nil {
				t.Fatal(err)
			}
			data[len(data)-1] ^= 1
			if err := os.WriteFile(b, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		l, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := l.ImageIndex("v1"); err == nil || !strings.Contains(err.Error(), "has digest") {
			t.Errorf("read a changed blob: %v", err)
		}
	})
}

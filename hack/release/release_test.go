package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/xeipuuv/gojsonschema"
)

var epoch = time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)

func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"v0.2.0": true, "v1.10.3": true, "v0.2.0-rc.1": true, "v0.0.0-552567d": true,
		"0.2.0": false, "v0.2": false, "v01.2.0": false, "v0.2.0+build.1": false, "v0.2.0-": false, "": false,
	} {
		if err := checkVersion(v); (err == nil) != ok {
			t.Errorf("checkVersion(%q) = %v", v, err)
		}
	}
}

// readTar lists a tar archive's headers as "name mode uid:gid type mtime" and its contents.
func readTar(t *testing.T, data []byte) []string {
	t.Helper()
	var out []string
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		out = append(out, strings.Join([]string{h.Name, fileMode(h.Mode).String(), string(rune(h.Typeflag)),
			h.ModTime.UTC().Format(time.RFC3339), h.Uname + h.Gname, string(body)}, " "))
		if h.Uid != 0 || h.Gid != 0 {
			out[len(out)-1] += " owned"
		}
	}
}

func TestTarIsDeterministic(t *testing.T) {
	files := []file{
		{name: "tmp", mode: 0o1777, dir: true},
		{name: "etc/passwd", mode: 0o644, data: []byte("root")},
		{name: "home/nonroot", mode: 0o700, uid: 65532, gid: 65532, dir: true},
	}
	reversed := []file{files[2], files[1], files[0]}
	a, err := tarBytes(files, epoch)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tarBytes(reversed, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("the same files in another order give another archive")
	}
	got := readTar(t, a)
	want := []string{
		"etc/ -rwxr-xr-x 5 2026-11-20T08:00:00Z  ",
		"etc/passwd -rw-r--r-- 0 2026-11-20T08:00:00Z  root",
		"home/ -rwxr-xr-x 5 2026-11-20T08:00:00Z  ",
		"home/nonroot/ -rwx------ 5 2026-11-20T08:00:00Z   owned",
		"tmp/ -rwxrwxrwx 5 2026-11-20T08:00:00Z  ",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
	// The sticky bit is in the header's mode.
	tr := tar.NewReader(bytes.NewReader(a))
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatal("no tmp/ entry")
		}
		if h.Name == "tmp/" {
			if h.Mode != 0o1777 {
				t.Errorf("tmp/ has mode %o, want 1777", h.Mode)
			}
			break
		}
	}
	g1, err := gzipBytes(a)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := gzipBytes(a)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(g1))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g1, g2) || !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("gzip is not deterministic, or its header has a time (%v) or name (%q)", zr.ModTime, zr.Name)
	}
}

func TestZipKeepsTheBinaryExecutable(t *testing.T) {
	data, err := zipBytes([]file{{name: "kubectl-turnstile.exe", mode: 0o755, data: []byte("MZ")}}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if len(zr.File) != 1 || zr.File[0].Mode().Perm() != 0o755 || !zr.File[0].Modified.Equal(epoch) {
		t.Errorf("zip entries %+v", zr.File)
	}
}

func TestBaseFiles(t *testing.T) {
	spec, err := loadImageSpec()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range baseFiles(spec) {
		got[f.name] = string(f.data)
	}
	want := map[string]string{
		"etc/passwd":   "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
		"etc/group":    "root:x:0:\nnonroot:x:65532:\n",
		"home/nonroot": "", "root": "", "tmp": "",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("base layer (-want +got):\n%s", diff)
	}
	bad := spec
	bad.User = "0:0"
	if _, _, err := bad.ids(); err == nil {
		t.Error("a root user passed")
	}
}

func TestPinImage(t *testing.T) {
	values, err := os.ReadFile(filepath.Join("..", "..", "charts", "turnstile", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	pinned, err := pinImage(values, "registry.example/team/turnstile", digest)
	if err != nil {
		t.Fatal(err)
	}
	// Only the two lines changed: the comments that helm show values prints are kept.
	before, after := strings.Split(string(values), "\n"), strings.Split(string(pinned), "\n")
	if len(before) != len(after) {
		t.Fatalf("%d lines became %d", len(before), len(after))
	}
	var changed []string
	for i := range before {
		if before[i] != after[i] {
			changed = append(changed, after[i])
		}
	}
	want := []string{"  repository: registry.example/team/turnstile", "  digest: " + digest}
	if diff := cmp.Diff(want, changed); diff != "" {
		t.Errorf("changed lines (-want +got):\n%s", diff)
	}
	for name, text := range map[string]string{
		"no image block":   "replicaCount: 2\n",
		"two digest lines": "image:\n  repository: a\n  digest: \"\"\n  digest: \"\"\n",
		"no digest":        "image:\n  repository: a\n",
	} {
		if _, err := pinImage([]byte(text), "r", digest); err == nil {
			t.Errorf("%s: pinned", name)
		}
	}
}

func TestNormalizeTarGz(t *testing.T) {
	archive := func(mtime time.Time) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Comment, zw.ModTime = "Helm", mtime
		tw := tar.NewWriter(zw)
		for _, name := range []string{"turnstile/Chart.yaml", "turnstile/values.yaml"} {
			if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 1, ModTime: mtime}); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	a, err := normalizeTarGz(archive(time.Now()), epoch)
	if err != nil {
		t.Fatal(err)
	}
	b, err := normalizeTarGz(archive(time.Now().Add(time.Hour)), epoch)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("archives packaged at different times differ after normalizing")
	}
	zr, err := gzip.NewReader(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Comment != "Helm" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header: comment %q, time %v", zr.Comment, zr.ModTime)
	}
	data, _ := io.ReadAll(zr)
	for _, e := range readTar(t, data) {
		if !strings.Contains(e, epoch.Format(time.RFC3339)) {
			t.Errorf("entry %q is not at the epoch", e)
		}
	}
}

func TestRenderNotes(t *testing.T) {
	m := meta{version: "v0.2.0", commit: "0123456789abcdef", epoch: epoch}
	o := options{image: "ghcr.io/turnstile-dev/turnstile"}
	digest := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	notes := renderNotes(o, m, digest, "v0.1.0", []commit{
		{"aaaaaaaaaaaa", "controller: hand off in O(1) writes"},
		{"bbbbbbbbbbbb", "docs: install from a release"},
		{"cccccccccccc", "controller: fence with a changing write"},
		{"dddddddddddd", "Merge the release work"},
	})
	for _, want := range []string{
		"# Turnstile v0.2.0\n",
		"`ghcr.io/turnstile-dev/turnstile:v0.2.0@sha256:abab",
		"## Changes since v0.1.0 (4 commits)",
		"### controller\n\n- hand off in O(1) writes (aaaaaaaaaaaa)\n- fence with a changing write (cccccccccccc)\n",
		"### docs\n\n- install from a release (bbbbbbbbbbbb)\n\n### other\n\n- Merge the release work (dddddddddddd)\n",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	// Areas that differ only in case come in one order on every build (the map gives them in any).
	cased := []commit{{"eeeeeeeeeeee", "api: a"}, {"ffffffffffff", "API: b"}, {"111111111111", "Tests: c"}, {"222222222222", "tests: d"}}
	want := renderNotes(o, m, digest, "v0.1.0", cased)
	for range 20 {
		if got := renderNotes(o, m, digest, "v0.1.0", cased); got != want {
			t.Fatalf("the notes changed between two renderings of the same commits:\n%s\n---\n%s", want, got)
		}
	}
	if !strings.Contains(want, "### API\n\n- b (ffffffffffff)\n\n### api\n\n- a (eeeeeeeeeeee)\n") {
		t.Errorf("areas that differ in case, by their bytes after the case-insensitive order:\n%s", want)
	}
	if first := renderNotes(o, m, digest, "", nil); !strings.Contains(first, "first release") {
		t.Errorf("notes without an earlier tag:\n%s", first)
	}
}

// TestSBOMIsValidCycloneDX writes an SBOM of this test binary (whose build info lists this
// module's dependencies) and validates it with the JSON schema of the CycloneDX version it
// declares, the schema files that cyclonedx-go's module ships, as cyclonedx-go's own tests do.
func TestSBOMIsValidCycloneDX(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m := meta{version: "v0.2.0", commit: "0123456789abcdef", epoch: epoch}
	top := cdx.Component{BOMRef: "pkg:golang/example@v0.2.0", Type: cdx.ComponentTypeApplication, Name: "example", Version: "v0.2.0"}
	out := filepath.Join(t.TempDir(), "sbom.cdx.json")
	subjects := []subject{{name: "release.test", platform: platform{"linux", "amd64"}, path: self}}
	if err := writeSBOM(out, m, top, subjects); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	again := filepath.Join(t.TempDir(), "again.cdx.json")
	if err := writeSBOM(again, m, top, subjects); err != nil {
		t.Fatal(err)
	}
	if second, _ := os.ReadFile(again); !bytes.Equal(data, second) {
		t.Error("two SBOMs of the same binary differ")
	}

	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/CycloneDX/cyclonedx-go").Output()
	if err != nil {
		t.Fatalf("go list cyclonedx-go: %v", err)
	}
	schemas := filepath.Join(strings.TrimSpace(string(dir)), "schema")
	schema := filepath.Join(schemas, "bom-"+sbomSpec.String()+".schema.json")
	// The schema refers to its SPDX and JSF schemas by their $id (an http URL): load them from
	// the module's files under that id, so that nothing is fetched.
	loader := gojsonschema.NewSchemaLoader()
	for _, ref := range []string{"spdx.schema.json", "jsf-0.82.schemax.json"} {
		if err := loader.AddSchemas(gojsonschema.NewReferenceLoader("file://" + filepath.Join(schemas, ref))); err != nil {
			t.Fatal(err)
		}
	}
	compiled, err := loader.Compile(gojsonschema.NewReferenceLoader("file://" + schema))
	if err != nil {
		t.Fatal(err)
	}
	result, err := compiled.Validate(gojsonschema.NewBytesLoader(data))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range result.Errors() {
		t.Errorf("%s: %s", filepath.Base(schema), e)
	}
	// The schema does judge: a component of a type CycloneDX does not have is refused.
	broken := bytes.Replace(data, []byte(`"type": "library"`), []byte(`"type": "gadget"`), 1)
	if result, err := compiled.Validate(gojsonschema.NewBytesLoader(broken)); err != nil || result.Valid() {
		t.Errorf("a component of type gadget passed the schema (%v)", err)
	}

	// What cyclonedx-go decodes: the modules the binary links, and the standard library.
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(bytes.NewReader(data), cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, c := range *bom.Components {
		names[c.Name] = c.Version
	}
	for _, mod := range []string{"github.com/CycloneDX/cyclonedx-go", "github.com/google/go-containerregistry", "stdlib"} {
		if names[mod] == "" {
			t.Errorf("the SBOM has no %s: %v", mod, names)
		}
	}
	if !strings.HasPrefix(bom.SerialNumber, "urn:uuid:") || bom.Metadata.Timestamp != "2026-11-20T08:00:00Z" {
		t.Errorf("serial %q, timestamp %q", bom.SerialNumber, bom.Metadata.Timestamp)
	}
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil || raw["specVersion"] != "1.6" {
		t.Errorf("specVersion %v (%v)", raw["specVersion"], err)
	}
}

func TestRestrictPlatforms(t *testing.T) {
	defer func(image, plugin []platform) { imagePlatforms, pluginPlatforms = image, plugin }(imagePlatforms, pluginPlatforms)
	for _, bad := range [][]string{{"darwin/arm64"}, {"linux/amd64", "plan9/amd64"}} {
		if err := restrictPlatforms(bad); err == nil {
			t.Errorf("--platforms %v passed", bad)
		}
	}
	if err := restrictPlatforms([]string{"linux/arm64"}); err != nil {
		t.Fatal(err)
	}
	if len(imagePlatforms) != 1 || len(pluginPlatforms) != 1 || imagePlatforms[0] != (platform{"linux", "arm64"}) {
		t.Errorf("kept %v and %v", imagePlatforms, pluginPlatforms)
	}
}

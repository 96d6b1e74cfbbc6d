package release

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/turnstile-dev/turnstile/internal/testing/framework"
	"github.com/turnstile-dev/turnstile/internal/testing/oci"
	"github.com/turnstile-dev/turnstile/internal/testing/releasebuild"
)

// files lists a directory's files, relative, sorted.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		out = append(out, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestReproducible(t *testing.T) {
	a := headRelease(t)
	b, err := releasebuild.HeadFromCopy(t.TempDir(), a.Version)
	if err != nil {
		t.Fatalf("make release of a copy of the working tree: %v", err)
	}
	t.Logf("the copy's release took %s", b.Took.Round(1e9))
	fa, fb := files(t, a.Dir), files(t, b.Dir)
	if diff := cmp.Diff(fa, fb); diff != "" {
		t.Fatalf("the two builds wrote different files (-first +second):\n%s", diff)
	}
	var differ []string
	for _, f := range fa {
		x, err := os.ReadFile(filepath.Join(a.Dir, f))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(b.Dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			differ = append(differ, f)
		}
	}
	if len(differ) > 0 {
		t.Errorf("%d of %d files differ between two builds of one source: %v", len(differ), len(fa), differ)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	t.Logf("image digest of the first build: %s; of the second, from a copy at another path: %s (%d files compared)", da, db, len(fa))
}

func TestChecksums(t *testing.T) {
	r := headRelease(t)
	out := run(t, r.Dir, nil, "sha256sum", "--check", "--strict", "SHA256SUMS")
	listed := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		name, status, _ := strings.Cut(sc.Text(), ": ")
		if status != "OK" {
			t.Errorf("sha256sum: %s", sc.Text())
		}
		listed[name] = true
	}
	for _, f := range files(t, r.Dir) {
		if f != "SHA256SUMS" && !listed[f] {
			t.Errorf("%s is not in SHA256SUMS", f)
		}
	}
	t.Logf("sha256sum --check: %d files OK", len(listed))
}

// image is the release's image for one platform, read with this package's own reader.
type image struct {
	indexDigest string
	manifest    oci.Manifest
	config      oci.Config
	root        string // unpacked
}

func openImage(t *testing.T, r releasebuild.Release, arch string) image {
	t.Helper()
	l, err := oci.Open(r.ImageLayout())
	if err != nil {
		t.Fatal(err)
	}
	desc, idx, err := l.ImageIndex(r.Version)
	if err != nil {
		t.Fatal(err)
	}
	_, m, c, err := l.Image(idx, "linux", arch)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := l.Unpack(m, c, root); err != nil {
		t.Fatal(err)
	}
	return image{indexDigest: desc.Digest, manifest: m, config: c, root: root}
}

func TestImage(t *testing.T) {
	r := headRelease(t)
	digest, err := r.Digest()
	if err != nil {
		t.Fatal(err)
	}
	l, err := oci.Open(r.ImageLayout())
	if err != nil {
		t.Fatal(err)
	}
	desc, idx, err := l.ImageIndex(r.Version)
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != digest {
		t.Errorf("index.json names the index %s, image.digest says %s", desc.Digest, digest)
	}
	var platforms []string
	for _, m := range idx.Manifests {
		platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
	}
	if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64"}, platforms); diff != "" {
		t.Errorf("platforms (-want +got):\n%s", diff)
	}
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		t.Run(arch, func(t *testing.T) {
			img := openImage(t, r, arch)
			c := img.config.Config
			if c.User != "65532:65532" || !cmp.Equal(c.Entrypoint, []string{"/manager"}) || c.WorkingDir != "/" {
				t.Errorf("config: user %q, entrypoint %q, workdir %q", c.User, c.Entrypoint, c.WorkingDir)
			}
			if c.Labels["org.opencontainers.image.version"] != r.Version || c.Labels["org.opencontainers.image.revision"] != r.Commit {
				t.Errorf("labels %v", c.Labels)
			}
			// The root holds the manager, the users and groups, the user's home and /tmp: nothing
			// else (no shell, no package manager, no CA bundle, no zone files).
			if diff := cmp.Diff([]string{"etc/group", "etc/passwd", "manager"}, files(t, img.root)); diff != "" {
				t.Errorf("files of the image (-want +got):\n%s", diff)
			}
			passwd, _ := os.ReadFile(filepath.Join(img.root, "etc", "passwd"))
			if !strings.Contains(string(passwd), "nonroot:x:65532:65532:") {
				t.Errorf("/etc/passwd has no nonroot 65532:\n%s", passwd)
			}
			for dir, want := range map[string]fs.FileMode{"tmp": fs.ModeDir | fs.ModeSticky | 0o777, "home/nonroot": fs.ModeDir | 0o700, "root": fs.ModeDir | 0o700} {
				fi, err := os.Stat(filepath.Join(img.root, dir))
				if err != nil || fi.Mode() != want {
					t.Errorf("/%s: %v (%v), want %v", dir, fi.Mode(), err, want)
				}
			}
			f, err := elf.Open(filepath.Join(img.root, "manager"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Machine != machine {
				t.Errorf("/manager is for %v, want %v", f.Machine, machine)
			}
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Error("/manager is dynamically linked; the image has no libc")
				}
			}
			t.Logf("linux/%s: manifest of %d layers, config user %s, /manager %s", arch, len(img.manifest.Layers), c.User, f.Machine)
		})
	}
}

func TestChartAndBundlePinTheImage(t *testing.T) {
	r := headRelease(t)
	digest, err := r.Digest()
	if err != nil {
		t.Fatal(err)
	}
	want := releasebuild.Image + "@" + digest
	chart := run(t, root, nil, helm(t), "show", "chart", r.Chart())
	for _, line := range []string{"version: " + r.ChartVersion(), "appVersion: " + r.Version} {
		if !strings.Contains(chart, line+"\n") {
			t.Errorf("helm show chart lacks %q:\n%s", line, chart)
		}
	}
	if out := run(t, root, nil, helm(t), "lint", "--strict", r.Chart()); !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
		t.Errorf("helm lint --strict %s:\n%s", r.Chart(), out)
	}
	// The chart's tests (helm-unittest suites) stay out of the package (.helmignore).
	for _, name := range tarNames(t, r.Chart()) {
		if strings.HasPrefix(name, "turnstile/tests/") {
			t.Errorf("the packaged chart has %s", name)
		}
	}
	// Each way to install, and the MutatingAdmissionPolicy version it installs ("": none, the
	// validating-only set): the chart as helm install renders it where the cluster serves v1,
	// and the bundle docs/install.md names for each range of Kubernetes versions.
	type rendering struct{ text, mutating string }
	renderings := map[string]rendering{
		"helm template " + filepath.Base(r.Chart()): {run(t, root, nil, helm(t), "template", "turnstile", r.Chart(), "-n", "turnstile-system",
			"--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"), "v1"},
	}
	for _, b := range []framework.Bundle{{Mutating: "v1"}, {Mutating: "v1beta1"}, {Mutating: ""}} {
		renderings[filepath.Base(r.BundleFor(b))] = rendering{readFile(t, r.BundleFor(b)), b.Mutating}
	}
	for name, rd := range renderings {
		objs, err := framework.ParseManifests(rd.text)
		if err != nil {
			t.Fatal(err)
		}
		var images []string
		kinds := map[string]int{}
		for _, o := range objs {
			kinds[o.Kind()]++
			if o.Kind() == "MutatingAdmissionPolicy" {
				if got := fmt.Sprint(o["apiVersion"]); got != "admissionregistration.k8s.io/"+rd.mutating {
					t.Errorf("%s has a MutatingAdmissionPolicy %s, want %q", name, got, rd.mutating)
				}
			}
			if o.Kind() != "Deployment" {
				continue
			}
			for _, c := range o.Path("spec", "template", "spec", "containers").([]any) {
				images = append(images, fmt.Sprint(c.(map[string]any)["image"]))
			}
		}
		if !cmp.Equal(images, []string{want}) {
			t.Errorf("%s runs %v, want [%s]", name, images, want)
		}
		for _, kind := range []string{"CustomResourceDefinition", "ClusterRole", "ValidatingAdmissionPolicy", "ServiceAccount", "Deployment"} {
			if kinds[kind] == 0 {
				t.Errorf("%s has no %s", name, kind)
			}
		}
		if (kinds["MutatingAdmissionPolicy"] > 0) != (rd.mutating != "") {
			t.Errorf("%s has %d MutatingAdmissionPolicies, want them as %q (none for \"\")", name, kinds["MutatingAdmissionPolicy"], rd.mutating)
		}
		if !strings.HasPrefix(name, "helm ") && kinds["Namespace"] != 1 {
			t.Errorf("%s creates %d namespaces, want its own one", name, kinds["Namespace"])
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func tarNames(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
}

// allPluginPlatforms are the plugin's archives' platforms in a release make release builds whole.
var allPluginPlatforms = []platform{
	{"darwin", "amd64"}, {"darwin", "arm64"}, {"linux", "amd64"}, {"linux", "arm64"}, {"windows", "amd64"}, {"windows", "arm64"},
}

type platform struct{ os, arch string }

// pluginNotes is the notes' line that names the plugin's platforms.
var pluginNotes = regexp.MustCompile(`(?m)^- kubectl plugin \(([^)]*)\):`)

// pluginPlatforms are the platforms whose plugin archives the release says it has (its notes):
// all of allPluginPlatforms, or some of them in a release built with RELEASE_PLATFORMS (make test's
// and CI's: TEST_RELEASE_PLATFORMS in the Makefile, to keep their minutes). The directory must hold
// an archive for each, and no other.
func pluginPlatforms(t *testing.T, r releasebuild.Release) []platform {
	t.Helper()
	m := pluginNotes.FindStringSubmatch(readFile(t, filepath.Join(r.Dir, "RELEASE_NOTES.md")))
	if m == nil {
		t.Fatalf("%s names no plugin platforms", filepath.Join(r.Dir, "RELEASE_NOTES.md"))
	}
	var out []platform
	for _, name := range strings.Split(m[1], ", ") {
		goos, arch, _ := strings.Cut(name, "/")
		p := platform{goos, arch}
		if !slices.Contains(allPluginPlatforms, p) {
			t.Fatalf("the notes name plugin platform %q, which make release does not build", name)
		}
		out = append(out, p)
	}
	archives, err := filepath.Glob(filepath.Join(r.Dir, "kubectl-turnstile_*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(archives) != len(out) {
		t.Fatalf("the release has %d plugin archives, and its notes name %d platforms: %v", len(archives), len(out), archives)
	}
	if len(out) < len(allPluginPlatforms) {
		t.Logf("the release was built for some platforms only (RELEASE_PLATFORMS): the plugin's %v", out)
	}
	return out
}

func archiveName(r releasebuild.Release, goos, arch string) string {
	ext := ".tar.gz"
	if goos == "windows" {
		ext = ".zip"
	}
	return fmt.Sprintf("kubectl-turnstile_%s_%s_%s%s", r.Version, goos, arch, ext)
}

// pluginBinary extracts the archive's one file: its name, mode and content.
func pluginBinary(t *testing.T, path string) (string, fs.FileMode, []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(path, ".zip") {
		zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		if len(zr.File) != 1 {
			t.Fatalf("%s has %d files, want the binary alone", path, len(zr.File))
		}
		rc, err := zr.File[0].Open()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		body, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return zr.File[0].Name, zr.File[0].Mode(), body
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Fatalf("%s has more than the binary", path)
	}
	return h.Name, h.FileInfo().Mode(), body
}

// binaryPlatform reads a binary's format and machine with Go's own readers of ELF, Mach-O
// and PE: "linux/amd64", "darwin/arm64", "windows/amd64", ...
func binaryPlatform(data []byte) string {
	r := bytes.NewReader(data)
	if f, err := elf.NewFile(r); err == nil {
		return "linux/" + map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[f.Machine]
	}
	if f, err := macho.NewFile(r); err == nil {
		return "darwin/" + map[macho.Cpu]string{macho.CpuAmd64: "amd64", macho.CpuArm64: "arm64"}[f.Cpu]
	}
	if f, err := pe.NewFile(r); err == nil {
		return "windows/" + map[uint16]string{pe.IMAGE_FILE_MACHINE_AMD64: "amd64", pe.IMAGE_FILE_MACHINE_ARM64: "arm64"}[f.Machine]
	}
	return "unknown"
}

func TestPluginArchives(t *testing.T) {
	r := headRelease(t)
	for _, p := range pluginPlatforms(t, r) {
		name, mode, body := pluginBinary(t, filepath.Join(r.Dir, archiveName(r, p.os, p.arch)))
		wantName := "kubectl-turnstile"
		if p.os == "windows" {
			wantName += ".exe"
		}
		if name != wantName || mode.Perm() != 0o755 {
			t.Errorf("%s/%s: %s %v, want %s -rwxr-xr-x", p.os, p.arch, name, mode, wantName)
		}
		if got := binaryPlatform(body); got != p.os+"/"+p.arch {
			t.Errorf("the %s/%s archive holds a binary for %s", p.os, p.arch, got)
		}
	}
}

func TestKrewInstallsThePlugin(t *testing.T) {
	r := headRelease(t)
	krew := tool(t, "TURNSTILE_KREW", "bin/krew-v0.4.3")
	validate := tool(t, "TURNSTILE_VALIDATE_KREW", "bin/validate-krew-manifest-v0.4.3")
	manifest := filepath.Join(r.Dir, "krew", "turnstile.yaml")
	// krew-index's own validator: the schema, a name matching the file, every platform used
	// and none overlapping (it installs from the URIs, which are not published: skipped here,
	// and done below from the archives).
	run(t, root, nil, validate, "-manifest", manifest, "-skip-install")

	// kubectl finds krew as the plugin kubectl-krew on PATH, as after krew's own install.
	bin := t.TempDir()
	if err := os.Symlink(krew, filepath.Join(bin, "kubectl-krew")); err != nil {
		t.Fatal(err)
	}
	for _, p := range pluginPlatforms(t, r) {
		krewRoot := filepath.Join(t.TempDir(), "krew")
		env := []string{"KREW_ROOT=" + krewRoot, "KREW_OS=" + p.os, "KREW_ARCH=" + p.arch, "KREW_NO_UPGRADE_CHECK=1",
			"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
		// krew checks the archive's sha256 against the manifest's and finds the bin in it.
		run(t, root, env, kubectl(t), "krew", "install", "--manifest="+manifest, "--archive="+filepath.Join(r.Dir, archiveName(r, p.os, p.arch)))
		installed := filepath.Join(krewRoot, "bin", "kubectl-turnstile")
		if p.os == "windows" {
			installed += ".exe"
		}
		data, err := os.ReadFile(installed)
		if err != nil {
			t.Fatalf("%s/%s: krew installed no %s: %v", p.os, p.arch, installed, err)
		}
		if got := binaryPlatform(data); got != p.os+"/"+p.arch {
			t.Errorf("krew installed a binary for %s from the %s/%s archive", got, p.os, p.arch)
		}
		if p.os != runtime.GOOS || p.arch != runtime.GOARCH {
			continue
		}
		// The installed plugin, run by kubectl, says which release it is.
		out := run(t, root, []string{"PATH=" + filepath.Join(krewRoot, "bin") + string(os.PathListSeparator) + os.Getenv("PATH")},
			kubectl(t), "turnstile", "version")
		want := fmt.Sprintf("kubectl-turnstile %s (commit %s, ", r.Version, r.Commit[:12])
		if !strings.HasPrefix(out, want) || !strings.Contains(out, p.os+"/"+p.arch) {
			t.Errorf("kubectl turnstile version = %q, want %q...", out, want)
		}
		t.Logf("krew installed the plugin; kubectl turnstile version: %s", strings.TrimSpace(out))
	}
}

// sbom is the part of a CycloneDX document this test reads.
type sbom struct {
	SpecVersion string `json:"specVersion"`
	Metadata    struct {
		Component struct {
			Name    string `json:"name"`
			Version string `json:"version"`
			PURL    string `json:"purl"`
		} `json:"component"`
	} `json:"metadata"`
	Components []struct {
		BOMRef  string `json:"bom-ref"`
		Name    string `json:"name"`
		Version string `json:"version"`
		Hashes  []struct {
			Alg     string `json:"alg"`
			Content string `json:"content"`
		} `json:"hashes"`
	} `json:"components"`
	Dependencies []struct {
		Ref       string   `json:"ref"`
		DependsOn []string `json:"dependsOn"`
	} `json:"dependencies"`
}

// sbomModules is what an SBOM says a binary (found by its SHA-256) links: module@version,
// and stdlib@goVERSION.
func sbomModules(t *testing.T, doc sbom, binary []byte) []string {
	t.Helper()
	sum := sha256.Sum256(binary)
	want := hex.EncodeToString(sum[:])
	byRef := map[string]string{}
	ref := ""
	for _, c := range doc.Components {
		byRef[c.BOMRef] = c.Name + "@" + c.Version
		for _, h := range c.Hashes {
			if h.Alg == "SHA-256" && h.Content == want {
				ref = c.BOMRef
			}
		}
	}
	if ref == "" {
		t.Fatalf("the SBOM has no component with the binary's SHA-256 %s", want)
	}
	var mods []string
	for _, d := range doc.Dependencies {
		if d.Ref == ref {
			for _, dep := range d.DependsOn {
				mods = append(mods, byRef[dep])
			}
		}
	}
	sort.Strings(mods)
	return mods
}

// goVersionModules is what `go version -m` reads from a binary: its modules (dep lines, or
// the replacement's) and the Go version.
func goVersionModules(t *testing.T, binary []byte) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "binary")
	if err := os.WriteFile(path, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	out := run(t, root, nil, "go", "version", "-m", path)
	var mods []string
	lines := strings.Split(out, "\n")
	first := strings.Fields(lines[0])
	mods = append(mods, "stdlib@"+first[len(first)-1])
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "dep" {
			continue
		}
		if i+1 < len(lines) {
			if r := strings.Fields(lines[i+1]); len(r) >= 3 && r[0] == "=>" {
				mods = append(mods, r[1]+"@"+r[2])
				continue
			}
		}
		mods = append(mods, f[1]+"@"+f[2])
	}
	sort.Strings(mods)
	return mods
}

func readSBOM(t *testing.T, path string) sbom {
	t.Helper()
	var doc sbom
	if err := json.Unmarshal([]byte(readFile(t, path)), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SpecVersion != "1.6" {
		t.Errorf("%s: specVersion %q", path, doc.SpecVersion)
	}
	return doc
}

func TestSBOMsListWhatTheBinariesLink(t *testing.T) {
	r := headRelease(t)
	digest, _ := r.Digest()
	image := readSBOM(t, filepath.Join(r.Dir, "turnstile-image.cdx.json"))
	if !strings.Contains(image.Metadata.Component.PURL, strings.Replace(digest, ":", "%3A", 1)) || image.Metadata.Component.Version != r.Version {
		t.Errorf("the image SBOM describes %+v, not the image %s", image.Metadata.Component, digest)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		img := openImage(t, r, arch)
		manager, err := os.ReadFile(filepath.Join(img.root, "manager"))
		if err != nil {
			t.Fatal(err)
		}
		want := goVersionModules(t, manager)
		if diff := cmp.Diff(want, sbomModules(t, image, manager)); diff != "" {
			t.Errorf("linux/%s manager: the SBOM's modules differ from go version -m (-go +sbom):\n%s", arch, diff)
		}
		t.Logf("image SBOM, linux/%s: %d modules, as go version -m reads them", arch, len(want))
	}
	plugin := readSBOM(t, filepath.Join(r.Dir, "kubectl-turnstile.cdx.json"))
	for _, p := range pluginPlatforms(t, r) {
		_, _, binary := pluginBinary(t, filepath.Join(r.Dir, archiveName(r, p.os, p.arch)))
		if diff := cmp.Diff(goVersionModules(t, binary), sbomModules(t, plugin, binary)); diff != "" {
			t.Errorf("plugin %s/%s: the SBOM's modules differ from go version -m (-go +sbom):\n%s", p.os, p.arch, diff)
		}
	}
}

func TestReleaseNotes(t *testing.T) {
	r := headRelease(t)
	digest, _ := r.Digest()
	notes := readFile(t, filepath.Join(r.Dir, "RELEASE_NOTES.md"))
	// The notes list the commits that are not merges (a merge's subject says only which branch
	// came in): the newest of those is the one they must show, whether or not HEAD is a merge.
	subject := run(t, root, nil, "git", "log", "-1", "--no-merges", "--format=%s", r.Commit)
	if _, what, ok := strings.Cut(strings.TrimSpace(subject), ": "); ok {
		subject = what
	}
	for _, want := range []string{
		"# Turnstile " + r.Version, releasebuild.Image + ":" + r.Version + "@" + digest, "## Changes", strings.TrimSpace(subject),
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("RELEASE_NOTES.md lacks %q", want)
		}
	}
}

package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

const (
	imageSBOMFile  = "turnstile-image.cdx.json"
	pluginSBOMFile = "kubectl-turnstile.cdx.json"
	modulePath     = "github.com/turnstile-dev/turnstile"
	sbomSpec       = cdx.SpecVersion1_6
)

// writeSBOMs writes a CycloneDX SBOM of the image (its manager binaries, one per platform) and
// one of the plugin (its six binaries). Each binary's modules, their versions and go.sum
// hashes, the Go standard library's version and the build's settings come from the build
// info the Go toolchain embedded in it (debug/buildinfo, what `go version -m` prints), so the
// SBOM says what is in the binary rather than what go.mod asked for.
func writeSBOMs(o options, m meta, b binaries, img imageResult) error {
	// purl's oci type: the version is the digest, its colon percent-encoded.
	imageRef := fmt.Sprintf("pkg:oci/%s@sha256%%3A%s?repository_url=%s&tag=%s", lastElem(o.image), img.digest.Hex, o.image, m.version)
	imageTop := cdx.Component{
		BOMRef: imageRef, Type: cdx.ComponentTypeContainer, Name: o.image, Version: m.version, PackageURL: imageRef,
		Description: "Turnstile's manager image (OCI image index): the manager on a base layer of /etc/passwd, /etc/group and empty directories; no packages",
		Hashes:      &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: img.digest.Hex}},
	}
	var imageBins []subject
	for _, p := range imagePlatforms {
		imageBins = append(imageBins, subject{name: "manager", platform: p, path: b.manager[p], properties: []cdx.Property{
			{Name: "oci:platform", Value: p.String()},
			{Name: "oci:manifest", Value: img.manifests[p].String()},
			{Name: "oci:path", Value: "/manager"},
		}})
	}
	if err := writeSBOM(filepath.Join(o.out, imageSBOMFile), m, imageTop, imageBins); err != nil {
		return err
	}
	pluginRef := fmt.Sprintf("pkg:golang/%s@%s#cmd/%s", modulePath, m.version, pluginName)
	pluginTop := cdx.Component{
		BOMRef: pluginRef, Type: cdx.ComponentTypeApplication, Name: pluginName, Version: m.version, PackageURL: pluginRef,
		Description: "Turnstile's kubectl plugin, one binary per platform, each in its own archive",
	}
	var pluginBins []subject
	for _, p := range pluginPlatforms {
		pluginBins = append(pluginBins, subject{name: pluginName, platform: p, path: b.plugin[p], properties: []cdx.Property{
			{Name: "archive", Value: pluginArchive(m, p)},
		}})
	}
	return writeSBOM(filepath.Join(o.out, pluginSBOMFile), m, pluginTop, pluginBins)
}

// subject is one binary an SBOM describes.
type subject struct {
	name       string
	platform   platform
	path       string
	properties []cdx.Property
}

// writeSBOM writes one SBOM: top is what it describes (metadata.component), made of the
// subjects' binaries, each depending on its modules and the standard library.
func writeSBOM(path string, m meta, top cdx.Component, subjects []subject) error {
	components := map[string]cdx.Component{}
	var deps []cdx.Dependency
	var binRefs []string
	for _, s := range subjects {
		bin, mods, err := binaryComponents(s, m)
		if err != nil {
			return err
		}
		components[bin.BOMRef] = bin
		binRefs = append(binRefs, bin.BOMRef)
		var refs []string
		for _, c := range mods {
			components[c.BOMRef] = c
			refs = append(refs, c.BOMRef)
		}
		sort.Strings(refs)
		deps = append(deps, cdx.Dependency{Ref: bin.BOMRef, Dependencies: &refs})
	}
	sort.Strings(binRefs)
	deps = append(deps, cdx.Dependency{Ref: top.BOMRef, Dependencies: &binRefs})
	sort.Slice(deps, func(i, j int) bool { return deps[i].Ref < deps[j].Ref })
	list := make([]cdx.Component, 0, len(components))
	for _, c := range components {
		list = append(list, c)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].BOMRef < list[j].BOMRef })

	bom := cdx.NewBOM()
	bom.Metadata = &cdx.Metadata{
		Timestamp: m.epoch.Format(time.RFC3339),
		Tools:     &cdx.ToolsChoice{Components: &[]cdx.Component{toolComponent()}},
		Component: &top,
		Properties: &[]cdx.Property{
			{Name: "source:commit", Value: m.commit},
			{Name: "source:url", Value: projectURL},
		},
	}
	bom.Components = &list
	bom.Dependencies = &deps
	// The serial number names this document: derived from its content, so that the same
	// release gives the same document.
	unnumbered, err := encodeBOM(bom)
	if err != nil {
		return err
	}
	bom.SerialNumber = "urn:uuid:" + contentUUID(unnumbered)
	data, err := encodeBOM(bom)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func encodeBOM(bom *cdx.BOM) ([]byte, error) {
	var buf bytes.Buffer
	if err := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON).SetPretty(true).EncodeVersion(bom, sbomSpec); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// binaryComponents reads a binary's build info: the binary as an application component (its
// SHA-256, platform and build settings) and its modules and the standard library as library
// components.
func binaryComponents(s subject, m meta) (cdx.Component, []cdx.Component, error) {
	data, err := os.ReadFile(s.path)
	if err != nil {
		return cdx.Component{}, nil, err
	}
	bi, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		return cdx.Component{}, nil, fmt.Errorf("%s: build info: %w", s.path, err)
	}
	sum := sha256.Sum256(data)
	props := append([]cdx.Property{
		{Name: "go:package", Value: bi.Path},
		{Name: "go:version", Value: bi.GoVersion},
	}, s.properties...)
	for _, st := range bi.Settings {
		props = append(props, cdx.Property{Name: "go:build:" + st.Key, Value: st.Value})
	}
	ref := fmt.Sprintf("pkg:golang/%s@%s?goarch=%s&goos=%s#%s", modulePath, m.version, s.platform.arch, s.platform.os, strings.TrimPrefix(bi.Path, modulePath+"/"))
	bin := cdx.Component{
		BOMRef: ref, Type: cdx.ComponentTypeApplication, Name: s.name, Version: m.version, PackageURL: ref,
		Description: fmt.Sprintf("%s for %s", s.name, s.platform),
		Hashes:      &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: hex.EncodeToString(sum[:])}},
		Properties:  &props,
	}
	stdVersion := strings.TrimPrefix(bi.GoVersion, "go")
	std := cdx.Component{
		BOMRef: "pkg:golang/stdlib@" + stdVersion, Type: cdx.ComponentTypeLibrary, Name: "stdlib", Version: bi.GoVersion,
		PackageURL: "pkg:golang/stdlib@" + stdVersion, Description: "the Go standard library",
	}
	mods := []cdx.Component{std}
	for _, d := range bi.Deps {
		mods = append(mods, moduleComponent(d))
	}
	return bin, mods, nil
}

// moduleComponent is a module the binary links: the replacement when it is replaced.
func moduleComponent(d *debug.Module) cdx.Component {
	mod := d
	var props []cdx.Property
	if d.Replace != nil {
		mod = d.Replace
		props = append(props, cdx.Property{Name: "go:replaces", Value: d.Path + "@" + d.Version})
	}
	if mod.Sum != "" {
		props = append(props, cdx.Property{Name: "go:sum", Value: mod.Sum})
	}
	purl := "pkg:golang/" + mod.Path + "@" + mod.Version + "?type=module"
	c := cdx.Component{BOMRef: purl, Type: cdx.ComponentTypeLibrary, Name: mod.Path, Version: mod.Version, PackageURL: purl}
	if len(props) > 0 {
		c.Properties = &props
	}
	return c
}

// toolComponent is this tool, and the CycloneDX library it writes with.
func toolComponent() cdx.Component {
	tool := cdx.Component{Type: cdx.ComponentTypeApplication, Name: "turnstile hack/release", Description: "make release"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/CycloneDX/cyclonedx-go" || d.Path == "github.com/google/go-containerregistry" {
				c := moduleComponent(d)
				c.Properties = nil
				tool.Components = appendComponent(tool.Components, c)
			}
		}
	}
	return tool
}

func appendComponent(list *[]cdx.Component, c cdx.Component) *[]cdx.Component {
	if list == nil {
		list = &[]cdx.Component{}
	}
	*list = append(*list, c)
	return list
}

// contentUUID is a UUID (version 5 layout: SHA-based, RFC 9562) from data's SHA-256.
func contentUUID(data []byte) string {
	h := sha256.Sum256(data)
	u := h[:16]
	u[6] = (u[6] & 0x0f) | 0x50
	u[8] = (u[8] & 0x3f) | 0x80
	x := hex.EncodeToString(u)
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// lastElem is a repository's last path element (ghcr.io/a/turnstile: turnstile).
func lastElem(repository string) string { return repository[strings.LastIndex(repository, "/")+1:] }

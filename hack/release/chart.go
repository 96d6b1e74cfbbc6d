package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"
)

const chartName = "turnstile"

// chartFile is the packaged chart's name, as helm names it.
func chartFile(m meta) string { return chartName + "-" + m.chartVersion() + ".tgz" }

// writeChart packages charts/turnstile with helm itself (so .helmignore, Chart.yaml's checks
// and the archive layout are helm's), its version the release's and its values' image pinned
// to the digest; then rewrites the archive's timestamps (helm stamps the time of packaging)
// so that it is reproducible.
func writeChart(ctx context.Context, o options, m meta, digest v1.Hash, work string) error {
	dir := filepath.Join(work, "chart", chartName)
	if err := copyTree(filepath.Join(o.source, "charts", chartName), dir); err != nil {
		return err
	}
	valuesPath := filepath.Join(dir, "values.yaml")
	values, err := os.ReadFile(valuesPath)
	if err != nil {
		return err
	}
	pinned, err := pinImage(values, o.image, digest.String())
	if err != nil {
		return err
	}
	if err := os.WriteFile(valuesPath, pinned, 0o644); err != nil {
		return err
	}
	packaged := filepath.Join(work, "chart-out")
	home := filepath.Join(work, "helm-home")
	env := []string{"HELM_CACHE_HOME=" + home, "HELM_CONFIG_HOME=" + home, "HELM_DATA_HOME=" + home}
	if _, err := command(ctx, work, env, o.helm, "package", dir, "--version", m.chartVersion(), "--app-version", m.version, "-d", packaged); err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(packaged, chartFile(m)))
	if err != nil {
		return err
	}
	normalized, err := normalizeTarGz(data, m.epoch)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.out, chartFile(m)), normalized, 0o644)
}

// imageBlock is values.yaml's top-level image: block, up to the next top-level key.
var imageBlock = regexp.MustCompile(`(?m)^image:\n((?:[ \t]+.*\n|[ \t]*#.*\n|\n)*)`)

// pinImage sets image.repository and image.digest in values.yaml's text, keeping its comments
// (helm show values prints them), and checks the result by parsing it.
func pinImage(values []byte, repository, digest string) ([]byte, error) {
	loc := imageBlock.FindSubmatchIndex(values)
	if loc == nil {
		return nil, errors.New("values.yaml has no top-level image: block")
	}
	block := string(values[loc[2]:loc[3]])
	for key, value := range map[string]string{"repository": repository, "digest": digest} {
		re := regexp.MustCompile(`(?m)^(  ` + key + `:)[ \t]*[^\n#]*?([ \t]*#.*)?$`)
		if n := len(re.FindAllStringIndex(block, -1)); n != 1 {
			return nil, fmt.Errorf("values.yaml: image.%s is set on %d lines, want 1", key, n)
		}
		block = re.ReplaceAllString(block, "${1} "+value+"${2}")
	}
	out := append(append(append([]byte{}, values[:loc[2]]...), block...), values[loc[3]:]...)
	var parsed struct {
		Image struct {
			Repository string `json:"repository"`
			Digest     string `json:"digest"`
		} `json:"image"`
	}
	if err := yaml.Unmarshal(out, &parsed); err != nil {
		return nil, fmt.Errorf("values.yaml with the image pinned: %w", err)
	}
	if parsed.Image.Repository != repository || parsed.Image.Digest != digest {
		return nil, fmt.Errorf("values.yaml with the image pinned reads image %s@%s, want %s@%s",
			parsed.Image.Repository, parsed.Image.Digest, repository, digest)
	}
	return out, nil
}

// normalizeTarGz rewrites a gzip-compressed tar archive with every entry's time set to mtime
// and no owner names, in the same order, and the gzip header's comment and extra field kept
// (helm's) but no time or name.
func normalizeTarGz(data []byte, mtime time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	zw.Comment, zw.Extra = zr.Comment, zr.Extra
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		n := &tar.Header{Name: h.Name, Typeflag: h.Typeflag, Mode: h.Mode, Size: int64(len(body)), ModTime: mtime, Linkname: h.Linkname}
		if err := tw.WriteHeader(n); err != nil {
			return nil, err
		}
		if _, err := tw.Write(body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// copyTree copies the files and directories under src to dst; a symbolic link to a file
// (config/grafana's link into the chart) is copied as the file it names.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		fi, err := os.Stat(p) // through a link
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file (%v): the release copies files only", strings.TrimPrefix(p, src), fi.Mode())
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

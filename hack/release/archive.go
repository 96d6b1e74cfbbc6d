package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"
)

// file is one entry of an archive: a regular file (data) or a directory (dir).
type file struct {
	name     string // slash-separated, relative; a directory's without the trailing slash
	mode     int64  // permission bits (and sticky)
	uid, gid int
	dir      bool
	data     []byte
}

// tarBytes writes files as a tar archive: sorted by name, with every missing parent directory
// added (0755, root), every time set to mtime, no user or group names, USTAR format. Equal
// files give equal bytes.
func tarBytes(files []file, mtime time.Time) ([]byte, error) {
	all := withParents(files)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range all {
		h := &tar.Header{
			Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: mtime, Format: tar.FormatUSTAR,
			Typeflag: tar.TypeReg, Size: int64(len(f.data)),
		}
		if f.dir {
			h.Name, h.Typeflag, h.Size = f.name+"/", tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// withParents returns files sorted by name, with the parent directories that are not listed
// added before their contents.
func withParents(files []file) []file {
	byName := map[string]file{}
	for _, f := range files {
		byName[f.name] = f
		for dir := path.Dir(f.name); dir != "." && dir != "/"; dir = path.Dir(dir) {
			if _, ok := byName[dir]; !ok {
				byName[dir] = file{name: dir, mode: 0o755, dir: true}
			}
		}
	}
	out := make([]file, 0, len(byName))
	for _, f := range byName {
		out = append(out, f)
	}
	// A directory sorts before its contents: compare with a trailing slash.
	key := func(f file) string {
		if f.dir {
			return f.name + "/"
		}
		return f.name
	}
	sort.Slice(out, func(i, j int) bool { return key(out[i]) < key(out[j]) })
	return out
}

// gzipBytes compresses data with a header that holds no name, time or comment: equal data
// gives equal bytes (with one Go toolchain: compress/flate's output is not promised across
// Go releases, which is why the toolchain is part of a release's inputs).
func gzipBytes(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarGz is gzipBytes(tarBytes(files)).
func tarGz(files []file, mtime time.Time) ([]byte, error) {
	t, err := tarBytes(files, mtime)
	if err != nil {
		return nil, err
	}
	return gzipBytes(t)
}

// zipBytes writes regular files as a zip archive, sorted by name, each deflated, with mtime
// and the file's mode (Unix permissions, as unzip and krew restore them).
func zipBytes(files []file, mtime time.Time) ([]byte, error) {
	sorted := append([]file(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range sorted {
		if f.dir || strings.Contains(f.name, "/") {
			return nil, fmt.Errorf("zip %s: only top-level regular files", f.name)
		}
		h := &zip.FileHeader{Name: f.name, Method: zip.Deflate, Modified: mtime.UTC()}
		h.SetMode(fileMode(f.mode))
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, err
		}
		if _, err := io.Copy(w, bytes.NewReader(f.data)); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// fileMode is a file's permission bits as an fs.FileMode.
func fileMode(mode int64) fs.FileMode { return fs.FileMode(mode) & fs.ModePerm }

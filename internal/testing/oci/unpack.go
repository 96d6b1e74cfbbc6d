package oci

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// Unpack applies the manifest's layers, bottom first, onto root, checking each against the
// config's diff_id.
func (l *Layout) Unpack(m Manifest, c Config, root string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	for i, d := range m.Layers {
		data, err := l.Layer(d, c.RootFS.DiffIDs[i])
		if err != nil {
			return err
		}
		if err := ApplyLayer(root, data); err != nil {
			return fmt.Errorf("layer %d (%s): %w", i, d.Digest, err)
		}
	}
	return nil
}

// entry is one tar entry of a layer.
type entry struct {
	h    *tar.Header
	name string // cleaned, relative
	data []byte
}

// ApplyLayer applies an uncompressed layer onto root as the OCI image spec's changeset rules
// say: an opaque marker (.wh..wh..opq) first empties its directory of what the layers below
// put there; a whiteout (.wh.NAME) deletes NAME; every other entry is created, replacing what
// was at its path. Owners are set when running as root. An entry whose path leaves the root,
// or passes through a symbolic link, is refused.
func ApplyLayer(root string, tarData []byte) error {
	var entries []entry
	tr := tar.NewReader(bytes.NewReader(tarData))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name, err := cleanName(h.Name)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		entries = append(entries, entry{h, name, data})
	}
	// Opaque directories lose the lower layers' contents before this layer's own entries land.
	for _, e := range entries {
		if path.Base(e.name) != opaqueMarker {
			continue
		}
		dir, err := resolve(root, path.Dir(e.name))
		if err != nil {
			return err
		}
		children, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		for _, c := range children {
			if err := os.RemoveAll(filepath.Join(dir, c.Name())); err != nil {
				return err
			}
		}
	}
	for _, e := range entries {
		if err := apply(root, e); err != nil {
			return fmt.Errorf("%s: %w", e.h.Name, err)
		}
	}
	return nil
}

// apply creates one entry, or carries out one whiteout.
func apply(root string, e entry) error {
	base := path.Base(e.name)
	if base == opaqueMarker {
		return nil
	}
	if hidden, ok := strings.CutPrefix(base, whiteoutPrefix); ok {
		target, err := resolve(root, path.Join(path.Dir(e.name), hidden))
		if err != nil {
			return err
		}
		return os.RemoveAll(target)
	}
	target, err := resolve(root, e.name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	mode := e.h.FileInfo().Mode()
	switch e.h.Typeflag {
	case tar.TypeDir:
		if fi, err := os.Lstat(target); err == nil && !fi.IsDir() {
			if err := os.Remove(target); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(target, mode&(fs.ModePerm|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid)); err != nil {
			return err
		}
	case tar.TypeReg:
		if err := os.RemoveAll(target); err != nil {
			return err
		}
		if err := os.WriteFile(target, e.data, 0o600); err != nil {
			return err
		}
		if err := os.Chmod(target, mode&(fs.ModePerm|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid)); err != nil {
			return err
		}
	case tar.TypeSymlink:
		if err := os.RemoveAll(target); err != nil {
			return err
		}
		if err := os.Symlink(e.h.Linkname, target); err != nil {
			return err
		}
	case tar.TypeLink:
		linkName, err := cleanName(e.h.Linkname)
		if err != nil {
			return err
		}
		source, err := resolve(root, linkName)
		if err != nil {
			return err
		}
		if err := os.RemoveAll(target); err != nil {
			return err
		}
		if err := os.Link(source, target); err != nil {
			return err
		}
	default:
		return fmt.Errorf("entry type %q is not one this reader unpacks", e.h.Typeflag)
	}
	if os.Geteuid() == 0 {
		return os.Lchown(target, e.h.Uid, e.h.Gid)
	}
	return nil
}

// cleanName is an entry's path relative to the root; one that would leave it is refused.
func cleanName(name string) (string, error) {
	clean := path.Clean("/" + name)
	if clean == "/" {
		return ".", nil
	}
	if strings.Contains(name, "..") && path.Clean(name) != strings.TrimPrefix(clean, "/") {
		return "", fmt.Errorf("entry %q leaves the root", name)
	}
	return strings.TrimPrefix(clean, "/"), nil
}

// resolve is name's path below root, refused when a directory on the way is a symbolic link:
// a layer must not write through a link into the host's file system.
func resolve(root, name string) (string, error) {
	if name == "." {
		return root, nil
	}
	parts := strings.Split(name, "/")
	p := root
	for _, part := range parts[:len(parts)-1] {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("%s passes through the symbolic link %s", name, strings.TrimPrefix(p, root))
		}
	}
	return filepath.Join(root, filepath.FromSlash(name)), nil
}

// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package images

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// The OCI image layout's files and annotations an archive is read by.
const (
	ociIndex          = "index.json"
	ociLayoutFile     = "oci-layout"
	annotationName    = "io.containerd.image.name"
	annotationRefName = "org.opencontainers.image.ref.name"
	unpackedMarker    = ".unpacked"
)

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type ociManifest struct {
	Config ociDescriptor   `json:"config"`
	Layers []ociDescriptor `json:"layers"`
}

type ociConfig struct {
	Config Config `json:"config"`
}

// LoadArchive reads an image from an OCI archive (an OCI image layout in a
// tar, as `make images` and `docker save` write) and unpacks its layers
// into a folder of cacheDir named by the image's digest, once: the same
// image loaded again reuses it. Its repositories are the names its index
// gives it (io.containerd.image.name, else a ref.name that is a full
// reference), without tags.
func LoadArchive(archive, cacheDir string) (Image, error) {
	blobs, err := readArchive(archive)
	if err != nil {
		return Image{}, fmt.Errorf("%s: %w", archive, err)
	}
	img, manifest, digest, err := blobs.image()
	if err != nil {
		return Image{}, fmt.Errorf("%s: %w", archive, err)
	}
	img.Name = strings.TrimSuffix(filepath.Base(archive), ".tar")
	dir := filepath.Join(cacheDir, strings.ReplaceAll(digest, ":", "-"))
	img.Rootfs = filepath.Join(dir, rootfsName)
	if _, err := os.Stat(filepath.Join(dir, unpackedMarker)); err == nil {
		return img, nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return Image{}, err
	}
	if err := os.MkdirAll(img.Rootfs, 0o755); err != nil {
		return Image{}, err
	}
	for _, l := range manifest.Layers {
		data, ok := blobs[l.Digest]
		if !ok {
			return Image{}, fmt.Errorf("%s: layer %s is not in the archive", archive, l.Digest)
		}
		if err := unpackLayer(img.Rootfs, data); err != nil {
			return Image{}, fmt.Errorf("%s: layer %s: %w", archive, l.Digest, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, unpackedMarker), []byte(digest+"\n"), 0o644); err != nil {
		return Image{}, err
	}
	return img, nil
}

// archiveFiles are an OCI archive's files by name: index.json, oci-layout
// and blobs by digest ("sha256:<hex>").
type archiveFiles map[string][]byte

func readArchive(archive string) (archiveFiles, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	files := archiveFiles{}
	tr := tar.NewReader(bufio.NewReader(f))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		key := name
		if rest, ok := strings.CutPrefix(name, "blobs/"); ok {
			algo, hex, _ := strings.Cut(rest, "/")
			key = algo + ":" + hex
		} else if name != ociIndex && name != ociLayoutFile {
			continue
		}
		if files[key], err = io.ReadAll(tr); err != nil {
			return nil, err
		}
	}
	if _, ok := files[ociLayoutFile]; !ok {
		return nil, errors.New("not an OCI archive: no oci-layout")
	}
	return files, nil
}

// image reads the archive's (first) image: its run configuration and
// repositories, its manifest and its digest.
func (files archiveFiles) image() (Image, ociManifest, string, error) {
	var index struct {
		Manifests []ociDescriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files[ociIndex], &index); err != nil {
		return Image{}, ociManifest{}, "", fmt.Errorf("%s: %w", ociIndex, err)
	}
	if len(index.Manifests) == 0 {
		return Image{}, ociManifest{}, "", fmt.Errorf("%s lists no image", ociIndex)
	}
	digest := index.Manifests[0].Digest
	var img Image
	for _, d := range index.Manifests {
		if d.Digest != digest {
			return Image{}, ociManifest{}, "", fmt.Errorf("%s lists more than one image", ociIndex)
		}
		ref := d.Annotations[annotationName]
		if ref == "" && strings.Contains(d.Annotations[annotationRefName], "/") {
			ref = d.Annotations[annotationRefName]
		}
		if repo := Repository(ref); repo != "" && !slices.Contains(img.Repositories, repo) {
			img.Repositories = append(img.Repositories, repo)
		}
	}
	if len(img.Repositories) == 0 {
		return Image{}, ociManifest{}, "", fmt.Errorf("%s names no repository (annotation %s)", ociIndex, annotationName)
	}
	var m ociManifest
	if err := json.Unmarshal(files[digest], &m); err != nil {
		return Image{}, ociManifest{}, "", fmt.Errorf("manifest %s: %w", digest, err)
	}
	var cfg ociConfig
	if err := json.Unmarshal(files[m.Config.Digest], &cfg); err != nil {
		return Image{}, ociManifest{}, "", fmt.Errorf("config %s: %w", m.Config.Digest, err)
	}
	img.Config = cfg.Config
	return img, m, digest, nil
}

// unpackLayer applies a layer (a tar, gzip-compressed or not) to root:
// whiteouts (.wh.<name>) remove what lower layers put there, an opaque
// whiteout (.wh..wh..opq) empties its folder, every path stays in root.
func unpackLayer(root string, data []byte) error {
	var r io.Reader = bytes.NewReader(data)
	if bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := unpackEntry(root, h, tr); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
}

func unpackEntry(root string, h *tar.Header, r io.Reader) error {
	name := path.Clean("/" + h.Name)
	dir, base := path.Split(name)
	parent, err := within(root, dir)
	if err != nil {
		return err
	}
	switch {
	case base == ".wh..wh..opq":
		entries, err := os.ReadDir(parent)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(parent, e.Name())); err != nil {
				return err
			}
		}
		return nil
	case strings.HasPrefix(base, ".wh."):
		return os.RemoveAll(filepath.Join(parent, strings.TrimPrefix(base, ".wh.")))
	case name == "/":
		return nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	target := filepath.Join(parent, base)
	mode := fs.FileMode(h.Mode).Perm() | modeBits(h.Mode)
	if fi, err := os.Lstat(target); err == nil && (!fi.IsDir() || h.Typeflag != tar.TypeDir) {
		if err := os.RemoveAll(target); err != nil {
			return err
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
	case tar.TypeReg:
		f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		return os.Symlink(h.Linkname, target)
	case tar.TypeLink:
		src, err := within(root, path.Clean("/"+h.Linkname))
		if err != nil {
			return err
		}
		return os.Link(src, target)
	default:
		return nil // devices and FIFOs: a container gets its /dev from the runtime
	}
	if err := os.Lchown(target, h.Uid, h.Gid); err != nil && !errors.Is(err, fs.ErrPermission) {
		return err
	}
	return os.Chmod(target, mode)
}

// modeBits are the set-id and sticky bits of a tar mode.
func modeBits(m int64) fs.FileMode {
	var b fs.FileMode
	if m&0o4000 != 0 {
		b |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		b |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		b |= fs.ModeSticky
	}
	return b
}

// within resolves the absolute path p inside root as a container would
// see it: symbolic links on the way are followed, an absolute one from
// root, and nothing leads out of root.
func within(root, p string) (string, error) {
	cur := "/"
	rest := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	for hops := 0; len(rest) > 0; {
		part := rest[0]
		rest = rest[1:]
		if part == "" || part == "." {
			continue
		}
		next := path.Join(cur, part)
		link, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			cur = next // not a link, or not there yet
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("too many symbolic links in %s", p)
		}
		if !path.IsAbs(link) {
			link = path.Join(cur, link)
		}
		rest = append(strings.Split(strings.Trim(path.Clean(link), "/"), "/"), rest...)
		cur = "/"
	}
	return filepath.Join(root, cur), nil
}

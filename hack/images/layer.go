// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// epoch is every time stamp in the images: their files', their layers'
// history and their configs'. A fixed time makes the digests depend on the
// inputs alone.
var epoch = time.Unix(0, 0).UTC()

// tarWriter writes a reproducible tar: entries in the order added (callers
// add in lexical order), owned by root, stamped with epoch, and nothing
// of this machine's users or times.
type tarWriter struct {
	tw *tar.Writer
	// links are the files seen, by device and inode, for hard links.
	links map[[2]uint64]string
}

func newTarWriter(w io.Writer) *tarWriter {
	return &tarWriter{tw: tar.NewWriter(w), links: map[[2]uint64]string{}}
}

// addTree adds the folder root's contents, its own entry aside, in
// lexical order, as paths relative to it.
func (t *tarWriter) addTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		return t.add(p, filepath.ToSlash(rel))
	})
}

// add adds the file at p as name.
func (t *tarWriter) add(p, name string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	link := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	}
	h, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	h.Name = name
	h.Mode = normalMode(fi)
	if fi.IsDir() {
		h.Name += "/"
	}
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
	h.ModTime, h.AccessTime, h.ChangeTime = epoch, time.Time{}, time.Time{}
	h.Format = tar.FormatPAX
	h.PAXRecords = nil
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
		key := [2]uint64{uint64(st.Dev), st.Ino}
		if first, seen := t.links[key]; seen {
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
			return t.tw.WriteHeader(h)
		}
		t.links[key] = name
	}
	if err := t.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.Copy(t.tw, f); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

// normalMode is a file's mode without this machine's umask: folders and
// programs 0755, other files 0644, the set-id and sticky bits kept.
func normalMode(fi fs.FileInfo) int64 {
	m := fi.Mode()
	perm := int64(0o644)
	if m.IsDir() || m&0o111 != 0 {
		perm = 0o755
	}
	if m&fs.ModeSymlink != 0 {
		perm = 0o777
	}
	if m&fs.ModeSetuid != 0 {
		perm |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		perm |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		perm |= 0o1000
		if m.IsDir() && m.Perm()&0o002 != 0 {
			perm |= 0o777 // /tmp
		}
	}
	return perm
}

func (t *tarWriter) Close() error { return t.tw.Close() }

// treeTar is the tar of a folder's contents.
func treeTar(root string) ([]byte, error) {
	var buf bytes.Buffer
	t := newTarWriter(&buf)
	if err := t.addTree(root); err != nil {
		return nil, fmt.Errorf("adding %s: %w", root, err)
	}
	if err := t.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// fileTar is the tar of one file at path in (absolute) with its parent
// folders, mode 0755: the binary's layer.
func fileTar(src, in string) ([]byte, error) {
	var buf bytes.Buffer
	t := newTarWriter(&buf)
	parts := strings.Split(strings.Trim(in, "/"), "/")
	for i := range parts[:len(parts)-1] {
		h := &tar.Header{Typeflag: tar.TypeDir, Name: strings.Join(parts[:i+1], "/") + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}
		if err := t.tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: strings.Join(parts, "/"), Mode: 0o755, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}
	if err := t.tw.WriteHeader(h); err != nil {
		return nil, err
	}
	if _, err := t.tw.Write(data); err != nil {
		return nil, err
	}
	if err := t.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package container

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// buildRoot assembles spec's root at spec.Root inside the calling
// thread's private mount namespace: the image's files (an overlay over
// Layers.Rootfs, or an empty tmpfs), the machine's folders it shares,
// /dev, /tmp and the mounts. /proc and /sys are left to the container's
// init, which mounts them from inside its namespaces.
func buildRoot(spec Spec) error {
	root, layers := spec.Root, spec.Root+".layers"
	if err := os.MkdirAll(layers, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", layers, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700"); err != nil {
		return fmt.Errorf("mounting the container's writable layer: %w", err)
	}
	l := &layerer{dir: layers}
	if err := l.mountRoot(root, spec.Layers.Rootfs); err != nil {
		return err
	}
	for _, d := range spec.Layers.HostDirs {
		if err := l.mountHostDir(root, spec.Layers.Rootfs, d); err != nil {
			return err
		}
	}
	if err := skeleton(root); err != nil {
		return err
	}
	mounts := make([]Mount, 0, len(devices)+len(spec.Layers.Files)+len(spec.Mounts))
	for _, d := range devices {
		mounts = append(mounts, Mount{Source: "/dev/" + d, Target: "/dev/" + d})
	}
	for target, src := range spec.Layers.Files {
		mounts = append(mounts, Mount{Source: src, Target: target, ReadOnly: true})
	}
	for _, m := range append(mounts, spec.Mounts...) {
		if err := bind(root, m); err != nil {
			return err
		}
	}
	if spec.Security.ReadOnlyRoot {
		return l.readOnly()
	}
	return nil
}

// layerer mounts the image's layers, each with a writable upper folder in
// dir that goes with the container.
type layerer struct {
	dir string
	n   int
	// mounted are the roots of the mounts it made, for readOnly.
	mounted []string
}

func (l *layerer) overlay(target string, lowers ...string) error {
	l.n++
	upper, work := filepath.Join(l.dir, strconv.Itoa(l.n), "upper"), filepath.Join(l.dir, strconv.Itoa(l.n), "work")
	for _, d := range []string{upper, work, target} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", strings.Join(lowers, ":"), upper, work)
	if err := unix.Mount("overlay", target, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mounting the image's layers at %s: %w", target, err)
	}
	l.mounted = append(l.mounted, target)
	return nil
}

// mountRoot makes root the image's own files under a writable layer, or
// an empty tmpfs for an image without files.
func (l *layerer) mountRoot(root, rootfs string) error {
	if rootfs != "" {
		return l.overlay(root, rootfs)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("mounting the container's root: %w", err)
	}
	l.mounted = append(l.mounted, root)
	return nil
}

// mountHostDir shows this machine's folder d at the same path, under the
// image's own folder of that name if it has one; a link stays a link.
func (l *layerer) mountHostDir(root, rootfs, d string) error {
	target, err := resolveIn(root, d)
	if err != nil {
		return err
	}
	if link, err := os.Readlink(d); err == nil {
		if exists(target) {
			return nil // the image's own file or folder wins
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.Symlink(link, target)
	}
	if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
		return nil // not on this machine: nothing to share
	}
	lowers := []string{d}
	if rootfs != "" {
		if fi, err := os.Stat(filepath.Join(rootfs, d)); err == nil && fi.IsDir() {
			lowers = []string{filepath.Join(rootfs, d), d}
		}
	}
	return l.overlay(target, lowers...)
}

// readOnly makes the root and the image's layers read-only; the volumes
// mounted in them keep their own mode.
func (l *layerer) readOnly() error {
	for _, t := range l.mounted {
		if err := unix.Mount("", t, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("making %s read-only (readOnlyRootFilesystem): %w", t, err)
		}
	}
	return nil
}

// skeleton makes the folders and links every container has: /proc, /sys,
// /dev (with /dev/shm and the standard stream links), /etc and /tmp.
func skeleton(root string) error {
	for _, d := range []string{"proc", "sys", "dev/shm", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777|os.ModeSticky); err != nil {
		return err
	}
	if err := unix.Mount("shm", filepath.Join(root, "dev/shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=65536k"); err != nil {
		return fmt.Errorf("mounting /dev/shm: %w", err)
	}
	for link, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(root, "dev", link)); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}

// bind mounts m.Source at m.Target under root, making the mount point (a
// folder or an empty file, as the source is) first.
func bind(root string, m Mount) error {
	fi, err := os.Stat(m.Source)
	if err != nil {
		return fmt.Errorf("mount of %s: %w", m.Target, err)
	}
	target, err := resolveIn(root, m.Target)
	if err != nil {
		return fmt.Errorf("mount point %s: %w", m.Target, err)
	}
	if li, err := os.Lstat(target); err == nil && li.Mode()&os.ModeSymlink != 0 {
		// The image's link at the mount point is replaced, never followed.
		if err := os.Remove(target); err != nil {
			return fmt.Errorf("mount point %s: %w", m.Target, err)
		}
	}
	if fi.IsDir() {
		err = os.MkdirAll(target, 0o755)
	} else if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
		var f *os.File
		if f, err = os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			err = f.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("mount point %s: %w", m.Target, err)
	}
	if err := unix.Mount(m.Source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("mounting %s at %s: %w", m.Source, m.Target, err)
	}
	if m.ReadOnly {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("making %s read-only: %w", m.Target, err)
		}
	}
	return nil
}

// lookPath finds name as the container would: a path is taken as it is,
// a bare name is searched in the container's PATH. It runs inside the
// container's root.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(pathOf(env)) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}

// maxLinks bounds the links resolveIn follows, as the kernel's ELOOP.
const maxLinks = 40

// resolveIn is path p inside root with the links of its folders resolved
// as the container would see them: an absolute link is taken from root,
// and ".." never climbs above it, so that a mount point made through the
// image's links (Debian's /var/run -> /run) stays inside the container.
// The last element is not resolved.
func resolveIn(root, p string) (string, error) {
	parts := strings.Split(filepath.Clean("/"+p), "/")[1:]
	cur := "/"
	links := 0
	for len(parts) > 0 {
		name := parts[0]
		parts = parts[1:]
		next := filepath.Join(cur, name)
		if len(parts) == 0 {
			return filepath.Join(root, next), nil
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			cur = next // not a link, or not there yet: MkdirAll makes it
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("too many links in %s", p)
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(cur, target)
		}
		parts = append(strings.Split(filepath.Clean("/"+target), "/")[1:], parts...)
		cur = "/"
	}
	return filepath.Join(root, cur), nil
}

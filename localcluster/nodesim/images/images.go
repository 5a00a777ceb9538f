// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package images is the node simulator's image store: the container
// images it can run as real programs, each a configuration (entrypoint,
// cmd, env, as a registry would serve it) and a filesystem standing for
// its layers. Filesystems are built on this machine, never pulled: `make
// node-images` assembles them from Debian packages and this project's Go
// builds into bin/images (see hack/node-images), and programs of `svcnet
// up` itself (CoreDNS, svcnet's own image) are added as single files.
// The package holds no client and starts nothing; the runtime
// (nodesim/container) turns an Image into a root.
package images

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Config is an image's run configuration, with the OCI image config's
// field names.
type Config struct {
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	Env        []string `json:"Env,omitempty"`
	WorkingDir string   `json:"WorkingDir,omitempty"`
	User       string   `json:"User,omitempty"`
	// StopSignal is the signal that asks the program to stop (SIGTERM
	// when empty), e.g. SIGQUIT for nginx.
	StopSignal string `json:"StopSignal,omitempty"`
	// Labels are the image's labels, e.g. org.opencontainers.image.version.
	Labels map[string]string `json:"Labels,omitempty"`
}

// Image is one image the nodes can run.
type Image struct {
	// Name names the image in messages (its folder in a store).
	Name string `json:"-"`
	// Repositories are the image references it answers to, without tag
	// or digest; each also matches without its registry host
	// (registry.k8s.io/pause matches pause on any registry).
	Repositories []string `json:"repositories"`
	Config       Config   `json:"config"`
	// Rootfs is a folder of this machine holding the image's own files,
	// placed at the container's /; empty: none.
	Rootfs string `json:"-"`
	// HostDirs are folders of this machine that the container sees
	// read-only at the same paths, under the image's own files of the
	// same folder: an image that shares the machine's libraries and
	// tools. A folder that is a symbolic link here is the same link in
	// the container.
	HostDirs []string `json:"hostDirs,omitempty"`
	// Files are single files of this machine placed read-only at the
	// given paths of the container (e.g. "/coredns": bin/k8s/coredns).
	Files map[string]string `json:"-"`
}

// Store is the set of images the nodes run for real.
type Store struct {
	images []Image
}

// manifestName is the file describing an image in a store folder; its
// files are in rootfsName beside it.
const (
	manifestName = "image.json"
	rootfsName   = "rootfs"
)

// Load reads every image of a store folder (dir/<name>/image.json with
// its dir/<name>/rootfs). A missing folder is an empty store.
func Load(dir string) (*Store, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return &Store{}, nil
	}
	if err != nil {
		return nil, err
	}
	s := &Store{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		img, err := loadImage(filepath.Join(dir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // not an image folder
		}
		if err != nil {
			return nil, fmt.Errorf("image %s in %s: %w", e.Name(), dir, err)
		}
		img.Name = e.Name()
		s.images = append(s.images, img)
	}
	return s, nil
}

func loadImage(dir string) (Image, error) {
	data, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return Image{}, err
	}
	var img Image
	if err := json.Unmarshal(data, &img); err != nil {
		return Image{}, fmt.Errorf("%s: %w", manifestName, err)
	}
	if len(img.Repositories) == 0 {
		return Image{}, fmt.Errorf("%s names no repository", manifestName)
	}
	rootfs := filepath.Join(dir, rootfsName)
	if fi, err := os.Stat(rootfs); err == nil && fi.IsDir() {
		img.Rootfs = rootfs
	}
	return img, nil
}

// Add puts images into the store ahead of those it holds, so that they
// win a lookup.
func (s *Store) Add(imgs ...Image) {
	s.images = append(slices.Clone(imgs), s.images...)
}

// Images lists the store's images.
func (s *Store) Images() []Image { return slices.Clone(s.images) }

// Lookup finds the image a container's image reference names.
func (s *Store) Lookup(ref string) (Image, bool) {
	if s == nil {
		return Image{}, false
	}
	repo := Repository(ref)
	for _, img := range s.images {
		for _, r := range img.Repositories {
			if r == repo || hostless(r) == hostless(repo) {
				return img, true
			}
		}
	}
	return Image{}, false
}

// Repository is an image reference without its tag or digest.
func Repository(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// hostless is a repository without its registry host, and without
// Docker Hub's implicit library/ (docker.io/library/nginx is nginx): the
// first part names a registry when it has a dot or a port, or is
// localhost.
func hostless(repo string) string {
	first, rest, ok := strings.Cut(repo, "/")
	if ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		repo = rest
	}
	return strings.TrimPrefix(repo, "library/")
}

// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// fixture makes the binaries and the images' roots under dir, the files'
// times, modes and owners as this machine's at mtime, so that two
// fixtures differ in everything an image must not depend on.
func fixture(t *testing.T, dir string, mtime time.Time, umaskDirs os.FileMode) Inputs {
	t.Helper()
	files := map[string]string{
		"bin/svcnet":                                    "#!/bin/sh\necho svcnet\n",
		"bin/svcnet-agent":                              "#!/bin/sh\necho svcnet-agent\n",
		"roots/svcnet/etc/passwd":                       "nonroot:x:65532:65532::/:/sbin/nologin\n",
		"roots/svcnet-agent/etc/passwd":                 "root:x:0:0::/:/sbin/nologin\n",
		"roots/svcnet-agent/usr/sbin/xtables-nft-multi": "an iptables\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), umaskDirs); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range [][2]string{{"xtables-nft-multi", "iptables-nft"}, {"iptables-nft", "iptables"}} {
		if err := os.Symlink(l[0], filepath.Join(dir, "roots/svcnet-agent/usr/sbin", l[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(dir, "roots/svcnet-agent/usr/sbin/xtables-nft-multi"), filepath.Join(dir, "roots/svcnet-agent/usr/sbin/hardlink")); err != nil {
		t.Fatal(err)
	}
	if err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.Mode()&os.ModeSymlink != 0 {
			return err
		}
		return os.Chtimes(p, mtime, mtime)
	}); err != nil {
		t.Fatal(err)
	}
	return Inputs{Binaries: filepath.Join(dir, "bin"), Root: filepath.Join(dir, "roots"), Version: "v1.2.3", Tags: []string{"v1.2.3", "latest"}}
}

// TestReproducible builds each image twice from the same inputs made at
// different times: the same digests and the same archives, byte for
// byte.
func TestReproducible(t *testing.T) {
	a := fixture(t, t.TempDir(), time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC), 0o755)
	b := fixture(t, t.TempDir(), time.Now(), 0o700)
	for _, spec := range Specs {
		var archives [][]byte
		var digests []string
		for _, in := range []Inputs{a, b} {
			in.Root = filepath.Join(in.Root, spec.Name)
			out := t.TempDir()
			built, err := build(spec, in, out)
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(built.Archive)
			if err != nil {
				t.Fatal(err)
			}
			archives, digests = append(archives, data), append(digests, built.Digest.String())
		}
		if digests[0] != digests[1] {
			t.Errorf("%s: digests %s and %s from the same inputs", spec.Name, digests[0], digests[1])
		}
		if !bytes.Equal(archives[0], archives[1]) {
			t.Errorf("%s: the archives differ", spec.Name)
		}
	}
}

// TestArchive reads an archive back as the OCI layout it is and as the
// docker save archive (manifest.json) it also is: one image, with its
// config, tags and files.
func TestArchive(t *testing.T) {
	in := fixture(t, t.TempDir(), time.Now(), 0o755)
	spec := Specs[1]
	in.Root = filepath.Join(in.Root, spec.Name)
	built, err := build(spec, in, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if out, err := exec.Command("tar", "-xf", built.Archive, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar -xf: %v: %s", err, out)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range im.Manifests {
		if d.Digest != built.Digest {
			t.Errorf("index entry %s, want the image %s", d.Digest, built.Digest)
		}
		names = append(names, d.Annotations["io.containerd.image.name"])
	}
	if want := []string{spec.Repository + ":v1.2.3"}; !slices.Equal(names, want) {
		t.Errorf("image names in index.json %q, want %q", names, want)
	}
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var saved []struct{ RepoTags []string }
	if err := json.Unmarshal(data, &saved); err != nil || len(saved) != 1 {
		t.Fatalf("manifest.json: %v: %s", err, data)
	}
	if want := []string{spec.Repository + ":v1.2.3", spec.Repository + ":latest"}; !slices.Equal(saved[0].RepoTags, want) {
		t.Errorf("manifest.json's RepoTags %q, want %q", saved[0].RepoTags, want)
	}
	docker, err := tarball.ImageFromPath(built.Archive, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := idx.Image(built.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if got, exp := digests(t, docker), digests(t, want); !slices.Equal(got, exp) {
		t.Errorf("manifest.json's config and layers %q, want the OCI index's %q", got, exp)
	}
	cf, err := docker.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, spec.Entrypoint) || cf.Config.User != spec.User || !cf.Created.Equal(epoch) {
		t.Errorf("config %+v, created %v", cf.Config, cf.Created)
	}
	files := map[string]tar.Header{}
	tr := tar.NewReader(mutate.Extract(docker))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = *h
	}
	for name, want := range map[string]byte{"svcnet-agent": tar.TypeReg, "etc/passwd": tar.TypeReg, "usr/sbin/iptables": tar.TypeSymlink, "usr/sbin/xtables-nft-multi": tar.TypeLink} {
		h, ok := files[name]
		if !ok || h.Typeflag != want || h.Uid != 0 || !h.ModTime.Equal(epoch) {
			t.Errorf("%s in the image: %+v (present %t), want type %c owned by root at the epoch", name, h, ok, want)
		}
	}
}

// digests are an image's config digest and its layers' digests.
func digests(t *testing.T, img v1.Image) []string {
	t.Helper()
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	out := []string{cfg.String()}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d.String())
	}
	return out
}

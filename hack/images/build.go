// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Inputs are what an image is made of.
type Inputs struct {
	// Binaries is the folder of the images' binaries (static), each named
	// as its Spec's Command.
	Binaries string
	// Root is the folder root.sh assembled for the image.
	Root string
	// Version labels the image (org.opencontainers.image.version).
	Version string
	// Tags name the image in its archive, besides the repository.
	Tags []string
}

// Built is an image written to an archive.
type Built struct {
	Spec    Spec
	Archive string
	Digest  v1.Hash
	// Size is the archive's size: the compressed layers and the JSON.
	Size int64
}

// image builds spec's image from in: the root's layer, then the binary's.
func image(spec Spec, in Inputs) (v1.Image, error) {
	rootTar, err := treeTar(in.Root)
	if err != nil {
		return nil, err
	}
	binTar, err := fileTar(filepath.Join(in.Binaries, spec.Command), spec.Binary)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	var adds []mutate.Addendum
	for _, l := range []struct {
		tar []byte
		by  string
	}{
		{rootTar, fmt.Sprintf("hack/images/root.sh %s", spec.Name)},
		{binTar, spec.Command + " at " + spec.Binary},
	} {
		layer, err := gzipLayer(l.tar)
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.Addendum{Layer: layer, MediaType: types.OCILayer, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: l.by}})
	}
	if img, err = mutate.Append(img, adds...); err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = runtime.GOARCH, "linux", v1.Time{Time: epoch}
	cf.Config = v1.Config{
		Entrypoint: spec.Entrypoint, Cmd: spec.Cmd, Env: spec.Env, User: spec.User,
		Labels: map[string]string{
			"org.opencontainers.image.title":   spec.Name,
			"org.opencontainers.image.source":  "https://github.com/svcnet-io/svcnet",
			"org.opencontainers.image.version": in.Version,
		},
	}
	return mutate.ConfigFile(img, cf)
}

// gzipLayer compresses a layer's tar with the standard library's gzip at
// its default level, whose output depends on the input alone (no name, no
// time in the header).
func gzipLayer(data []byte) (v1.Layer, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	compressed := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(compressed)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// build builds spec's image and writes its archive into out.
func build(spec Spec, in Inputs, out string) (Built, error) {
	img, err := image(spec, in)
	if err != nil {
		return Built{}, fmt.Errorf("image %s: %w", spec.Name, err)
	}
	archive := filepath.Join(out, spec.Name+".tar")
	if err := writeArchive(img, spec.Repository, in.Tags, archive); err != nil {
		return Built{}, fmt.Errorf("image %s: %w", spec.Name, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return Built{}, err
	}
	fi, err := os.Stat(archive)
	if err != nil {
		return Built{}, err
	}
	return Built{Spec: spec, Archive: archive, Digest: digest, Size: fi.Size()}, nil
}

// writeArchive writes img as an OCI image layout (oci-layout, index.json,
// blobs/) in a tar, named by the first tag, with Docker's manifest.json
// beside it, as `docker save` writes since Docker 25: `docker load`,
// `podman load`, `skopeo copy oci-archive:`, `ctr images import` and
// `kind load image-archive` all read it.
func writeArchive(img v1.Image, repository string, tags []string, archive string) error {
	dir, err := os.MkdirTemp(filepath.Dir(archive), ".layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	// One index entry, named by the first tag, so that tools taking an
	// OCI archive need no tag to pick the image; Docker's manifest.json
	// carries every tag.
	var repoTags []string
	for _, tag := range tags {
		repoTags = append(repoTags, repository+":"+tag)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tags[0],
		"io.containerd.image.name":          repoTags[0],
	})); err != nil {
		return err
	}
	manifest, err := img.Manifest()
	if err != nil {
		return err
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	docker := []map[string]any{{"Config": blob(manifest.Config.Digest), "RepoTags": repoTags, "Layers": []string{}}}
	layers := []string{}
	for _, l := range manifest.Layers {
		layers = append(layers, blob(l.Digest))
	}
	docker[0]["Layers"] = layers
	data, err := json.Marshal(docker)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), data, 0o644); err != nil {
		return err
	}
	data, err = treeTar(dir)
	if err != nil {
		return err
	}
	tmp := archive + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, archive)
}

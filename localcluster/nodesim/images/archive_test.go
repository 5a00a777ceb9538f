// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// tarOf is a tar of the entries, in order; a Linkname makes a symlink (or a
// hard link with Typeflag TypeLink), a trailing / a folder.
func tarOf(t *testing.T, entries []tar.Header, contents map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		h := h
		switch {
		case h.Typeflag != 0:
		case h.Linkname != "":
			h.Typeflag = tar.TypeSymlink
		case h.Name[len(h.Name)-1] == '/':
			h.Typeflag = tar.TypeDir
		default:
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o755
		}
		h.Size = int64(len(contents[h.Name]))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(contents[h.Name])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ociArchive writes an OCI archive of one image with the layers, named by
// refs, and returns its path and the image's digest.
func ociArchive(t *testing.T, cfg Config, refs []string, layers ...[]byte) (string, string) {
	t.Helper()
	blobs := map[string][]byte{}
	add := func(b []byte) string {
		d := fmt.Sprintf("sha256:%x", sha256.Sum256(b))
		blobs[d] = b
		return d
	}
	mustJSON := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	m := map[string]any{"schemaVersion": 2, "config": map[string]any{"digest": add(mustJSON(map[string]any{"config": cfg}))}}
	var ls []any
	for _, l := range layers {
		ls = append(ls, map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": add(l)})
	}
	m["layers"] = ls
	digest := add(mustJSON(m))
	var manifests []any
	for _, r := range refs {
		manifests = append(manifests, map[string]any{"digest": digest, "annotations": map[string]string{annotationName: r, annotationRefName: "latest"}})
	}
	entries := []tar.Header{{Name: "oci-layout"}, {Name: "index.json"}, {Name: "blobs/"}, {Name: "blobs/sha256/"}}
	contents := map[string]string{"oci-layout": `{"imageLayoutVersion":"1.0.0"}`, "index.json": string(mustJSON(map[string]any{"manifests": manifests}))}
	for d, b := range blobs {
		name := "blobs/sha256/" + d[len("sha256:"):]
		entries = append(entries, tar.Header{Name: name, Mode: 0o644})
		contents[name] = string(b)
	}
	p := filepath.Join(t.TempDir(), "svcnet-agent.tar")
	if err := os.WriteFile(p, tarOf(t, entries, contents), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, digest
}

// TestLoadArchive unpacks an image of two layers, the second removing and
// replacing what the first put there, with links that try to lead out of
// the root; the configuration and the names come from the archive.
func TestLoadArchive(t *testing.T) {
	base := gz(t, tarOf(t, []tar.Header{
		{Name: "usr/"}, {Name: "usr/sbin/"}, {Name: "usr/sbin/xtables-nft-multi"},
		{Name: "usr/sbin/iptables", Linkname: "xtables-nft-multi"},
		{Name: "usr/sbin/iptables-hard", Linkname: "usr/sbin/xtables-nft-multi", Typeflag: tar.TypeLink},
		{Name: "sbin", Linkname: "usr/sbin"},
		{Name: "etc/"}, {Name: "etc/gone", Mode: 0o644}, {Name: "opaque/"}, {Name: "opaque/old", Mode: 0o644},
		{Name: "tmp/", Mode: 0o1777},
		{Name: "escape", Linkname: "../../../.."},
		{Name: "absolute", Linkname: "/etc"},
	}, map[string]string{"usr/sbin/xtables-nft-multi": "iptables", "etc/gone": "x", "opaque/old": "x"}))
	top := tarOf(t, []tar.Header{
		{Name: "etc/.wh.gone"}, {Name: "opaque/.wh..wh..opq"}, {Name: "opaque/new", Mode: 0o644},
		{Name: "sbin/nft"}, // through the link, into usr/sbin
		{Name: "escape/outside", Mode: 0o644},
		{Name: "absolute/passwd", Mode: 0o644},
		{Name: "svcnet"},
	}, map[string]string{"svcnet": "#!svcnet", "sbin/nft": "nft", "opaque/new": "y", "escape/outside": "z", "absolute/passwd": "p"})
	cfg := Config{Entrypoint: []string{"/svcnet"}, Cmd: []string{"agent"}, Env: []string{"PATH=/usr/sbin"}, User: "0:0", Labels: map[string]string{"org.opencontainers.image.version": "v1"}}
	archive, digest := ociArchive(t, cfg, []string{"ghcr.io/svcnet-io/svcnet-agent:latest", "ghcr.io/svcnet-io/svcnet-agent:v1"}, base, top)
	cache := t.TempDir()

	img, err := LoadArchive(archive, cache)
	if err != nil {
		t.Fatal(err)
	}
	if img.Name != "svcnet-agent" || !slices.Equal(img.Repositories, []string{"ghcr.io/svcnet-io/svcnet-agent"}) {
		t.Errorf("name %q, repositories %q", img.Name, img.Repositories)
	}
	if fmt.Sprint(img.Config) != fmt.Sprint(cfg) {
		t.Errorf("config %+v, want %+v", img.Config, cfg)
	}
	root := img.Rootfs
	if root != filepath.Join(cache, "sha256-"+digest[len("sha256:"):], "rootfs") {
		t.Errorf("rootfs %s: not in the cache under the digest", root)
	}
	for p, want := range map[string]string{
		"svcnet": "#!svcnet", "usr/sbin/iptables": "iptables", "usr/sbin/iptables-hard": "iptables",
		"usr/sbin/nft": "nft", "opaque/new": "y", "outside": "z", "etc/passwd": "p",
	} {
		if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", p, b, err, want)
		}
	}
	for _, p := range []string{"etc/gone", "opaque/old"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !os.IsNotExist(err) {
			t.Errorf("%s: whited out, but there (%v)", p, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("tmp: %v %v, want sticky 0777", fi.Mode(), err)
	}

	// Loaded again: the unpacked root is reused, not unpacked anew.
	marker := filepath.Join(root, "marker")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadArchive(archive, cache); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the second load unpacked again: %v", err)
	}

	if _, err := LoadArchive(filepath.Join(t.TempDir(), "missing.tar"), cache); err == nil {
		t.Error("a missing archive loaded")
	}
}

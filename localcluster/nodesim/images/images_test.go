// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package images

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLookup(t *testing.T) {
	s := &Store{}
	s.Add(Image{Name: "coredns", Repositories: []string{"registry.k8s.io/coredns/coredns"}},
		Image{Name: "nginx", Repositories: []string{"docker.io/library/nginx", "registry.k8s.io/e2e-test-images/nginx"}})
	for ref, want := range map[string]string{
		"registry.k8s.io/coredns/coredns:v1.12.0":       "coredns",
		"registry.k8s.io/coredns/coredns":               "coredns",
		"coredns/coredns:1.11.1":                        "coredns",
		"docker.io/coredns/coredns@sha256:0123456789ab": "coredns",
		"localhost:5000/coredns/coredns:dev":            "coredns",
		"registry.k8s.io/coredns:v1.8.0":                "",
		"registry.k8s.io/coredns/coredns-extra:v1":      "",
		"nginx":                          "nginx",
		"nginx:1.27":                     "nginx",
		"docker.io/library/nginx:latest": "nginx",
		"registry.k8s.io/e2e-test-images/nginx:1.27.0-2": "nginx",
		"example.com/someone/nginx":                      "",
	} {
		img, ok := s.Lookup(ref)
		if got := img.Name; (ok && got != want) || (!ok && want != "") {
			t.Errorf("Lookup(%q) = %q (%t), want %q", ref, got, ok, want)
		}
	}
	var none *Store
	if _, ok := none.Lookup("nginx"); ok {
		t.Error("a nil store knows an image")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "agnhost", "image.json"), `{"repositories": ["registry.k8s.io/e2e-test-images/agnhost"],
		"config": {"Entrypoint": ["/agnhost"], "Cmd": ["pause"]}, "hostDirs": ["/usr"]}`)
	write(filepath.Join(dir, "agnhost", "rootfs", "agnhost"), "")
	write(filepath.Join(dir, "notes.txt"), "not an image")
	if err := os.MkdirAll(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	img, ok := s.Lookup("registry.k8s.io/e2e-test-images/agnhost:2.66.1")
	if !ok || img.Name != "agnhost" || img.Rootfs != filepath.Join(dir, "agnhost", "rootfs") || img.Config.Cmd[0] != "pause" || img.HostDirs[0] != "/usr" {
		t.Errorf("loaded %+v (%t)", img, ok)
	}
	write(filepath.Join(dir, "bad", "image.json"), `{"config": {}}`)
	if _, err := Load(dir); err == nil {
		t.Error("an image without repositories loaded")
	}
	if s, err := Load(filepath.Join(dir, "missing")); err != nil || len(s.Images()) != 0 {
		t.Errorf("a missing store: %v, %d images", err, len(s.Images()))
	}
}

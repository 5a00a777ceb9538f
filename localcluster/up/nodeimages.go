// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/svcnet-io/svcnet/localcluster/addons"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
)

// findImagesDir resolves the folder of the node images: --images-dir,
// else $SVCNET_IMAGES_DIR, images/ beside the svcnet binary, ./bin/images;
// the first that exists. "" when none does.
func (c *Config) findImagesDir() string {
	candidates := []string{c.ImagesDir}
	if c.ImagesDir == "" {
		candidates = []string{os.Getenv("SVCNET_IMAGES_DIR")}
		if exe, err := os.Executable(); err == nil {
			candidates = append(candidates, filepath.Join(filepath.Dir(exe), "images"))
		}
		candidates = append(candidates, filepath.Join("bin", "images"))
	}
	for _, d := range candidates {
		if fi, err := os.Stat(d); d != "" && err == nil && fi.IsDir() {
			abs, _ := filepath.Abs(d)
			return abs
		}
	}
	return ""
}

// imageStore is what the nodes run for real: the built images, CoreDNS
// (bin/k8s/coredns) and, for --install=manifests, svcnet's own images
// from their archives (make images).
func (s *session) imageStore() (*images.Store, error) {
	dir := s.cfg.findImagesDir()
	if s.cfg.ImagesDir != "" && dir == "" {
		return nil, fmt.Errorf("--images-dir %s does not exist: run `make node-images`", s.cfg.ImagesDir)
	}
	store, err := images.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the node images (make node-images): %w", err)
	}
	store.Add(addons.CoreDNSImage(filepath.Join(s.binDir, "coredns")))
	if s.cfg.KubeProxy {
		store.Add(addons.KubeProxyNodeImage(filepath.Join(s.binDir, upstreamNodeBinary)))
	}
	if s.manifests {
		imgs, err := s.svcnetImagesOf()
		if err != nil {
			return nil, err
		}
		store.Add(imgs...)
	}
	var names []string
	for _, img := range store.Images() {
		names = append(names, img.Name)
	}
	slices.Sort(names)
	where := dir
	if where == "" {
		where = "no images folder: run `make node-images` for agnhost, busybox, nginx ..."
	}
	fmt.Fprintf(s.out, "node images run for real: %s (%s); others run a stand-in server\n", strings.Join(names, ", "), where)
	return store, nil
}

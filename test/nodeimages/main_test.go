// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package nodeimages tests the image filesystems that
// hack/node-images/build.sh builds into bin/images (make node-images)
// without the node simulator: each image's root is assembled as the
// simulator assembles a container's (the image's rootfs as a writable
// overlay, the machine's hostDirs merged read-only under it, /proc, /dev
// and the Pod's /etc files), entered with chroot, and its real program is
// run and spoken to. The whole test binary runs in private network and
// mount namespaces (test/harness/privatens), so the servers it starts
// listen on the namespace's loopback and nothing is mounted on the host.
package nodeimages

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/svcnet-io/svcnet/test/harness/privatens"
)

// privateNS is where the whole test binary runs.
var privateNS *privatens.Env

func TestMain(m *testing.M) {
	privateNS = privatens.Enter()
	privateNS.Report("node image tests")
	os.Exit(m.Run())
}

// imagesDir is bin/images of this checkout.
var imagesDir = filepath.Join("..", "..", "bin", "images")

// requireImages stops t where it cannot run: no namespaces here (see
// privatens.Env.Require), or no bin/images, which it skips unless CI
// requires the namespace suites (privatens.RequireEnv), and fails then.
func requireImages(t *testing.T) {
	t.Helper()
	privateNS.Require(t)
	if _, err := os.Stat(filepath.Join(imagesDir, ".stamp")); err != nil {
		if privatens.Required() {
			t.Fatalf("%s=1 but the images are not built (make node-images): %v", privatens.RequireEnv, err)
		}
		t.Skipf("the images are not built (make node-images): %v", err)
	}
}

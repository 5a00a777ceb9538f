// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodeimages

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
	"github.com/svcnet-io/svcnet/test/harness/privatens"
)

// ociDir is bin/oci of this checkout (make images).
var ociDir = filepath.Join("..", "..", "bin", "oci")

// assembleArchive loads an image of bin/oci as the node simulator does
// and builds its root.
func assembleArchive(t *testing.T, name string) *container {
	t.Helper()
	privateNS.Require(t)
	archive := filepath.Join(ociDir, name+".tar")
	if _, err := os.Stat(archive); err != nil {
		if privatens.Required() {
			t.Fatalf("%s=1 but svcnet's images are not built (make images): %v", privatens.RequireEnv, err)
		}
		t.Skipf("svcnet's images are not built (make images): %v", err)
	}
	img, err := images.LoadArchive(archive, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var cfg image
	cfg.Repositories = img.Repositories
	cfg.Config.Entrypoint, cfg.Config.Cmd, cfg.Config.Env = img.Config.Entrypoint, img.Config.Cmd, img.Config.Env
	cfg.Config.WorkingDir, cfg.Config.User = img.Config.WorkingDir, img.Config.User
	return assembleFrom(t, img.Rootfs, cfg)
}

// TestSvcnetAgentImage runs the agent image's own iptables-nft and nft
// against this namespace's kernel, then `svcnet agent --cleanup` of each
// mode as docs/operations.md tells operators to: svcnet's rules go,
// another's stay.
func TestSvcnetAgentImage(t *testing.T) {
	c := assembleArchive(t, "svcnet-agent")
	if got := c.output(t, "iptables", "-V"); !strings.Contains(got, "nf_tables") {
		t.Errorf("iptables -V = %q, want the nf_tables backend", got)
	}
	c.output(t, "nft", "add", "table", "ip", "svcnet")
	c.output(t, "nft", "add", "table", "ip", "other")
	c.output(t, "iptables", "-t", "nat", "-N", "KUBE-SERVICES")
	c.output(t, "iptables", "-t", "nat", "-A", "PREROUTING", "-j", "KUBE-SERVICES")
	c.output(t, "iptables", "-t", "nat", "-N", "OTHER")
	c.output(t, "conntrack", "-L")
	for _, mode := range []string{"nftables", "iptables"} {
		c.output(t, c.argv(nil, []string{"agent", "--cleanup", "--mode=" + mode})...)
	}
	tables := c.output(t, "nft", "list", "tables")
	if strings.Contains(tables, "svcnet") || !strings.Contains(tables, "table ip other") {
		t.Errorf("nft tables after --cleanup:\n%s", tables)
	}
	nat := c.output(t, "iptables-save", "-t", "nat")
	if strings.Contains(nat, "KUBE-") || !strings.Contains(nat, ":OTHER") {
		t.Errorf("nat table after --cleanup:\n%s", nat)
	}
}

// TestSvcnetImage: the manager's image is the binary and a few /etc
// files, run as nonroot.
func TestSvcnetImage(t *testing.T) {
	c := assembleArchive(t, "svcnet")
	if c.image.Config.User != "65532:65532" {
		t.Errorf("the manager image runs as %q, want 65532:65532", c.image.Config.User)
	}
	if got := c.output(t, c.argv(nil, []string{"version"})...); !strings.Contains(got, "svcnet") {
		t.Errorf("svcnet version = %q", got)
	}
	for _, p := range []string{"usr/sbin/iptables", "bin/sh", "usr/bin"} {
		if _, err := os.Lstat(filepath.Join(c.root, p)); err == nil {
			t.Errorf("the manager image has /%s: it should hold the binary alone", p)
		}
	}
}

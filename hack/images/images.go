// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Command images builds svcnet's container images as OCI archives without
// a Docker daemon: `make images` (build.sh) runs it on the svcnet and
// svcnet-agent binaries and the roots that root.sh assembles. The same inputs give the same
// archives, byte for byte: every time stamp is fixed, tar entries are
// sorted and owned by root, and nothing of this machine but the inputs
// goes in. The Dockerfile beside the repository's root builds the same
// images with docker or buildah (dockerfile_test.go keeps the two in step).
package main

// Spec is one image svcnet ships.
type Spec struct {
	// Name is the image's name in messages and its archive's (<name>.tar).
	Name string
	// Repository is what the manifests in config/ pull.
	Repository string
	// Command is the image's binary: the command under cmd/ it is built
	// from, and its file's name where make images builds it.
	Command string
	// Binary is where the binary goes in the image.
	Binary     string
	Entrypoint []string
	Cmd        []string
	Env        []string
	// User runs the entrypoint, uid:gid.
	User string
	// Packages tells whether the root has agent.packages (root.sh).
	Packages bool
}

// Specs are the images, manager first. The manager's is svcnet on a root
// of a few /etc files, run as nonroot (65532); the agent's is svcnet-agent
// with Debian's iptables, nftables and conntrack and runs as root, which
// the DaemonSet narrows to NET_ADMIN and NET_RAW.
var Specs = []Spec{
	{
		Name: "svcnet", Repository: "ghcr.io/svcnet-io/svcnet", Command: "svcnet", Binary: "/svcnet",
		Entrypoint: []string{"/svcnet"}, Cmd: []string{"manager"},
		Env: []string{"PATH=" + path}, User: "65532:65532",
	},
	{
		Name: "svcnet-agent", Repository: "ghcr.io/svcnet-io/svcnet-agent", Command: "svcnet-agent", Binary: "/svcnet-agent",
		Entrypoint: []string{"/svcnet-agent"}, Cmd: []string{"agent"},
		Env: []string{"PATH=" + path}, User: "0:0", Packages: true,
	},
}

const path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

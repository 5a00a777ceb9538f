// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package container

import (
	"os"
	"syscall"
)

// Mount puts Source (a file or folder of this machine) at Target inside
// the container's root.
type Mount struct {
	Source, Target string
	ReadOnly       bool
}

// Layers are the image's filesystem (see images.Image).
type Layers struct {
	// Rootfs holds the image's own files; empty: none.
	Rootfs string
	// HostDirs are this machine's folders seen read-only at the same
	// paths, under Rootfs's folder of the same name.
	HostDirs []string
	// Files are single files of this machine, by path in the container.
	Files map[string]string
}

// Security is what the container's securityContext asks of its
// processes, as a container runtime applies it.
type Security struct {
	// UID and GID run the processes; UID 0 keeps root, with Caps.
	UID, GID int64
	// Caps are the capabilities (numbers) a root process keeps: its
	// bounding and effective set. Ignored for another user, who keeps
	// none, and when Privileged, which keeps all.
	Caps         []uintptr
	Privileged   bool
	ReadOnlyRoot bool
	NoNewPrivs   bool
}

// Spec is one start of a container.
type Spec struct {
	// NetNS is the network namespace's file (the Pod's, or its node's
	// for hostNetwork).
	NetNS string
	// Root is an empty folder that becomes the container's root; its
	// sibling Root+".layers" takes the image's writable layers.
	Root string
	// Hostname is the UTS namespace's hostname; HostUTS keeps the
	// simulator's instead (hostNetwork Pods see their node's name).
	Hostname string
	Argv     []string
	Env      []string
	// Dir is the working folder inside the root; "/" when empty.
	Dir    string
	Layers Layers
	Mounts []Mount
	// Security is the processes' user, capabilities and root's
	// writability.
	Security Security
	// Stdin keeps the process's standard input open for Attach;
	// StdinOnce closes it when the first attached client goes; TTY gives
	// the process a terminal.
	Stdin, StdinOnce, TTY bool
	// StopSignal asks the program to stop (SIGTERM when zero).
	StopSignal syscall.Signal
	// Log receives the process's output, in the CRI log format.
	Log *LogFile
}

// devices are bound from this machine into every container's /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// containerUmask is the umask of a container's processes and of the
// building of its root: OCI's default, which runc and crun give every
// container.
const containerUmask = 0o022

// defaultPath is a container's PATH when its environment has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func pathOf(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if len(env[i]) > 5 && env[i][:5] == "PATH=" {
			return env[i][5:]
		}
	}
	return defaultPath
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

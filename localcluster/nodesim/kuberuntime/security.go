// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kuberuntime

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/svcnet-io/svcnet/localcluster/nodesim/container"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/images"
)

// defaultCaps are a container runtime's default capabilities (containerd,
// CRI-O and Docker agree on these).
var defaultCaps = []string{"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
	"SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"}

// capNames numbers the capabilities by name (linux/capability.h).
var capNames = []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
	"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
	"SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
	"SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
	"MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF",
	"CHECKPOINT_RESTORE"}

// securityFor merges the Pod's and the container's securityContext the way
// the kubelet does (the container's fields win) over the image's user, and
// checks runAsNonRoot.
func securityFor(pod *corev1.Pod, c corev1.Container, img images.Image) (container.Security, error) {
	var s container.Security
	uid, gid, err := imageUser(img)
	if err != nil {
		return s, fmt.Errorf("container %s: %w", c.Name, err)
	}
	s.UID, s.GID = uid, gid
	var nonRoot bool
	if psc := pod.Spec.SecurityContext; psc != nil {
		s.UID, s.GID = ptr.Deref(psc.RunAsUser, s.UID), ptr.Deref(psc.RunAsGroup, s.GID)
		nonRoot = ptr.Deref(psc.RunAsNonRoot, false)
	}
	caps := slices.Clone(defaultCaps)
	if sc := c.SecurityContext; sc != nil {
		s.UID, s.GID = ptr.Deref(sc.RunAsUser, s.UID), ptr.Deref(sc.RunAsGroup, s.GID)
		nonRoot = ptr.Deref(sc.RunAsNonRoot, nonRoot)
		s.Privileged = ptr.Deref(sc.Privileged, false)
		s.ReadOnlyRoot = ptr.Deref(sc.ReadOnlyRootFilesystem, false)
		s.NoNewPrivs = !ptr.Deref(sc.AllowPrivilegeEscalation, true)
		if sc.Capabilities != nil {
			caps = applyCaps(caps, sc.Capabilities)
		}
	}
	if nonRoot && s.UID == 0 {
		return s, fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", pod.Namespace+"/"+pod.Name, c.Name)
	}
	for _, name := range caps {
		n := slices.Index(capNames, name)
		if n < 0 {
			return s, fmt.Errorf("container %s: unknown capability %q", c.Name, name)
		}
		s.Caps = append(s.Caps, uintptr(n))
	}
	slices.Sort(s.Caps)
	s.Caps = slices.Compact(s.Caps)
	return s, nil
}

// applyCaps drops and then adds capabilities ("ALL" in drop drops every
// one), names with or without the CAP_ prefix.
func applyCaps(caps []string, c *corev1.Capabilities) []string {
	norm := func(n corev1.Capability) string { return strings.TrimPrefix(strings.ToUpper(string(n)), "CAP_") }
	for _, d := range c.Drop {
		if norm(d) == "ALL" {
			caps = nil
			break
		}
		caps = slices.DeleteFunc(caps, func(n string) bool { return n == norm(d) })
	}
	for _, a := range c.Add {
		caps = append(caps, norm(a))
	}
	return caps
}

// imageUser is the user (and group) the image runs as: its config's User,
// "uid[:gid]" or a name of its /etc/passwd; root when it names none.
func imageUser(img images.Image) (uid, gid int64, err error) {
	user, group, _ := strings.Cut(img.Config.User, ":")
	if user == "" {
		return 0, 0, nil
	}
	if uid, err = strconv.ParseInt(user, 10, 64); err != nil {
		u, ok := passwdEntry(img.Rootfs, user)
		if !ok {
			return 0, 0, fmt.Errorf("the image's user %q is not in its /etc/passwd", user)
		}
		uid, gid = u[0], u[1]
	}
	if group != "" {
		if gid, err = strconv.ParseInt(group, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("the image's group %q: only numeric groups are supported", group)
		}
	}
	return uid, gid, nil
}

// passwdEntry finds name's uid and gid in the image's /etc/passwd.
func passwdEntry(rootfs, name string) ([2]int64, bool) {
	if rootfs == "" {
		return [2]int64{}, false
	}
	data, err := os.ReadFile(filepath.Join(rootfs, "etc", "passwd"))
	if err != nil {
		return [2]int64{}, false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 4 || f[0] != name {
			continue
		}
		uid, err1 := strconv.ParseInt(f[2], 10, 64)
		gid, err2 := strconv.ParseInt(f[3], 10, 64)
		return [2]int64{uid, gid}, err1 == nil && err2 == nil
	}
	return [2]int64{}, false
}

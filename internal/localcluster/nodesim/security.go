package nodesim

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// security is what a container's securityContext (over its Pod's) asks of
// its process, as a container runtime applies it.
type security struct {
	// UID and GID run the process; UID 0 keeps root, with Caps.
	UID, GID int64
	// Caps are the capabilities (numbers) a root process keeps: its
	// bounding and effective set. Ignored for another user, who keeps
	// none, and when Privileged, which keeps all.
	Caps         []uintptr
	Privileged   bool
	ReadOnlyRoot bool
	NoNewPrivs   bool
}

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
// the kubelet does (the container's fields win) and checks runAsNonRoot,
// which with no runAsUser refers to the image's user: images run by the
// simulator run as root.
func securityFor(pod *corev1.Pod, c corev1.Container) (security, error) {
	var s security
	var nonRoot bool
	if psc := pod.Spec.SecurityContext; psc != nil {
		s.UID, s.GID = ptr.Deref(psc.RunAsUser, 0), ptr.Deref(psc.RunAsGroup, 0)
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
		return s, fmt.Errorf("container %s has runAsNonRoot and would run as root (the image's user; set runAsUser)", c.Name)
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

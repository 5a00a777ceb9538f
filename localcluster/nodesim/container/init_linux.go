// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package container

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The container's init: the first process of a container is this binary
// again, started as PID 1 of the container's PID namespace with initEnv
// in its environment. Before anything else runs (a package init), it
// mounts /proc and /sys from inside the container's namespaces, enters
// the root, drops privileges and executes the program, which keeps PID 1.
// A failure before the program runs is written to the status pipe (file
// descriptor 3), which the exec closes on success: the runtime tells a
// start that failed (an unknown command) from a program that exited.

// initEnv carries the init's settings (JSON).
const initEnv = "SVCNET_CONTAINER_INIT"

// statusFD is the init's end of the status pipe.
const statusFD = 3

type initConfig struct {
	Root     string
	Dir      string
	Argv     []string
	Env      []string
	Security Security
}

func init() {
	if cfg, ok := os.LookupEnv(initEnv); ok {
		runInit(cfg)
	}
}

// runInit never returns: it executes the program or exits 127.
func runInit(raw string) {
	runtime.LockOSThread()
	err := func() error {
		var c initConfig
		if err := json.Unmarshal([]byte(raw), &c); err != nil {
			return fmt.Errorf("container init settings: %w", err)
		}
		if err := enterRoot(c); err != nil {
			return err
		}
		if err := restrict(c.Security); err != nil {
			return err
		}
		path, err := lookPath(c.Argv[0], c.Env)
		if err != nil {
			return err
		}
		unix.CloseOnExec(statusFD)
		return fmt.Errorf("exec %s: %w", c.Argv[0], syscall.Exec(path, c.Argv, c.Env))
	}()
	status := os.NewFile(statusFD, "status")
	fmt.Fprint(status, err.Error())
	os.Exit(127)
}

// enterRoot mounts the container's /proc and /sys and makes its root and
// working folder this process's.
func enterRoot(c initConfig) error {
	if err := unix.Mount("proc", filepath.Join(c.Root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	// sysfs shows the network namespace of whoever mounts it: the Pod's.
	_ = unix.Mount("sysfs", filepath.Join(c.Root, "sys"), "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RDONLY, "")
	if err := unix.Chroot(c.Root); err != nil {
		return fmt.Errorf("entering the container's root: %w", err)
	}
	dir := c.Dir
	if dir == "" {
		dir = "/"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil && !os.IsExist(err) {
		return fmt.Errorf("working folder %s: %w", dir, err)
	}
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("working folder %s: %w", dir, err)
	}
	return nil
}

// restrict applies sec to the init, whose credentials and capabilities
// the program it executes inherits: no_new_privs, and either another user
// (who keeps no capability) or root limited to sec.Caps. The user changes
// are whole-process calls: only the init, a process of its own, makes
// them.
func restrict(sec Security) error {
	if sec.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("allowPrivilegeEscalation false: %w", err)
		}
	}
	if sec.UID != 0 || sec.GID != 0 {
		if err := syscall.Setgroups(nil); err != nil {
			return fmt.Errorf("setting groups: %w", err)
		}
		if err := syscall.Setgid(int(sec.GID)); err != nil {
			return fmt.Errorf("runAsGroup %d: %w", sec.GID, err)
		}
	}
	if sec.UID != 0 {
		if err := syscall.Setuid(int(sec.UID)); err != nil {
			return fmt.Errorf("runAsUser %d: %w", sec.UID, err)
		}
		return nil
	}
	if sec.Privileged {
		return nil
	}
	return keepCaps(sec.Caps)
}

// restrictThread is restrict for a command the simulator starts itself
// (exec): the calling thread, which forks it and is never used again,
// takes no_new_privs and the capabilities, and the user is set in attr
// for the child alone, never in this process.
func restrictThread(sec Security, attr *syscall.SysProcAttr) error {
	if sec.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("allowPrivilegeEscalation false: %w", err)
		}
	}
	if sec.UID != 0 || sec.GID != 0 {
		attr.Credential = &syscall.Credential{Uid: uint32(sec.UID), Gid: uint32(sec.GID), Groups: []uint32{}}
	}
	if sec.UID != 0 || sec.Privileged {
		return nil
	}
	return keepCaps(sec.Caps)
}

// keepCaps limits the thread's bounding, permitted, effective and
// inheritable sets to caps; a root process it starts gets exactly those.
func keepCaps(caps []uintptr) error {
	last, err := lastCap()
	if err != nil {
		return err
	}
	var data [2]unix.CapUserData
	for c := uintptr(0); c <= last; c++ {
		if slices.Contains(caps, c) {
			data[c/32].Effective |= 1 << (c % 32)
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil {
			return fmt.Errorf("dropping capability %d: %w", c, err)
		}
	}
	for i := range data {
		data[i].Permitted, data[i].Inheritable = data[i].Effective, data[i].Effective
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("setting capabilities: %w", err)
	}
	return nil
}

// lastCap is the kernel's highest capability number.
func lastCap() (uintptr, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return uintptr(n), err
}

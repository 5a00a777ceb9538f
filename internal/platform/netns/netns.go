// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package netns runs code inside another network namespace. Sockets keep
// the namespace they were created in, so a listener or connection made
// inside Do works from any goroutine afterwards. This is how one process
// serves health checks for, and talks to, simulated nodes and Pods.
package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netlink"
	vns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Do runs fn with the calling goroutine's thread in the network namespace
// at path (e.g. /run/netns/NAME). An empty path runs fn where it is.
func Do(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening network namespace: %w", err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("opening own network namespace: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering network namespace %s: %w", path, err)
	}
	fnErr := fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread is stuck in the other namespace: keep it locked so
		// the runtime discards it when this goroutine ends.
		return fmt.Errorf("returning from network namespace %s: %w", path, err)
	}
	runtime.UnlockOSThread()
	return fnErr
}

// Run runs cmd and waits for it, with the process inside the network
// namespace at path (empty: where the caller is): a child is created in
// the namespace of the thread that forks it, so no nsenter is needed.
func Run(path string, cmd *exec.Cmd) error {
	if err := Do(path, cmd.Start); err != nil {
		return err
	}
	return cmd.Wait()
}

// Listen opens a TCP listener inside a network namespace.
func Listen(path, addr string) (net.Listener, error) {
	var l net.Listener
	err := Do(path, func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

// LocalAddrs lists the addresses of every interface of a namespace.
func LocalAddrs(path string) ([]net.Addr, error) {
	var addrs []net.Addr
	err := Do(path, func() error {
		var err error
		addrs, err = net.InterfaceAddrs()
		return err
	})
	return addrs, err
}

// DialContext returns a dial function whose connections start from inside
// a network namespace, for HTTP clients (http.Transport.DialContext).
func DialContext(path string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := Do(path, func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// Create makes a new, empty network namespace and pins it at path (a file
// under /run/netns, as `ip netns add` does) without running a process: the
// calling thread enters a fresh namespace, bind-mounts it at path and
// returns to its own.
func Create(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	f.Close()
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		_ = os.Remove(path)
		return fmt.Errorf("opening own network namespace: %w", err)
	}
	defer orig.Close()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		_ = os.Remove(path)
		return fmt.Errorf("creating a network namespace: %w", err)
	}
	mountErr := unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path, "none", unix.MS_BIND, "")
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked and is discarded with its goroutine.
		return fmt.Errorf("returning from the new network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	if mountErr != nil {
		_ = os.Remove(path)
		return fmt.Errorf("pinning the network namespace at %s: %w", path, mountErr)
	}
	return nil
}

// Delete unpins a namespace made by Create (or `ip netns add`); the kernel
// frees it once no process or socket uses it.
func Delete(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmounting %s: %w", path, err)
	}
	return os.Remove(path)
}

// NetlinkHandle is a netlink handle in the network namespace at path, or
// in the caller's own when path is empty (no setns, which a process
// without CAP_SYS_ADMIN may not do).
func NetlinkHandle(path string) (*netlink.Handle, error) {
	if path == "" {
		return netlink.NewHandle()
	}
	ns, err := vns.GetFromPath(path)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	return netlink.NewHandleAt(ns)
}

// Package netns runs code inside another network namespace. Sockets keep
// the namespace they were created in, so a listener or connection made
// inside Do works from any goroutine afterwards. This is how one process
// serves health checks for, and talks to, simulated nodes and Pods.
package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

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

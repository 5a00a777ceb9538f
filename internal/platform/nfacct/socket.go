// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nfacct

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// socket is a netlink socket that sends and receives whole datagrams.
type socket interface {
	send(b []byte) error
	receive() ([]byte, error)
	close() error
}

// netfilterSocket is a NETLINK_NETFILTER socket, in the network namespace
// of the thread that opened it. Its calls block (with a receive timeout):
// a client makes a few exchanges a minute, not worth the poller.
type netfilterSocket struct {
	fd int
}

// receiveBuffer holds any answer to one nfacct request: a counter is
// under 100 bytes, an error echoes the request. A longer datagram is an
// error (MSG_TRUNC reports its real length), never silently cut.
const receiveBuffer = 8192

func dialNetfilter(timeout time.Duration) (socket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, err
	}
	s := &netfilterSocket{fd: fd}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		_ = s.close()
		return nil, fmt.Errorf("binding: %w", err)
	}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		_ = s.close()
		return nil, fmt.Errorf("setting the receive timeout: %w", err)
	}
	return s, nil
}

func (s *netfilterSocket) send(b []byte) error {
	return retryEINTR(func() error { return unix.Sendto(s.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}) })
}

func (s *netfilterSocket) receive() ([]byte, error) {
	b := make([]byte, receiveBuffer)
	var n int
	err := retryEINTR(func() error {
		var err error
		n, _, err = unix.Recvfrom(s.fd, b, unix.MSG_TRUNC)
		return err
	})
	switch {
	case errors.Is(err, unix.EAGAIN):
		return nil, fmt.Errorf("no answer from the kernel: %w", err)
	case err != nil:
		return nil, err
	case n > len(b):
		return nil, fmt.Errorf("a netlink datagram of %d bytes exceeds the buffer of %d", n, len(b))
	}
	return b[:n], nil
}

func (s *netfilterSocket) close() error { return unix.Close(s.fd) }

func retryEINTR(fn func() error) error {
	for {
		if err := fn(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package nfacct creates and reads netfilter accounting objects (the
// kernel's nfnetlink_acct, which `iptables -m nfacct --nfacct-name NAME`
// counts packets into) over netlink, in the node's network namespace.
// The agent's iptables mode uses it as kube-proxy does: the backend
// ensures kube-proxy's counters before it writes the rules that match on
// them, and the agent's metrics read them at scrape time.
//
// Accounting objects belong to a network namespace, like the rules that
// use them: a Client made for a namespace path talks to that namespace
// only. Every call opens a netlink socket of its own there and closes it,
// so a Client needs no closing and no lock, and a reply left over from
// one call can never be read by the next.
package nfacct

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// MaxNameLen is the longest counter name the kernel takes, in bytes: its
// NFACCT_NAME_MAX (32) counts the terminating NUL.
const MaxNameLen = 31

// Errors a caller can tell apart with errors.Is.
var (
	// ErrNotFound: the namespace has no counter of that name.
	ErrNotFound = errors.New("no such nfacct counter")
	// ErrNotSupported: the kernel does not answer nfacct requests here
	// (no nfnetlink_acct, or no CAP_NET_ADMIN in the namespace).
	ErrNotSupported = errors.New("nfacct (nfnetlink_acct) is not available")
	// ErrInvalidName: the kernel would refuse the name.
	ErrInvalidName = errors.New("invalid nfacct counter name")
)

// Counter is an accounting object's figures.
type Counter struct {
	Name    string
	Packets uint64
	Bytes   uint64
}

// exchangeTimeout bounds the wait for the kernel's answer, so that a
// metrics scrape never hangs on a socket.
const exchangeTimeout = 5 * time.Second

// Client talks to the accounting objects of one network namespace.
type Client struct {
	netns string
	// dial opens a netfilter netlink socket where the calling thread is;
	// tests replace it.
	dial func() (socket, error)
	seq  atomic.Uint32
}

// New returns a client for the network namespace at netnsPath (e.g.
// /run/netns/NAME); empty means the caller's own. It does no I/O:
// Available tells whether the kernel answers.
func New(netnsPath string) *Client {
	return &Client{netns: netnsPath, dial: func() (socket, error) { return dialNetfilter(exchangeTimeout) }}
}

// probeName is a counter Available asks for: whether it exists or not,
// an answer means the subsystem is there.
const probeName = "svcnet-nfacct-probe"

// Available returns nil when the namespace's kernel answers nfacct
// requests, and an error wrapping ErrNotSupported when it does not.
func (c *Client) Available() error {
	_, err := c.Get(probeName)
	if err == nil || errors.Is(err, ErrNotFound) {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrNotSupported, err)
}

// Ensure creates the counter name, at zero, unless it exists; an existing
// counter keeps its figures.
func (c *Client) Ensure(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	_, err := c.exchange(msgNew, unix.NLM_F_CREATE, name)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EEXIST):
		// The kernel's answer for a name it has (EEXIST only under
		// NLM_F_EXCL, which is not asked; both mean the same here).
		return nil
	}
	return fmt.Errorf("creating nfacct counter %q: %w", name, err)
}

// Get reads the counter name. A counter that does not exist is an error
// wrapping ErrNotFound.
func (c *Client) Get(name string) (Counter, error) {
	if err := checkName(name); err != nil {
		return Counter{}, err
	}
	replies, err := c.exchange(msgGet, 0, name)
	switch {
	case errors.Is(err, unix.ENOENT):
		return Counter{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	case err != nil:
		return Counter{}, fmt.Errorf("reading nfacct counter %q: %w", name, err)
	}
	for _, m := range replies {
		if m.Header.Type != msgType(msgNew) {
			continue
		}
		cnt, err := decodeCounter(m.Data)
		if err != nil {
			return Counter{}, fmt.Errorf("reading nfacct counter %q: %w", name, err)
		}
		if cnt.Name == name {
			return cnt, nil
		}
	}
	return Counter{}, fmt.Errorf("reading nfacct counter %q: the kernel acknowledged without a reply", name)
}

func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %q is %d bytes, the kernel takes at most %d", ErrInvalidName, name, len(name), MaxNameLen)
	}
	for i := range len(name) {
		if name[i] == 0 {
			return fmt.Errorf("%w: %q holds a NUL byte", ErrInvalidName, name)
		}
	}
	return nil
}

// exchange sends one request, acknowledgement asked, and returns the
// replies with its sequence number that came before the acknowledgement.
// A request the kernel refused returns its errno (a syscall.Errno).
func (c *Client) exchange(cmd uint8, flags uint16, name string) ([]syscall.NetlinkMessage, error) {
	var s socket
	err := netns.Do(c.netns, func() error {
		var err error
		s, err = c.dial()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("opening a netfilter netlink socket: %w", err)
	}
	defer func() { _ = s.close() }()
	seq := c.seq.Add(1)
	if err := s.send(encodeRequest(cmd, unix.NLM_F_REQUEST|unix.NLM_F_ACK|flags, seq, name)); err != nil {
		return nil, fmt.Errorf("sending to netlink: %w", err)
	}
	var replies []syscall.NetlinkMessage
	for {
		b, err := s.receive()
		if err != nil {
			return nil, fmt.Errorf("receiving from netlink: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(b)
		if err != nil {
			return nil, fmt.Errorf("parsing netlink messages: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			done, err := ackOf(m)
			if done || err != nil {
				return replies, err
			}
			replies = append(replies, m)
		}
	}
}

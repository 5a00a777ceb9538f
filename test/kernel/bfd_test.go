// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/net/ipv4"
	"k8s.io/klog/v2/textlogger"

	"github.com/svcnet-io/svcnet/dataplane/announce/bfd"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// TestBFDManagers runs two of svcnet's BFD managers against each other
// in two namespaces, over IPv4 and IPv6 at once: every session comes Up,
// a packet that crossed a router (TTL under 255) is ignored while the
// same packet at TTL 255 is heard, a cut link takes the sessions Down
// by detection time (a failure, for the speaker to reset BGP), and they
// come back Up with the link.
func TestBFDManagers(t *testing.T) {
	requireKernel(t)
	g := NewWithT(t)
	lab, err := netlab.New(fmt.Sprintf("svcnet-bfd%04d", rand.IntN(10000)))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(lab.Close)
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(testWriter{t}), textlogger.Verbosity(2)))
	addrs := map[string][2]netip.Addr{}
	nss := map[string]string{}
	for i, name := range []string{"a", "b"} {
		v4, v6 := netip.MustParseAddr(fmt.Sprintf("192.168.62.%d", i+1)), netip.MustParseAddr(fmt.Sprintf("fd00:62::%d", i+1))
		ns, err := lab.AddClient("bfd-"+name, netip.PrefixFrom(v4, 24))
		g.Expect(err).NotTo(HaveOccurred())
		mustRun(t, lab, ns, "ip", "addr", "add", netip.PrefixFrom(v6, 64).String(), "dev", "eth0", "nodad")
		addrs[name], nss[name] = [2]netip.Addr{v4, v6}, ns
	}
	cfg := bfd.Config{DesiredMinTx: 50 * time.Millisecond, RequiredMinRx: 50 * time.Millisecond, DetectMult: 3}
	var mu sync.Mutex
	var failures []bfd.Change
	managers := map[string]*bfd.Manager{}
	for name, other := range map[string]string{"a": "b", "b": "a"} {
		m := bfd.NewManager(bfd.Options{NetNS: netlab.Path(nss[name]), Log: log.WithName(name), OnChange: func(c bfd.Change) {
			if c.Failure() {
				mu.Lock()
				failures = append(failures, c)
				mu.Unlock()
			}
		}})
		t.Cleanup(m.Close)
		var peers []bfd.Peer
		for i, a := range addrs[other] {
			peers = append(peers, bfd.Peer{Addr: a, Source: addrs[name][i], Config: cfg})
		}
		g.Expect(m.Sync(peers)).To(Succeed())
		managers[name] = m
	}
	allIn := func(st bfd.State) func(g Gomega) {
		return func(g Gomega) {
			for name, m := range managers {
				states := m.States()
				g.Expect(states).To(HaveLen(2), name)
				for peer, s := range states {
					g.Expect(s).To(Equal(st), "%s's session to %s", name, peer)
				}
			}
		}
	}
	g.Eventually(allIn(bfd.StateUp)).WithTimeout(10 * time.Second).WithPolling(poll).Should(Succeed())

	t.Run("a packet under TTL 255 is ignored, the same at 255 is not", func(t *testing.T) {
		g := NewWithT(t)
		// From b's address with no discriminator: a Down that would take
		// a's Up session to b Down, if a took it.
		down := bfd.ControlPacket{State: bfd.StateDown, DetectMult: 3, MyDisc: 7, DesiredMinTx: time.Second, RequiredMinRx: time.Second}
		send := func(ttl int) {
			err := netns.Do(netlab.Path(nss["b"]), func() error {
				c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: addrs["b"][0].AsSlice()})
				if err != nil {
					return err
				}
				defer c.Close()
				if err := ipv4.NewConn(c).SetTTL(ttl); err != nil {
					return err
				}
				_, err = c.WriteTo(down.Marshal(), &net.UDPAddr{IP: addrs["a"][0].AsSlice(), Port: bfd.Port})
				return err
			})
			g.Expect(err).NotTo(HaveOccurred())
		}
		stateAtoB := func() bfd.State { return managers["a"].States()[addrs["b"][0]] }
		g.Consistently(func() bfd.State { send(254); return stateAtoB() }).
			WithTimeout(time.Second).WithPolling(20 * time.Millisecond).Should(Equal(bfd.StateUp))
		g.Eventually(func() bfd.State { send(255); return stateAtoB() }).
			WithTimeout(time.Second).WithPolling(20 * time.Millisecond).ShouldNot(Equal(bfd.StateUp))
		g.Eventually(allIn(bfd.StateUp)).WithTimeout(10 * time.Second).WithPolling(poll).Should(Succeed())
	})

	t.Run("link cut: Down by detection time, Up again with the link", func(t *testing.T) {
		g := NewWithT(t)
		mu.Lock()
		failures = nil
		mu.Unlock()
		mustRun(t, lab, nss["b"], "ip", "link", "set", "eth0", "down")
		g.Eventually(allIn(bfd.StateDown)).WithTimeout(5 * time.Second).WithPolling(poll).Should(Succeed())
		mu.Lock()
		var peers []netip.Addr
		for _, c := range failures {
			g.Expect(c.Diag).To(Equal(bfd.DiagDetectionExpired))
			peers = append(peers, c.Peer)
		}
		mu.Unlock()
		g.Expect(peers).To(ContainElements(addrs["b"][0], addrs["b"][1]), "a saw its sessions to b fail")
		mustRun(t, lab, nss["b"], "ip", "link", "set", "eth0", "up")
		mustRun(t, lab, nss["b"], "ip", "addr", "replace", netip.PrefixFrom(addrs["b"][1], 64).String(), "dev", "eth0", "nodad")
		g.Eventually(allIn(bfd.StateUp)).WithTimeout(10 * time.Second).WithPolling(poll).Should(Succeed())
	})
}

// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/model"
)

// webBackend is an IPv4 backend on a Fake, with one Service set.
func webBackend(t *testing.T, cfg Config) (*Backend, *Fake) {
	t.Helper()
	fake := NewFake()
	b := NewBackend(corev1.IPv4Protocol, fake, cfg)
	b.SetService(types.NamespacedName{Namespace: "ns", Name: "web"}, model.BuildService(corev1.IPv4Protocol, model.Node{Name: node}, web(nil),
		[]*discoveryv1.EndpointSlice{slice("web", "ns", discoveryv1.AddressTypeIPv4, 8080, ready("10.244.1.2", node))}, model.Options{}))
	return b, fake
}

// TestCanaryCatchesEveryFlush flushes, or deletes, each table the canary
// lives in after a full sync, and checks that the backend notices and
// that the full sync that follows puts the rules and the canary back.
func TestCanaryCatchesEveryFlush(t *testing.T) {
	ctx := context.Background()
	for name, flush := range map[string]func(f *Fake) error{
		"iptables -t nat -F":    func(f *Fake) error { f.Flush("nat"); return nil },
		"iptables -F":           func(f *Fake) error { f.Flush("filter"); return nil },
		"iptables -t mangle -F": func(f *Fake) error { f.Flush("mangle"); return nil },
		"the nat canary deleted": func(f *Fake) error {
			return f.Restore(ctx, []byte("*nat\n:"+ChainCanary+" - [0:0]\n-X "+ChainCanary+"\nCOMMIT\n"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			b, fake := webBackend(t, Config{})
			if err := b.CheckIntact(ctx); !errors.Is(err, dataplane.ErrFlushed) {
				t.Fatalf("before any sync: %v, want ErrFlushed (no canary yet)", err)
			}
			if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
				t.Fatal(err)
			}
			if err := b.CheckIntact(ctx); err != nil {
				t.Fatalf("after a full sync: %v, want the canary intact", err)
			}
			good := fake.Dump()
			if err := flush(fake); err != nil {
				t.Fatal(err)
			}
			if err := b.CheckIntact(ctx); !errors.Is(err, dataplane.ErrFlushed) {
				t.Fatalf("after the flush: %v, want ErrFlushed", err)
			}
			// A partial sync sees nothing to do: the rules stay broken.
			if res, err := b.Sync(ctx, dataplane.Node{}); err != nil || res.Full {
				t.Fatalf("partial sync after the flush: %+v %v", res, err)
			}
			b.ForceFull()
			if res, err := b.Sync(ctx, dataplane.Node{}); err != nil || !res.Full {
				t.Fatalf("forced sync: %+v %v, want a full one", res, err)
			}
			if err := b.CheckIntact(ctx); err != nil {
				t.Fatalf("after the full sync: %v, want the canary back", err)
			}
			if got := fake.Dump(); !slices.Equal(sortedLines(got), sortedLines(good)) {
				t.Errorf("rules after the full sync differ from before the flush:\n%s\nwant\n%s", got, good)
			}
		})
	}
}

// TestLocalhostNodePorts checks the rules on both sides of kube-proxy's
// localhost NodePort switch: with it, NodePorts answer on every local
// address and KUBE-FIREWALL guards loopback, first in INPUT and OUTPUT;
// without it, 127.0.0.0/8 is excluded and no KUBE-FIREWALL is written;
// IPv6 loopback is always excluded.
func TestLocalhostNodePorts(t *testing.T) {
	ctx := context.Background()
	const nodePorts = "kubernetes service nodeports; NOTE: this must be the last rule in this chain"
	b, fake := webBackend(t, Config{})
	if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
		t.Fatal(err)
	}
	dump := fake.Dump()
	for _, want := range []string{
		"-A INPUT -j KUBE-FIREWALL\n", "-A OUTPUT -j KUBE-FIREWALL\n",
		"-A KUBE-FIREWALL " + localnetFirewallRule + "\n",
		`-A KUBE-SERVICES -m comment --comment "` + nodePorts + `" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS` + "\n",
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("with localhost NodePorts, no %q in\n%s", want, dump)
		}
	}
	if rules, _, _ := fake.ChainRules(ctx, "filter", "INPUT"); len(rules) == 0 || rules[0] != "-A INPUT -j KUBE-FIREWALL" {
		t.Errorf("INPUT %v, want KUBE-FIREWALL first", rules)
	}

	b, fake = webBackend(t, Config{NoLocalhostNodePorts: true})
	if _, err := b.Sync(ctx, dataplane.Node{}); err != nil {
		t.Fatal(err)
	}
	dump = fake.Dump()
	if strings.Contains(dump, "KUBE-FIREWALL") {
		t.Errorf("without localhost NodePorts, KUBE-FIREWALL was written:\n%s", dump)
	}
	if want := `--dst-type LOCAL ! -d 127.0.0.0/8 -j KUBE-NODEPORTS`; !strings.Contains(dump, want) {
		t.Errorf("without localhost NodePorts, no %q in\n%s", want, dump)
	}
	r := Assemble(nil, Config{NodePortIPs: nil, Family: corev1.IPv6Protocol})
	if got := strings.Join(r.NAT[1].Rules, "\n"); !strings.Contains(got, "! -d ::1/128 -j KUBE-NODEPORTS") {
		t.Errorf("IPv6 KUBE-SERVICES %q, want ::1 excluded", got)
	}
}

func TestVariantBinaries(t *testing.T) {
	for _, tc := range []struct {
		e    *Exec
		base string
		want string
	}{
		{NewExec(corev1.IPv4Protocol, ""), "tables-restore", "iptables-restore"},
		{NewExecVariant(corev1.IPv6Protocol, "", VariantLegacy), "tables-save", "ip6tables-legacy-save"},
		{NewExecVariant(corev1.IPv4Protocol, "", VariantNFT), "tables", "iptables-nft"},
		{NewExecVariant(corev1.IPv4Protocol, "", VariantLegacy), "tables-restore", "iptables-legacy-restore"},
	} {
		if got := tc.e.binary(tc.base); got != tc.want {
			t.Errorf("binary(%q) = %q, want %q", tc.base, got, tc.want)
		}
	}
}

func sortedLines(s string) []string {
	lines := strings.Split(s, "\n")
	slices.Sort(lines)
	return lines
}

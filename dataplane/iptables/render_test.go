// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcnet-io/svcnet/dataplane/internal/goldencases"
	"github.com/svcnet-io/svcnet/dataplane/model"
)

func TestChainNamesMatchKubeProxy(t *testing.T) {
	// Every cluster with kube-dns has this chain; the hash is kube-proxy's.
	if got := svcChain("kube-system/kube-dns:dns", corev1.ProtocolUDP); got != "KUBE-SVC-TCOU7JCQXEZGVUNU" {
		t.Errorf("svcChain(kube-dns) = %s, want KUBE-SVC-TCOU7JCQXEZGVUNU", got)
	}
	if got := svcChain("kube-system/kube-dns:dns-tcp", corev1.ProtocolTCP); got != "KUBE-SVC-ERIFXISQEP7F7OF4" {
		t.Errorf("svcChain(kube-dns tcp) = %s, want KUBE-SVC-ERIFXISQEP7F7OF4", got)
	}
	if got := ServiceChain("kube-system", "kube-dns", "dns", corev1.ProtocolUDP); got != "KUBE-SVC-TCOU7JCQXEZGVUNU" {
		t.Errorf("ServiceChain(kube-dns) = %s, want KUBE-SVC-TCOU7JCQXEZGVUNU", got)
	}
	// The default/kubernetes Service's port is named https.
	if got := ServiceChain("default", "kubernetes", "https", corev1.ProtocolTCP); got != "KUBE-SVC-NPX46M4PTMTKRN6Y" {
		t.Errorf("ServiceChain(kubernetes) = %s, want KUBE-SVC-NPX46M4PTMTKRN6Y", got)
	}
	if got, want := ServiceChain("demo", "web", "", corev1.ProtocolTCP), svcChain("demo/web", corev1.ProtocolTCP); got != want {
		t.Errorf("ServiceChain of an unnamed port = %s, want %s", got, want)
	}
	// The endpoint chain kube-proxy's own tests name for ns1/svc1:p80.
	if got := EndpointChain("ns1", "svc1", "p80", corev1.ProtocolTCP, "10.180.0.1:80"); got != "KUBE-SEP-SXIVWICOYRO3J4NJ" {
		t.Errorf("EndpointChain(ns1/svc1:p80, 10.180.0.1:80) = %s, want KUBE-SEP-SXIVWICOYRO3J4NJ", got)
	}
}

func TestEndpointJumps(t *testing.T) {
	save := []byte(`*nat
:KUBE-SVC-A - [0:0]
:KUBE-SVC-AB - [0:0]
:KUBE-SVC-EMPTY - [0:0]
-A KUBE-SVC-A ! -s 10.244.0.0/16 -d 10.96.0.10/32 -j KUBE-MARK-MASQ
-A KUBE-SVC-A -m statistic --mode random --probability 0.5 -j KUBE-SEP-X
-A KUBE-SVC-A -j KUBE-SEP-Y
-A KUBE-SVC-AB -j KUBE-SEP-Z
COMMIT
`)
	for chain, want := range map[string]int{"KUBE-SVC-A": 2, "KUBE-SVC-AB": 1, "KUBE-SVC-EMPTY": 0, "KUBE-SVC-GONE": -1} {
		if got := EndpointJumps(save, chain); got != want {
			t.Errorf("EndpointJumps(%s) = %d, want %d", chain, got, want)
		}
	}
}

// TestRenderGolden renders every case as on a node with kube-proxy's
// nfacct counters, as most have (TestCountersOnlyAddTheirMatches covers
// the others). Node port addresses without loopback turn localhost
// NodePorts off, as the agent's options (and kube-proxy) do.
func TestRenderGolden(t *testing.T) {
	for name, tc := range goldencases.Cases() {
		t.Run(name, func(t *testing.T) {
			cfg := Config{ClusterCIDRs: tc.ClusterCIDRs, MasqueradeAll: tc.MasqueradeAll, NodePortIPs: tc.NodePortIPs, Counters: allCounters,
				NoLocalhostNodePorts: len(tc.NodePortIPs) > 0 && !slices.ContainsFunc(tc.NodePortIPs, netip.Addr.IsLoopback)}
			goldencases.Check(t, name, string(Render(tc.Model(), cfg).RestoreText(nil, nil)), "dataplane/iptables")
		})
	}
}

func TestProbabilities(t *testing.T) {
	var eps []goldencases.Endpoint
	for i := range 4 {
		eps = append(eps, goldencases.Ready(fmt.Sprintf("10.244.0.%d", i+1), goldencases.Node))
	}
	m := model.Build(corev1.IPv4Protocol, model.Node{Name: goldencases.Node}, []*corev1.Service{goldencases.Web(nil)},
		map[types.NamespacedName][]*discoveryv1.EndpointSlice{{Namespace: "ns", Name: "web"}: {goldencases.Slice("web", "ns", discoveryv1.AddressTypeIPv4, 8080, eps...)}}, model.Options{})
	r := Render(m, Config{})
	var svc *Chain
	for _, c := range r.NAT {
		if c.Name == svcChain("ns/web:http", corev1.ProtocolTCP) {
			svc = c
		}
	}
	if svc == nil {
		t.Fatal("no KUBE-SVC chain rendered")
	}
	want := []string{"0.2500000000", "0.3333333333", "0.5000000000", ""}
	for i, rule := range svc.Rules {
		prob := ""
		if _, after, ok := cut(rule, "--probability "); ok {
			prob = after[:12]
		}
		if prob != want[i] {
			t.Errorf("rule %d probability %q, want %q: %s", i, prob, want[i], rule)
		}
	}
}

func cut(s, sep string) (string, string, bool) { // strings.Cut without the import churn
	for i := 0; i+len(sep) <= len(s); i++ {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}

// Shorthands for the other tests of this package.
const node = goldencases.Node

type ep = goldencases.Endpoint

var (
	ready = goldencases.Ready
	slice = goldencases.Slice
	web   = goldencases.Web
)

// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package explain

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// dnsTimeout bounds the question to cluster DNS.
const dnsTimeout = 2 * time.Second

// DNSAnswer is what cluster DNS answered for the Service's name, asked
// from where explain runs.
type DNSAnswer struct {
	Server string   `json:"server"`
	Name   string   `json:"name"`
	Addrs  []string `json:"addrs,omitempty"`
	// NotFound: the server answered that the name does not exist.
	NotFound bool `json:"notFound,omitempty"`
	// Unseen: no answer came (no route from here, a timeout): the name
	// hop is judged from the API server alone. Err says why.
	Unseen bool   `json:"unseen,omitempty"`
	Err    string `json:"err,omitempty"`
}

// AskDNS asks cluster DNS (the kube-dns Service's ClusterIP, port 53)
// for the Service's A and AAAA records, under the cluster domain, as a
// Pod's resolver would. Only for a client that uses cluster DNS (a Pod)
// and a Service with a name that has addresses (not ExternalName).
func (in *Inputs) AskDNS(ctx context.Context, domain string) {
	svc := in.Service
	if svc == nil || in.From.External || (in.From.Node != "" && in.From.Pod == nil) || svc.Spec.Type == corev1.ServiceTypeExternalName || !in.DNS.ClusterIP.IsValid() {
		return
	}
	server := netip.AddrPortFrom(in.DNS.ClusterIP, 53).String()
	a := &DNSAnswer{Server: server, Name: fmt.Sprintf("%s.%s.svc.%s.", svc.Name, svc.Namespace, strings.TrimSuffix(domain, "."))}
	in.DNSAnswer = a
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server)
	}}
	ctx, cancel := context.WithTimeout(ctx, dnsTimeout)
	defer cancel()
	addrs, err := r.LookupHost(ctx, a.Name)
	var dnsErr *net.DNSError
	switch {
	case err == nil:
		slices.Sort(addrs)
		a.Addrs = addrs
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		a.NotFound = true
	default:
		a.Unseen, a.Err = true, err.Error()
	}
}

// OnClusterNetwork tells whether explain runs where cluster DNS is
// expected to answer: in a Pod (KUBERNETES_SERVICE_HOST is set) or on a
// node (a local address is a Node's). Elsewhere a question to the
// kube-dns ClusterIP would leave through the machine's default route.
func (in *Inputs) OnClusterNetwork(inPod bool, local []netip.Addr) bool {
	if inPod {
		return true
	}
	for _, n := range in.Nodes {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && slices.Contains(local, ip) {
				return true
			}
		}
	}
	return false
}

// dnsFacts: cluster DNS's answer against what the Service should get.
func dnsFacts(h *hop, in Inputs) {
	a := in.DNSAnswer
	if a == nil {
		return
	}
	svc := in.Service
	switch {
	case a.Unseen:
		h.fact("not asked: cluster DNS at %s gave no answer from here (%s); run explain where Pods' DNS is reachable, e.g. on a node", a.Server, a.Err)
		return
	case a.NotFound:
		h.problem("check CoreDNS's kubernetes plugin (its zone must be the cluster domain, --cluster-domain here) and its log",
			"cluster DNS at %s answers that %s does not exist", a.Server, a.Name)
		return
	}
	want := slices.Clone(svc.Spec.ClusterIPs)
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		want = endpointAddresses(in.Slices, svc.Spec.PublishNotReadyAddresses)
	}
	slices.Sort(want)
	if slices.Equal(a.Addrs, want) {
		h.fact("cluster DNS at %s answers %s: %s", a.Server, a.Name, strings.Join(a.Addrs, ", "))
		return
	}
	h.problem("read CoreDNS's log: it may not see the API server (its kubernetes plugin), or serve from a stale cache",
		"cluster DNS at %s answers %s with %s, but the Service's addresses are %s", a.Server, a.Name, orNone(a.Addrs), orNone(want))
}

// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/svcnet-io/svcnet/dataplane"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
)

// localLB is a LoadBalancer Service with externalTrafficPolicy Local and
// health check node port 30100, serving two ports.
func localLB() *corev1.Service {
	return svc("lb", "10.96.0.20", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 30100
		s.Spec.Ports = []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30001, Protocol: corev1.ProtocolTCP},
			{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443), NodePort: 30002, Protocol: corev1.ProtocolTCP},
		}
	})
}

// endpoint is one endpoint of a slice of localLB: its address, node and
// conditions.
type endpoint struct {
	ip, node                    string
	ready, serving, terminating bool
}

// lbSlice is localLB's slice with both ports on every endpoint.
func lbSlice(eps ...endpoint) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "lb-1", Namespace: "ns", Labels: map[string]string{discoveryv1.LabelServiceName: "lb"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("https"), Port: ptr.To[int32](8443), Protocol: ptr.To(corev1.ProtocolTCP)},
		},
	}
	for _, ep := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{ep.ip},
			NodeName:  ptr.To(ep.node),
			Conditions: discoveryv1.EndpointConditions{
				Ready: ptr.To(ep.ready), Serving: ptr.To(ep.serving), Terminating: ptr.To(ep.terminating),
			},
		})
	}
	return s
}

// TestHealthCheckNodePortAnswersAsKubeProxy checks the health check node
// port's answer for each state of a rollout: the count is of distinct
// ready local addresses (not multiplied by the Service's two ports),
// terminating local endpoints alone answer 503 though they still get
// traffic, and a proxy whose rules are stale answers 503 whatever the
// count; the body is kube-proxy's, byte for byte.
func TestHealthCheckNodePortAnswersAsKubeProxy(t *testing.T) {
	ready := func(ip, node string) endpoint { return endpoint{ip: ip, node: node, ready: true, serving: true} }
	terminating := func(ip string) endpoint { return endpoint{ip: ip, node: "node-a", serving: true, terminating: true} }
	cases := map[string]struct {
		endpoints []endpoint
		stale     bool
		local     int
		code      int
		body      string
	}{
		"two ready local endpoints, each serving both ports": {
			endpoints: []endpoint{ready("10.244.1.3", "node-a"), ready("10.244.1.4", "node-a"), ready("10.244.2.3", "node-b")},
			local:     2,
			code:      http.StatusOK,
			body:      "{\n\t\"service\": {\n\t\t\"namespace\": \"ns\",\n\t\t\"name\": \"lb\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}",
		},
		"one ready and one terminating local endpoint": {
			endpoints: []endpoint{ready("10.244.1.3", "node-a"), terminating("10.244.1.4")},
			local:     1,
			code:      http.StatusOK,
			body:      "{\n\t\"service\": {\n\t\t\"namespace\": \"ns\",\n\t\t\"name\": \"lb\"\n\t},\n\t\"localEndpoints\": 1,\n\t\"serviceProxyHealthy\": true\n}",
		},
		"only terminating local endpoints, still serving": {
			endpoints: []endpoint{terminating("10.244.1.3"), ready("10.244.2.3", "node-b")},
			code:      http.StatusServiceUnavailable,
			body:      "{\n\t\"service\": {\n\t\t\"namespace\": \"ns\",\n\t\t\"name\": \"lb\"\n\t},\n\t\"localEndpoints\": 0,\n\t\"serviceProxyHealthy\": true\n}",
		},
		"ready local endpoints, but a change has waited past the health timeout": {
			endpoints: []endpoint{ready("10.244.1.3", "node-a")},
			stale:     true,
			local:     1,
			code:      http.StatusServiceUnavailable,
			body:      "{\n\t\"service\": {\n\t\t\"namespace\": \"ns\",\n\t\t\"name\": \"lb\"\n\t},\n\t\"localEndpoints\": 1,\n\t\"serviceProxyHealthy\": false\n}",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			w := newHealthWorld(t)
			must(t, w.client.Create(ctx, localLB()))
			must(t, w.client.Create(ctx, lbSlice(tc.endpoints...)))
			must(t, w.agent.SyncOnce(ctx))
			if tc.stale {
				w.agent.changed(nil, localLB())
				w.clock.Step(w.agent.cfg.HealthTimeout + time.Second)
			}
			rec := httptest.NewRecorder()
			w.agent.health.handler(30100, corev1.IPv4Protocol).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			if rec.Code != tc.code {
				t.Errorf("status %d, want %d", rec.Code, tc.code)
			}
			if got := rec.Body.String(); got != tc.body {
				t.Errorf("body\n%s\nwant\n%s", got, tc.body)
			}
			if got, want := rec.Header().Get("X-Load-Balancing-Endpoint-Weight"), strconv.Itoa(tc.local); got != want {
				t.Errorf("X-Load-Balancing-Endpoint-Weight %q, want %q", got, want)
			}
		})
	}
}

// TestHealthCheckNodePortTakenIsReported: a health check node port that
// another process holds (kube-proxy still on the node) gives kube-proxy's
// Warning Event on the Service once, not at every sync, and is served as
// soon as it is free.
func TestHealthCheckNodePortTakenIsReported(t *testing.T) {
	held, err := net.Listen("tcp", ":0")
	must(t, err)
	port := int32(held.Addr().(*net.TCPAddr).Port)
	rec := events.NewFakeRecorder(10)
	h := newHealthServers("", "node-a", logr.Discard(), func() bool { return true })
	h.recorder = rec
	defer h.closeAll()
	entries := map[int32]healthEntry{port: {namespace: "ns", name: "lb", local: map[corev1.IPFamily]int{corev1.IPv4Protocol: 1}}}

	h.update(entries, nil, nil)
	h.update(entries, nil, nil)
	select {
	case e := <-rec.Events:
		if want := "Warning " + EventFailedHealthcheck + " node node-a failed to start healthcheck \"ns/lb\" on port " + strconv.Itoa(int(port)); !strings.HasPrefix(e, want) {
			t.Errorf("event %q, want it to start with %q", e, want)
		}
	default:
		t.Fatal("no Event for a health check node port that is taken")
	}
	select {
	case e := <-rec.Events:
		t.Errorf("a second Event for the same failure: %q", e)
	default:
	}

	must(t, held.Close())
	h.update(entries, nil, nil)
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(int(port)) + "/")
	must(t, err)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("health check node port once free: HTTP %d, want 200", resp.StatusCode)
	}
}

// TestHealthCheckNodePortListenersPerFamily checks where the health
// check node port of a Service listens, as kube-proxy's one server per
// IP family: in each family the Service has rules in and only there, on
// every address of the family unless --nodeport-addresses has ranges of
// the family, then on the node's addresses in them, and on none when no
// address of the node is in them.
func TestHealthCheckNodePortListenersPerFamily(t *testing.T) {
	dual := map[corev1.IPFamily]int{corev1.IPv4Protocol: 2, corev1.IPv6Protocol: 0}
	v4only := map[corev1.IPFamily]int{corev1.IPv4Protocol: 1}
	v6only := map[corev1.IPFamily]int{corev1.IPv6Protocol: 1}
	nodeIPs := []netip.Addr{netip.MustParseAddr("192.168.50.11"), netip.MustParseAddr("fd00:50::11")}
	cases := map[string]struct {
		local             map[corev1.IPFamily]int
		nodePortAddresses []string
		nodePortIPs       []netip.Addr
		want              []string
	}{
		"dual-stack Service, every address": {
			local: dual,
			want:  []string{"tcp4 0.0.0.0:30100", "tcp6 [::]:30100"},
		},
		"IPv4 Service on a dual-stack node: no IPv6 socket": {
			local: v4only,
			want:  []string{"tcp4 0.0.0.0:30100"},
		},
		"IPv6 Service on a dual-stack node: no IPv4 socket": {
			local: v6only,
			want:  []string{"tcp6 [::]:30100"},
		},
		"--nodeport-addresses of both families": {
			local:             dual,
			nodePortAddresses: []string{"192.168.50.0/24", "fd00:50::/64"},
			nodePortIPs:       nodeIPs,
			want:              []string{"tcp4 192.168.50.11:30100", "tcp6 [fd00:50::11]:30100"},
		},
		"--nodeport-addresses of IPv4 only: every IPv6 address": {
			local:             dual,
			nodePortAddresses: []string{"192.168.50.0/24"},
			nodePortIPs:       nodeIPs[:1],
			want:              []string{"tcp4 192.168.50.11:30100", "tcp6 [::]:30100"},
		},
		"--nodeport-addresses of IPv4 that no address of the node is in": {
			local:             dual,
			nodePortAddresses: []string{"10.99.0.0/16"},
			want:              []string{"tcp6 [::]:30100"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var prefixes []netip.Prefix
			for _, p := range tc.nodePortAddresses {
				prefixes = append(prefixes, netip.MustParsePrefix(p))
			}
			entries := map[int32]healthEntry{30100: {namespace: "ns", name: "lb", local: tc.local}}
			var got []string
			for l := range healthListeners(entries, healthAddrs(prefixes, tc.nodePortIPs)) {
				got = append(got, l.network()+" "+l.address())
			}
			slices.Sort(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("listeners (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHealthCheckNodePortAnswersPerFamily probes real sockets over IPv4
// and IPv6 loopback: a dual-stack Service answers each family with that
// family's count (200 over IPv4 with its two endpoints, 503 over IPv6
// with none), and a probe over the family a single-stack Service lacks
// is refused, as by kube-proxy, whose server of that family does not
// serve the Service.
func TestHealthCheckNodePortAnswersPerFamily(t *testing.T) {
	if !hasIPv6() {
		t.Skip("this machine has no IPv6 loopback to probe over")
	}
	port := freePort(t)
	dual := map[corev1.IPFamily]int{corev1.IPv4Protocol: 2, corev1.IPv6Protocol: 0}
	v4only := map[corev1.IPFamily]int{corev1.IPv4Protocol: 2}
	type probe struct {
		code  int // 0: refused
		local string
	}
	cases := map[string]struct {
		local      map[corev1.IPFamily]int
		ipv4, ipv6 probe
	}{
		"dual-stack Service": {
			local: dual,
			ipv4:  probe{code: http.StatusOK, local: "2"},
			ipv6:  probe{code: http.StatusServiceUnavailable, local: "0"},
		},
		"IPv4 Service": {
			local: v4only,
			ipv4:  probe{code: http.StatusOK, local: "2"},
		},
	}
	get := func(host string) probe {
		c := http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get("http://" + net.JoinHostPort(host, strconv.Itoa(int(port))) + "/")
		if err != nil {
			return probe{}
		}
		_ = resp.Body.Close()
		return probe{code: resp.StatusCode, local: resp.Header.Get("X-Load-Balancing-Endpoint-Weight")}
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHealthServers("", "node-a", logr.Discard(), func() bool { return true })
			defer h.closeAll()
			h.update(map[int32]healthEntry{port: {namespace: "ns", name: "lb", local: tc.local}}, nil, nil)
			if got := get("127.0.0.1"); got != tc.ipv4 {
				t.Errorf("over IPv4: %+v, want %+v", got, tc.ipv4)
			}
			if got := get("::1"); got != tc.ipv6 {
				t.Errorf("over IPv6: %+v, want %+v", got, tc.ipv6)
			}
		})
	}
}

// hasIPv6 tells whether this machine listens on IPv6 loopback.
func hasIPv6() bool {
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// freePort is a TCP port free now in both families (in IPv4 alone on a
// machine without IPv6).
func freePort(t *testing.T) int32 {
	t.Helper()
	for range 20 {
		l4, err := net.Listen("tcp4", "0.0.0.0:0")
		must(t, err)
		port := l4.Addr().(*net.TCPAddr).Port
		if !hasIPv6() {
			_ = l4.Close()
			return int32(port)
		}
		l6, err := net.Listen("tcp6", net.JoinHostPort("::", strconv.Itoa(port)))
		_ = l4.Close()
		if err == nil {
			_ = l6.Close()
			return int32(port)
		}
	}
	t.Fatal("no TCP port free in both families")
	return 0
}

// TestHealthEntriesCountEachFamily checks the counts behind a health
// check node port on a dual-stack node: each family's distinct local
// ready addresses, as each of kube-proxy's proxiers counts its own
// family's, never their sum; a family the Service has rules in counts 0
// until it has a local ready endpoint, and a family the Service lacks is
// absent.
func TestHealthEntriesCountEachFamily(t *testing.T) {
	ready := func(ip, node string) endpoint { return endpoint{ip: ip, node: node, ready: true, serving: true} }
	v4 := lbSlice(ready("10.244.1.3", "node-a"), ready("10.244.1.4", "node-a"), ready("10.244.2.3", "node-b"))
	v6 := lbSlice(ready("fd00:244:1::3", "node-a"), endpoint{ip: "fd00:244:1::4", node: "node-a", serving: true, terminating: true})
	v6.Name, v6.AddressType = "lb-2", discoveryv1.AddressTypeIPv6
	families := func(fs ...corev1.IPFamily) func(*corev1.Service) {
		return func(s *corev1.Service) {
			s.Spec.IPFamilies, s.Spec.ClusterIPs = fs, nil
			for _, f := range fs {
				s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, map[corev1.IPFamily]string{corev1.IPv4Protocol: "10.96.0.20", corev1.IPv6Protocol: "fd00:96::20"}[f])
			}
			s.Spec.ClusterIP = s.Spec.ClusterIPs[0]
		}
	}
	cases := map[string]struct {
		families []corev1.IPFamily
		slices   []*discoveryv1.EndpointSlice
		want     map[corev1.IPFamily]int
	}{
		"dual-stack Service": {
			families: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			slices:   []*discoveryv1.EndpointSlice{v4, v6},
			want:     map[corev1.IPFamily]int{corev1.IPv4Protocol: 2, corev1.IPv6Protocol: 1},
		},
		"dual-stack Service without IPv6 endpoints": {
			families: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			slices:   []*discoveryv1.EndpointSlice{v4},
			want:     map[corev1.IPFamily]int{corev1.IPv4Protocol: 2, corev1.IPv6Protocol: 0},
		},
		"IPv4 Service": {
			families: []corev1.IPFamily{corev1.IPv4Protocol},
			slices:   []*discoveryv1.EndpointSlice{v4},
			want:     map[corev1.IPFamily]int{corev1.IPv4Protocol: 2},
		},
		"IPv6 Service": {
			families: []corev1.IPFamily{corev1.IPv6Protocol},
			slices:   []*discoveryv1.EndpointSlice{v6},
			want:     map[corev1.IPFamily]int{corev1.IPv6Protocol: 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := newFakeClient()
			must(t, c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}))
			lb := localLB()
			lb.Spec.HealthCheckNodePort = freePort(t)
			families(tc.families...)(lb)
			must(t, c.Create(ctx, lb))
			for _, s := range tc.slices {
				must(t, c.Create(ctx, s.DeepCopy()))
			}
			backends := []dataplane.Backend{
				iptables.NewBackend(corev1.IPv4Protocol, iptables.NewFake(), iptables.Config{}),
				iptables.NewBackend(corev1.IPv6Protocol, iptables.NewFake(), iptables.Config{}),
			}
			a := newAgent(c, testConfig(t), logr.Discard(), clock.RealClock{}, backends)
			defer a.health.closeAll()
			must(t, a.SyncOnce(ctx))
			want := map[int32]healthEntry{lb.Spec.HealthCheckNodePort: {namespace: "ns", name: "lb", local: tc.want}}
			if diff := cmp.Diff(want, a.healthEntries(), cmp.AllowUnexported(healthEntry{})); diff != "" {
				t.Errorf("health check node ports (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHealthCheckCountsOfARefusedFamilyStay checks what the health check
// node ports serve after a sync that one family's backend refused: that
// family's ports and counts as its last applied sync left them, as
// kube-proxy's server of a family whose sync failed is not updated, and
// the other family's new ones.
func TestHealthCheckCountsOfARefusedFamilyStay(t *testing.T) {
	const v4, v6 = corev1.IPv4Protocol, corev1.IPv6Protocol
	entry := func(name string, local map[corev1.IPFamily]int) healthEntry {
		return healthEntry{namespace: "ns", name: name, local: local}
	}
	applied := map[int32]healthEntry{
		30100: entry("lb", map[corev1.IPFamily]int{v4: 0, v6: 0}),
		30200: entry("old", map[corev1.IPFamily]int{v4: 1, v6: 1}),
	}
	rendered := map[int32]healthEntry{
		30100: entry("lb", map[corev1.IPFamily]int{v4: 1, v6: 1}),
		30300: entry("new", map[corev1.IPFamily]int{v4: 2, v6: 2}),
	}
	cases := map[string]struct {
		refused []corev1.IPFamily
		want    map[int32]healthEntry
	}{
		"every family applied": {
			want: rendered,
		},
		"IPv6 refused": {
			refused: []corev1.IPFamily{v6},
			want: map[int32]healthEntry{
				30100: entry("lb", map[corev1.IPFamily]int{v4: 1, v6: 0}),
				30200: entry("old", map[corev1.IPFamily]int{v6: 1}),
				30300: entry("new", map[corev1.IPFamily]int{v4: 2}),
			},
		},
		"both refused": {
			refused: []corev1.IPFamily{v4, v6},
			want:    applied,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := keepRefused(applied, rendered, tc.refused)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(healthEntry{})); diff != "" {
				t.Errorf("health check node ports (-want +got):\n%s", diff)
			}
		})
	}
}

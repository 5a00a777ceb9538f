// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package explain

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/lbclass"
	"github.com/svcnet-io/svcnet/internal/nodeview"
	"github.com/svcnet-io/svcnet/test/builder"
)

// world is a healthy cluster for the Service web: two Ready Pods on two
// nodes, published, cluster DNS ready; each case breaks one thing.
type world struct{ in Inputs }

func healthy(svc *corev1.Service) *world {
	pods := []corev1.Pod{
		*builder.Pod("web-1", "default").Label("app", "web").ContainerPort("http", 8080).Node("node-1").IP("10.244.1.5").Ready().Obj(),
		*builder.Pod("web-2", "default").Label("app", "web").ContainerPort("http", 8080).Node("node-2").IP("10.244.2.5").Ready().Obj(),
	}
	svc.UID = "svc-uid"
	in := Inputs{
		Key: types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}, Service: svc, Pods: pods,
		Slices:      []discoveryv1.EndpointSlice{slice(svc.Name, ep("10.244.1.5", "node-1", true), ep("10.244.2.5", "node-2", true))},
		IPAddresses: map[string]*networkingv1.IPAddress{},
		Nodes:       []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, {ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}},
		DNS:         DNS{Found: true, Ready: 2},
		Serve:       lbclass.DefaultSelection(),
	}
	for _, ip := range svc.Spec.ClusterIPs {
		in.IPAddresses[ip] = &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ip},
			Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: svc.Namespace, Name: svc.Name}}}
	}
	return &world{in: in}
}

func slice(svc string, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
	return discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: svc + "-abcde", Namespace: "default",
		Labels: map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps}
}

func ep(ip, node string, isReady bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr.To(node), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(isReady)}}
}

func web() *builder.ServiceBuilder {
	return builder.Service("web", "default").Selector("app", "web").Port("http", 80, intstr.FromString("http")).ClusterIPs("10.96.0.20")
}

func lb(ip string) *corev1.Service {
	svc := web().Type(corev1.ServiceTypeLoadBalancer).Obj()
	svc.Spec.Ports[0].NodePort = 30080
	if ip != "" {
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	}
	return svc
}

func pool(name, cidr string) svcnetv1alpha1.LoadBalancerIPPool {
	return svcnetv1alpha1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: svcnetv1alpha1.LoadBalancerIPPoolSpec{CIDRs: []string{cidr}}}
}

func l2Announcement(name string) svcnetv1alpha1.LoadBalancerAnnouncement {
	a := svcnetv1alpha1.LoadBalancerAnnouncement{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec: svcnetv1alpha1.LoadBalancerAnnouncementSpec{Mode: svcnetv1alpha1.AnnouncementModeL2}}
	a.Status.Conditions = []metav1.Condition{{Type: svcnetv1alpha1.AnnouncementConditionAccepted, Status: metav1.ConditionTrue, ObservedGeneration: 1}}
	return a
}

// withAgent gives the client's node an agent whose healthy rules send
// the Service's ports to its ready endpoints.
func withAgent(w *world) *world {
	node := w.in.From.Node
	v := &nodeview.Service{Node: node, Mode: "nftables", Service: w.in.Key.String(), Exists: true, Rendered: true, UpToDate: true,
		Sync: nodeview.Sync{Healthy: true, LastSynced: time.Unix(100, 0), Now: time.Unix(101, 0)}}
	var eps []nodeview.Endpoint
	for _, a := range endpointAddresses(w.in.Slices, false) {
		eps = append(eps, nodeview.Endpoint{Address: a + ":8080", Ready: true})
	}
	for _, sp := range w.in.Service.Spec.Ports {
		v.Ports = append(v.Ports, nodeview.Port{Family: "IPv4", Name: "default/web:" + sp.Name, Protocol: "TCP", ClusterIP: w.in.Service.Spec.ClusterIP,
			Port: sp.Port, NodePort: sp.NodePort, Internal: eps, External: eps, HasEndpoints: len(eps) > 0})
	}
	w.in.Agent = &AgentRead{Node: node, Address: "172.31.0.11:10266", View: v}
	return w
}

func fromPod(w *world, node string) {
	w.in.From = From{Pod: builder.Pod("client", "default").Node(node).Obj(), Node: node}
}

// TestBrokenHops: each case breaks one thing; the report must name the
// hop and say it in words an operator recognises.
func TestBrokenHops(t *testing.T) {
	tests := map[string]struct {
		world   func() *world
		hop     string
		problem string // a part of the problem's sentence
	}{
		"the Service does not exist": {
			world: func() *world { w := healthy(web().Obj()); w.in.Service = nil; return w },
			hop:   HopService, problem: "Service default/web does not exist",
		},
		"a Service its namespace's full ServiceCIDR cannot take": {
			world: func() *world {
				w := healthy(web().Obj())
				w.in.Service = nil
				w.in.CreateRefused = `admission webhook "services.svcnet.io" denied the request: spec.clusterIPs: no free address in ServiceCIDR tenant`
				return w
			},
			hop: HopService, problem: "Service default/web does not exist, and the API server refuses to create it now: admission webhook",
		},
		"the selector matches no Pod": {
			world: func() *world {
				w := healthy(builder.Service("web", "default").Selector("app", "webb").Port("http", 80, intstr.FromString("http")).ClusterIPs("10.96.0.20").Obj())
				w.in.Pods = nil
				w.in.OtherLabels = map[string][]string{"app": {"web"}}
				w.in.Slices = nil
				return w
			},
			hop: HopPods, problem: "selector app=webb matches no Pod in default (Pods there carry app=web)",
		},
		"no Pod is Ready": {
			world: func() *world {
				w := healthy(web().Obj())
				for i := range w.in.Pods {
					w.in.Pods[i] = *builder.Pod(w.in.Pods[i].Name, "default").Label("app", "web").ContainerPort("http", 8080).Node("node-1").NotReady().Obj()
				}
				w.in.Slices = []discoveryv1.EndpointSlice{slice("web", ep("10.244.1.5", "node-1", false))}
				return w
			},
			hop: HopPods, problem: "none of the 2 Pod(s) is Ready",
		},
		"a named targetPort the Pods do not have": {
			world: func() *world {
				return healthy(builder.Service("web", "default").Selector("app", "web").Port("http", 80, intstr.FromString("web")).ClusterIPs("10.96.0.20").Obj())
			},
			hop: HopPods, problem: `targetPort "web" of port 80 matches no port of the 2 Pod(s): they have "http" (8080)`,
		},
		"a targetPort number the Pods do not declare": {
			world: func() *world {
				return healthy(builder.Service("web", "default").Selector("app", "web").Port("http", 80, intstr.FromInt32(9090)).ClusterIPs("10.96.0.20").Obj())
			},
			hop: HopPods, problem: `targetPort 9090 of port 80 is no port the 2 Pod(s) declare: they declare "http" (8080)`,
		},
		"Ready Pods the slices do not list": {
			world: func() *world {
				w := healthy(web().Obj())
				w.in.Slices = []discoveryv1.EndpointSlice{slice("web", ep("10.244.1.5", "node-1", true))}
				return w
			},
			hop: HopEndpointSlice, problem: "Ready Pod(s) web-2 are not ready endpoints of the slices",
		},
		"no EndpointSlice at all": {
			world: func() *world { w := healthy(web().Obj()); w.in.Slices = nil; return w },
			hop:   HopEndpointSlice, problem: "no EndpointSlice although 2 Pod(s) are Ready",
		},
		"a Service without a selector and no slice": {
			world: func() *world {
				w := healthy(builder.Service("web", "default").Port("http", 80, intstr.FromInt32(80)).ClusterIPs("10.96.0.20").Obj())
				w.in.Pods, w.in.Slices = nil, nil
				return w
			},
			hop: HopEndpointSlice, problem: "no EndpointSlice: a Service without a selector",
		},
		"internalTrafficPolicy Local on a node without endpoints": {
			world: func() *world {
				svc := web().Obj()
				svc.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
				w := healthy(svc)
				w.in.Nodes = append(w.in.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-3"}})
				fromPod(w, "node-3")
				return w
			},
			hop: HopNode, problem: "internalTrafficPolicy Local and no ready endpoint on node-3",
		},
		"externalTrafficPolicy Local, to the nodePort of a node without endpoints": {
			world: func() *world {
				svc := web().Type(corev1.ServiceTypeNodePort).Obj()
				svc.Spec.Ports[0].NodePort = 30080
				svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				svc.Spec.HealthCheckNodePort = 31000
				w := healthy(svc)
				w.in.Nodes = append(w.in.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-3"}})
				w.in.From = From{External: true, Node: "node-3"}
				return w
			},
			hop: HopExternal, problem: "externalTrafficPolicy Local and no ready endpoint on node-3",
		},
		"a Service without a selector whose endpoints are not ready": {
			world: func() *world {
				w := healthy(builder.Service("web", "default").Port("http", 80, intstr.FromInt32(80)).ClusterIPs("10.96.0.20").Obj())
				w.in.Pods = nil
				w.in.Slices = []discoveryv1.EndpointSlice{slice("web", ep("192.0.2.10", "", false))}
				return w
			},
			hop: HopEndpointSlice, problem: "the slices hold no ready endpoint",
		},
		"a LoadBalancer address no announcement covers": {
			world: func() *world {
				w := healthy(lb("192.168.240.1"))
				w.in.Pools = []svcnetv1alpha1.LoadBalancerIPPool{pool("public", "192.168.240.0/24")}
				w.in.From = From{External: true}
				return w
			},
			hop: HopExternal, problem: "no LoadBalancerAnnouncement covers 192.168.240.1 (pool public)",
		},
		"no node may announce it": {
			world: func() *world {
				svc := lb("192.168.240.1")
				svc.Status.Conditions = []metav1.Condition{{Type: svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced, Status: metav1.ConditionFalse,
					Reason: "NoCandidate", Message: "no node may announce 192.168.240.1 (none selected, or none with a ready endpoint under externalTrafficPolicy Local)"}}
				w := healthy(svc)
				w.in.From = From{External: true}
				return w
			},
			hop: HopExternal, problem: "no node announces it: no node may announce 192.168.240.1",
		},
		"the pools are exhausted": {
			world: func() *world {
				w := healthy(lb(""))
				w.in.Events = []corev1.Event{{Type: corev1.EventTypeWarning, Reason: "AllocationFailed", Message: "no free address in pools public"}}
				return w
			},
			hop: HopService, problem: "no LoadBalancer address (AllocationFailed: no free address in pools public)",
		},
		"a Service of another loadBalancerClass": {
			world: func() *world {
				svc := lb("")
				svc.Spec.LoadBalancerClass = ptr.To("example.com/lb")
				return healthy(svc)
			},
			hop: HopService, problem: "its class example.com/lb is another implementation's",
		},
		"loadBalancerSourceRanges that shut out the client": {
			world: func() *world {
				svc := lb("192.168.240.1")
				svc.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/8"}
				svc.Status.Conditions = []metav1.Condition{{Type: svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced, Status: metav1.ConditionTrue, Message: "192.168.240.1 answered by node-1 (ARP on eth0)"}}
				w := healthy(svc)
				w.in.From = From{External: true, ClientIP: netip.MustParseAddr("192.168.1.5")}
				return w
			},
			hop: HopExternal, problem: "loadBalancerSourceRanges 10.0.0.0/8 shut out the client 192.168.1.5",
		},
		"a ClusterIP Service asked from outside": {
			world: func() *world { w := healthy(web().Obj()); w.in.From = From{External: true}; return w },
			hop:   HopService, problem: "a ClusterIP Service is not reachable from outside the cluster",
		},
		"the client node's agent does not listen": {
			world: func() *world {
				w := healthy(web().Obj())
				fromPod(w, "node-1")
				w.in.Agent = &AgentRead{Node: "node-1", Address: "172.31.0.11:10266", Err: "dial tcp 172.31.0.11:10266: connect: connection refused"}
				return w
			},
			hop: HopNode, problem: "the agent on node-1 does not answer at 172.31.0.11:10266",
		},
		"the client node's agent stopped syncing": {
			world: func() *world {
				w := healthy(web().Obj())
				fromPod(w, "node-1")
				withAgent(w)
				queued := time.Unix(40, 0)
				w.in.Agent.View.Sync = nodeview.Sync{Healthy: false, LastSynced: time.Unix(30, 0), OldestQueuedChange: &queued, Now: time.Unix(100, 0),
					Error: "apply: iptables-restore: exit status 4"}
				return w
			},
			hop: HopNode, problem: "node-1's rules are stale: a change has waited since 1m0s ago, and the last sync was 1m10s ago",
		},
		"the client node's last sync failed": {
			world: func() *world {
				w := healthy(web().Obj())
				fromPod(w, "node-1")
				withAgent(w)
				w.in.Agent.View.Sync.Error = "apply: nft: Could not process rule: No such file or directory"
				return w
			},
			hop: HopNode, problem: "node-1's last sync failed and none has succeeded since (apply: nft: Could not process rule",
		},
		"the client node's agent's loop is stuck": {
			world: func() *world {
				w := healthy(web().Obj())
				fromPod(w, "node-1")
				w.in.Agent = &AgentRead{Node: "node-1", Address: "172.31.0.11:10266", Stuck: true, Err: "503 Service Unavailable: the agent's sync loop did not answer"}
				return w
			},
			hop: HopNode, problem: "the agent on node-1 answers, but its sync loop does not",
		},
		"the client node's rules have no endpoint the slices list": {
			world: func() *world {
				w := healthy(web().Obj())
				fromPod(w, "node-1")
				withAgent(w)
				p := &w.in.Agent.View.Ports[0]
				p.Internal, p.HasEndpoints = nil, false
				return w
			},
			hop: HopNode, problem: "node-1's rules reject 10.96.0.20:80/TCP (IPv4) as if no endpoint served it, while the slices list 2 ready endpoint(s)",
		},
		"cluster DNS does not know the name": {
			world: func() *world {
				w := healthy(web().Obj())
				fromPod(w, "node-1")
				w.in.DNSAnswer = &DNSAnswer{Server: "10.96.0.10:53", Name: "web.default.svc.cluster.local.", NotFound: true}
				return w
			},
			hop: HopName, problem: "cluster DNS at 10.96.0.10:53 answers that web.default.svc.cluster.local. does not exist",
		},
		"cluster DNS answers another address": {
			world: func() *world {
				w := healthy(web().Obj())
				fromPod(w, "node-1")
				w.in.DNSAnswer = &DNSAnswer{Server: "10.96.0.10:53", Name: "web.default.svc.cluster.local.", Addrs: []string{"10.96.0.99"}}
				return w
			},
			hop: HopName, problem: "answers web.default.svc.cluster.local. with 10.96.0.99, but the Service's addresses are 10.96.0.20",
		},
		"cluster DNS with no ready endpoint": {
			world: func() *world { w := healthy(web().Obj()); w.in.DNS = DNS{Found: true}; fromPod(w, "node-1"); return w },
			hop:   HopName, problem: "cluster DNS (kube-system/kube-dns) has no ready endpoint",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := Analyze(tc.world().in)
			if r.Works || r.Broken == nil {
				t.Fatalf("the report says the path works:\n%s", text(t, r))
			}
			if r.Broken.Hop != tc.hop || !strings.Contains(r.Broken.Problem, tc.problem) {
				t.Errorf("broken at %s: %q, want %s: %q\n%s", r.Broken.Hop, r.Broken.Problem, tc.hop, tc.problem, text(t, r))
			}
			if r.Broken.Fix == "" {
				t.Error("no fix")
			}
		})
	}
}

// TestHealthyPaths: a healthy Service of every type works from a Pod, a
// node and outside where that client can reach it.
func TestHealthyPaths(t *testing.T) {
	announced := func(svc *corev1.Service) *corev1.Service {
		svc.Status.Conditions = []metav1.Condition{{Type: svcnetv1alpha1.ServiceConditionLoadBalancerAnnounced, Status: metav1.ConditionTrue, Message: "192.168.240.1 answered by node-1 (ARP on eth0)"}}
		return svc
	}
	nodePort := web().Type(corev1.ServiceTypeNodePort).Obj()
	nodePort.Spec.Ports[0].NodePort = 30080
	covered := lb("192.168.240.1") // announced by BGP: no condition, an announcement covers it
	services := map[string]*corev1.Service{
		"LoadBalancer covered by an announcement": covered,
		"ClusterIP":    web().Obj(),
		"headless":     builder.Service("web", "default").Selector("app", "web").Port("http", 80, intstr.FromString("http")).Headless().Obj(),
		"NodePort":     nodePort,
		"LoadBalancer": announced(lb("192.168.240.1")),
		"ExternalName": builder.Service("web", "default").ExternalName("example.com").Obj(),
	}
	for typ, svc := range services {
		for _, from := range []string{"pod", "node", "external"} {
			if from == "external" && (typ == "ClusterIP" || typ == "headless" || typ == "ExternalName") {
				continue
			}
			t.Run(typ+" from "+from, func(t *testing.T) {
				w := healthy(svc.DeepCopy())
				w.in.Pools = []svcnetv1alpha1.LoadBalancerIPPool{pool("public", "192.168.240.0/24")}
				w.in.Announcements = []svcnetv1alpha1.LoadBalancerAnnouncement{l2Announcement("public")}
				switch from {
				case "pod":
					fromPod(w, "node-1")
				case "node":
					w.in.From = From{Node: "node-2"}
				case "external":
					w.in.From = From{External: true}
				}
				if w.in.From.Node != "" {
					withAgent(w)
				}
				if r := Analyze(w.in); !r.Works {
					t.Errorf("a healthy %s Service does not work from %s:\n%s", typ, from, text(t, r))
				}
			})
		}
	}
}

// TestUnseenAgentIsNoBreak: an agent the report cannot ask (not
// admitted, an untrusted certificate, a node not reachable from here)
// is said, and the path is judged without it.
func TestUnseenAgentIsNoBreak(t *testing.T) {
	for err, want := range map[string]string{
		"403 Forbidden: Forbidden (user=jane, verb=get, resource=nodes, subresource(s)=[proxy])": "get on nodes/proxy of node-1",
		"tls: failed to verify certificate: x509: certificate signed by unknown authority":       "--agent-insecure-skip-tls-verify",
		"dial tcp 172.31.0.11:10266: connect: no route to host":                                  "needs the node's network",
	} {
		w := healthy(web().Obj())
		fromPod(w, "node-1")
		w.in.Agent = &AgentRead{Node: "node-1", Address: "172.31.0.11:10266", Unseen: true, Untrusted: strings.Contains(err, "x509"), Err: err}
		r := Analyze(w.in)
		if !r.Works || !strings.Contains(text(t, r), want) {
			t.Errorf("agent unseen (%s): want a working path that says %q:\n%s", err, want, text(t, r))
		}
	}
}

// TestDNSAnswers: cluster DNS's answer that matches the Service (its
// ClusterIP, a headless Service's ready endpoints) holds; no answer from
// where explain runs is said and not judged.
func TestDNSAnswers(t *testing.T) {
	headless := builder.Service("web", "default").Selector("app", "web").Port("http", 80, intstr.FromString("http")).Headless().Obj()
	for name, tc := range map[string]struct {
		svc    *corev1.Service
		answer DNSAnswer
		want   string
	}{
		"a ClusterIP":         {svc: web().Obj(), answer: DNSAnswer{Addrs: []string{"10.96.0.20"}}, want: "answers web.default.svc.cluster.local.: 10.96.0.20"},
		"headless":            {svc: headless, answer: DNSAnswer{Addrs: []string{"10.244.1.5", "10.244.2.5"}}, want: ": 10.244.1.5, 10.244.2.5"},
		"no answer from here": {svc: web().Obj(), answer: DNSAnswer{Unseen: true, Err: "i/o timeout"}, want: "not asked: cluster DNS at 10.96.0.10:53 gave no answer from here (i/o timeout)"},
	} {
		w := healthy(tc.svc)
		fromPod(w, "node-1")
		tc.answer.Server, tc.answer.Name = "10.96.0.10:53", "web.default.svc.cluster.local."
		w.in.DNSAnswer = &tc.answer
		r := Analyze(w.in)
		if !r.Works || !strings.Contains(text(t, r), tc.want) {
			t.Errorf("%s: want a working path that says %q:\n%s", name, tc.want, text(t, r))
		}
	}
}

func text(t *testing.T, r Report) string {
	t.Helper()
	var b strings.Builder
	if err := Text(&b, r); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

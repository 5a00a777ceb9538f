// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package explain

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/lbclass"
)

// From is where the packets start.
type From struct {
	// Pod is the client Pod; its node is Node.
	Pod *corev1.Pod
	// Node is the client's node: the Pod's, or a node's own programs.
	Node string
	// External is a client outside the cluster, at ClientIP if valid.
	External bool
	ClientIP netip.Addr
}

// String names the client as the report does.
func (f From) String() string {
	switch {
	case f.Pod != nil:
		return fmt.Sprintf("Pod %s/%s on %s", f.Pod.Namespace, f.Pod.Name, f.Node)
	case f.Node != "" && !f.External:
		return "node " + f.Node
	case f.External:
		s := "outside the cluster"
		if f.ClientIP.IsValid() {
			s += " (" + f.ClientIP.String() + ")"
		}
		if f.Node != "" {
			s += ", to node " + f.Node
		}
		return s
	}
	return "a Pod"
}

// DNS is what the report knows of cluster DNS: the kube-dns Service and
// how many ready endpoints it has.
type DNS struct {
	Found bool
	Ready int
	// ClusterIP is the kube-dns Service's first ClusterIP.
	ClusterIP netip.Addr
}

// Inputs are the objects a report reads, all from the API server.
type Inputs struct {
	Key     types.NamespacedName
	Service *corev1.Service // nil when it does not exist
	From    From
	// Pods are those the selector matches, in the Service's namespace.
	Pods []corev1.Pod
	// OtherLabels are, for each key of the selector, the values Pods of
	// the namespace carry (to say what a selector that matches nothing
	// could have meant).
	OtherLabels map[string][]string
	Slices      []discoveryv1.EndpointSlice
	// IPAddresses are the IPAddress objects of the ClusterIPs, by address.
	IPAddresses   map[string]*networkingv1.IPAddress
	Nodes         []corev1.Node
	Events        []corev1.Event // the Service's, oldest first
	Pools         []svcnetv1alpha1.LoadBalancerIPPool
	Announcements []svcnetv1alpha1.LoadBalancerAnnouncement
	DNS           DNS
	// Serve is which LoadBalancer classes svcnet serves.
	Serve lbclass.Selection
	// Agent is the client node's agent, once ReadAgent read it.
	Agent *AgentRead
	// DNSAnswer is cluster DNS's answer for the Service's name, once
	// AskDNS asked.
	DNSAnswer *DNSAnswer
	// CreateRefused is, for a Service that does not exist, why the API
	// server refuses a ClusterIP Service of that name now (a dry run), ""
	// when it would accept one or was not asked.
	CreateRefused string
}

// ClusterDNS is the Service of cluster DNS, as kubeadm and every
// installer name it.
var ClusterDNS = types.NamespacedName{Namespace: metav1.NamespaceSystem, Name: "kube-dns"}

// Gather reads what a report of the Service key needs. A Service that
// does not exist is no error: the report says so. A client Pod or node
// that does not exist is one.
func Gather(ctx context.Context, c client.Reader, key types.NamespacedName, from From, serve lbclass.Selection) (Inputs, error) {
	in := Inputs{Key: key, From: from, Serve: serve, IPAddresses: map[string]*networkingv1.IPAddress{}}
	if err := gatherClient(ctx, c, &in); err != nil {
		return in, err
	}
	svc := &corev1.Service{}
	if err := c.Get(ctx, key, svc); err != nil {
		if apierrors.IsNotFound(err) {
			if w, ok := c.(client.Writer); ok {
				in.CreateRefused = tryCreate(ctx, w, key)
			}
			return in, nil
		}
		return in, fmt.Errorf("reading Service %s: %w", key, err)
	}
	in.Service = svc
	for _, step := range []func(context.Context, client.Reader, *Inputs) error{gatherPods, gatherSlices, gatherAddresses, gatherNodes, gatherEvents, gatherLoadBalancing, gatherDNS} {
		if err := step(ctx, c, &in); err != nil {
			return in, err
		}
	}
	return in, nil
}

// tryCreate asks the API server, in a dry run that stores nothing, to
// create a ClusterIP Service named key with one port: whether the
// namespace could have one now (a full ServiceCIDR refuses it). A caller
// that may not create Services, or any refusal of the request itself
// rather than of the Service, is no answer.
func tryCreate(ctx context.Context, w client.Writer, key types.NamespacedName) string {
	probe := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "probe", Port: 80}}}}
	err := w.Create(ctx, probe, client.DryRunAll)
	switch {
	case err == nil, apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot create resource"), // RBAC
		apierrors.IsNotFound(err), apierrors.IsAlreadyExists(err), apierrors.IsUnauthorized(err):
		return ""
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return ""
}

// gatherClient reads the client Pod and checks the client node.
func gatherClient(ctx context.Context, c client.Reader, in *Inputs) error {
	if p := in.From.Pod; p != nil {
		pod := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), pod); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("the client Pod %s/%s does not exist", p.Namespace, p.Name)
			}
			return fmt.Errorf("reading the client Pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		if pod.Spec.NodeName == "" {
			return fmt.Errorf("the client Pod %s/%s is not scheduled to a node yet", pod.Namespace, pod.Name)
		}
		in.From.Pod, in.From.Node = pod, pod.Spec.NodeName
	}
	if in.From.Node != "" {
		if err := c.Get(ctx, client.ObjectKey{Name: in.From.Node}, &corev1.Node{}); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("the node %s does not exist", in.From.Node)
			}
			return fmt.Errorf("reading node %s: %w", in.From.Node, err)
		}
	}
	return nil
}

func gatherPods(ctx context.Context, c client.Reader, in *Inputs) error {
	sel := in.Service.Spec.Selector
	if len(sel) == 0 {
		return nil
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(in.Key.Namespace)); err != nil {
		return fmt.Errorf("listing the Pods of %s: %w", in.Key.Namespace, err)
	}
	in.OtherLabels = map[string][]string{}
	matches := labels.SelectorFromSet(sel)
	for _, p := range pods.Items {
		if matches.Matches(labels.Set(p.Labels)) {
			in.Pods = append(in.Pods, p)
			continue
		}
		for k := range sel {
			if v, ok := p.Labels[k]; ok && !slices.Contains(in.OtherLabels[k], v) {
				in.OtherLabels[k] = append(in.OtherLabels[k], v)
			}
		}
	}
	for k := range in.OtherLabels {
		slices.Sort(in.OtherLabels[k])
	}
	return nil
}

func gatherSlices(ctx context.Context, c client.Reader, in *Inputs) error {
	var list discoveryv1.EndpointSliceList
	if err := c.List(ctx, &list, client.InNamespace(in.Key.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: in.Key.Name}); err != nil {
		return fmt.Errorf("listing the EndpointSlices of %s: %w", in.Key, err)
	}
	in.Slices = list.Items
	slices.SortFunc(in.Slices, func(a, b discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return nil
}

func gatherAddresses(ctx context.Context, c client.Reader, in *Inputs) error {
	for _, ip := range in.Service.Spec.ClusterIPs {
		if ip == corev1.ClusterIPNone {
			continue
		}
		ipa := &networkingv1.IPAddress{}
		err := c.Get(ctx, client.ObjectKey{Name: ip}, ipa)
		switch {
		case err == nil:
			in.IPAddresses[ip] = ipa
		case apierrors.IsNotFound(err):
		default:
			return fmt.Errorf("reading IPAddress %s: %w", ip, err)
		}
	}
	return nil
}

func gatherNodes(ctx context.Context, c client.Reader, in *Inputs) error {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return fmt.Errorf("listing Nodes: %w", err)
	}
	in.Nodes = nodes.Items
	return nil
}

func gatherEvents(ctx context.Context, c client.Reader, in *Inputs) error {
	var evs corev1.EventList
	if err := c.List(ctx, &evs, client.InNamespace(in.Key.Namespace)); err != nil {
		return fmt.Errorf("listing the Events of %s: %w", in.Key.Namespace, err)
	}
	for _, ev := range evs.Items {
		if ev.InvolvedObject.UID == in.Service.UID {
			in.Events = append(in.Events, ev)
		}
	}
	slices.SortFunc(in.Events, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b).Time) })
	return nil
}

// gatherLoadBalancing reads svcnet's pools and announcements, for a
// LoadBalancer Service; a cluster without svcnet's CRDs has none.
func gatherLoadBalancing(ctx context.Context, c client.Reader, in *Inputs) error {
	if in.Service.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return nil
	}
	var pools svcnetv1alpha1.LoadBalancerIPPoolList
	if err := c.List(ctx, &pools); err != nil && !isNoKind(err) {
		return fmt.Errorf("listing LoadBalancerIPPools: %w", err)
	}
	in.Pools = pools.Items
	var anns svcnetv1alpha1.LoadBalancerAnnouncementList
	if err := c.List(ctx, &anns); err != nil && !isNoKind(err) {
		return fmt.Errorf("listing LoadBalancerAnnouncements: %w", err)
	}
	in.Announcements = anns.Items
	return nil
}

func gatherDNS(ctx context.Context, c client.Reader, in *Inputs) error {
	dns := &corev1.Service{}
	if err := c.Get(ctx, ClusterDNS, dns); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading %s: %w", ClusterDNS, err)
	}
	in.DNS.Found = true
	if ip, err := netip.ParseAddr(dns.Spec.ClusterIP); err == nil {
		in.DNS.ClusterIP = ip
	}
	var list discoveryv1.EndpointSliceList
	if err := c.List(ctx, &list, client.InNamespace(ClusterDNS.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: ClusterDNS.Name}); err != nil {
		return fmt.Errorf("listing the EndpointSlices of %s: %w", ClusterDNS, err)
	}
	seen := map[string]bool{}
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			if ready(ep) && len(ep.Addresses) > 0 && !seen[ep.Addresses[0]] {
				seen[ep.Addresses[0]] = true
				in.DNS.Ready++
			}
		}
	}
	return nil
}

// isNoKind tells an API server without svcnet's CRDs, as the rest of
// svcnet reads it.
func isNoKind(err error) bool {
	return apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err)
}

func eventTime(ev corev1.Event) metav1.Time {
	switch {
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp
	case !ev.EventTime.IsZero():
		return metav1.Time{Time: ev.EventTime.Time}
	}
	return ev.CreationTimestamp
}

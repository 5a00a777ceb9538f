// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodesim

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// LabelSimulated marks the Node objects the simulator owns; Nodes so
// labelled that are no longer simulated (fewer --nodes) are deleted.
const LabelSimulated = "svcnet.io/simulated-node"

// Node is one simulated node.
type Node struct {
	// Name is the Node object's name.
	Name string
	// Zone goes into topology.kubernetes.io/zone; empty: no zone label.
	Zone string
	// Net is the node's namespace, address and Pod CIDR.
	Net *netlab.Node
}

const (
	// leaseDuration and heartbeatPeriod are the kubelet's defaults.
	leaseDuration   = 40 * time.Second
	heartbeatPeriod = 10 * time.Second
	// statusPeriod is how often the Ready condition's heartbeat is
	// refreshed (the kubelet's node-status-report-frequency is 5 minutes;
	// the Lease is what kube-controller-manager watches).
	statusPeriod = time.Minute
	leaseNS      = "kube-node-lease"
)

// KubeletVersion is what the simulated kubelets report: the Kubernetes
// version whose kubelet API and Pod semantics they follow, marked as the
// simulator's.
const KubeletVersion = "v1.37.1-svcnet"

// kernelVersion is this machine's kernel release, which the nodes share.
func kernelVersion() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// nodeObject is the desired Node: labels, Pod CIDR, addresses, capacity.
func nodeObject(n Node) *corev1.Node {
	labels := map[string]string{
		corev1.LabelHostname:   n.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
		LabelSimulated:         "true",
	}
	if n.Zone != "" {
		labels[corev1.LabelTopologyZone] = n.Zone
		labels[corev1.LabelTopologyRegion] = "svcnet"
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels},
		Spec:       corev1.NodeSpec{PodCIDR: n.Net.PodCIDR.String(), PodCIDRs: prefixStrings(n.Net.PodCIDRs)},
	}
}

func prefixStrings(ps []netip.Prefix) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

// nodeAddresses are the Node's InternalIPs, one a family, and its
// hostname.
func nodeAddresses(n Node) []corev1.NodeAddress {
	var out []corev1.NodeAddress
	for _, ip := range n.Net.IPs {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
	}
	return append(out, corev1.NodeAddress{Type: corev1.NodeHostName, Address: n.Name})
}

func nodeStatus(n Node, kubeletPort int, now metav1.Time) corev1.NodeStatus {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("250"),
	}
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return corev1.NodeStatus{
		Capacity:    capacity,
		Allocatable: capacity,
		Phase:       corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "simulated node"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "simulated node"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "simulated node"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "svcnet up simulated node is ready"),
		},
		Addresses: nodeAddresses(n),
		NodeInfo: corev1.NodeSystemInfo{
			OperatingSystem: "linux", Architecture: "amd64", OSImage: "svcnet simulated node", KernelVersion: kernelVersion(),
			KubeletVersion: KubeletVersion, ContainerRuntimeVersion: "svcnet://" + KubeletVersion,
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(kubeletPort)}},
	}
}

// nodeKeeper registers the Nodes and keeps their heartbeats; a
// manager.Runnable.
type nodeKeeper struct {
	// kubeletPort is published in the Nodes' daemonEndpoints; zero when
	// no kubelet API is served.
	kubeletPort int
	c           client.Client
	// r reads from the API server: the Nodes and Leases just written are
	// not in the cache yet.
	r     client.Reader
	nodes []Node
	log   logr.Logger
	now   func() time.Time
}

// Start registers every Node, then renews the Leases until ctx ends.
func (k *nodeKeeper) Start(ctx context.Context) error {
	if err := k.register(ctx); err != nil {
		return err
	}
	lastStatus := k.now()
	t := time.NewTicker(heartbeatPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for _, n := range k.nodes {
			if err := k.renewLease(ctx, n); err != nil {
				k.log.Error(err, "Renewing the node Lease", "node", n.Name)
			}
		}
		if k.now().Sub(lastStatus) >= statusPeriod {
			lastStatus = k.now()
			for _, n := range k.nodes {
				if err := k.writeStatus(ctx, n); err != nil {
					k.log.Error(err, "Refreshing the node status", "node", n.Name)
				}
			}
		}
	}
}

// register creates or updates the Node objects and their Leases, and
// deletes simulated Nodes that are no longer wanted.
func (k *nodeKeeper) register(ctx context.Context) error {
	wanted := map[string]bool{}
	for _, n := range k.nodes {
		wanted[n.Name] = true
		if err := k.ensureNode(ctx, n); err != nil {
			return fmt.Errorf("registering Node %s: %w", n.Name, err)
		}
		if err := k.writeStatus(ctx, n); err != nil {
			return fmt.Errorf("writing the status of Node %s: %w", n.Name, err)
		}
		if err := k.renewLease(ctx, n); err != nil {
			return fmt.Errorf("creating the Lease of Node %s: %w", n.Name, err)
		}
	}
	var list corev1.NodeList
	if err := k.r.List(ctx, &list, client.MatchingLabels{LabelSimulated: "true"}); err != nil {
		return err
	}
	for i := range list.Items {
		old := &list.Items[i]
		if wanted[old.Name] {
			continue
		}
		k.log.Info("Deleting a simulated Node that is no longer run", "node", old.Name)
		if err := k.c.Delete(ctx, old); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Node %s: %w", old.Name, err)
		}
	}
	return nil
}

func (k *nodeKeeper) ensureNode(ctx context.Context, n Node) error {
	want := nodeObject(n)
	var cur corev1.Node
	err := k.r.Get(ctx, client.ObjectKeyFromObject(want), &cur)
	if apierrors.IsNotFound(err) {
		return k.c.Create(ctx, want)
	}
	if err != nil {
		return err
	}
	if cur.Spec.PodCIDR != "" && !slices.Equal(cur.Spec.PodCIDRs, want.Spec.PodCIDRs) {
		// A Pod CIDR cannot change: the Node from an earlier run with
		// another --cluster-cidr is replaced.
		k.log.Info("Replacing a Node whose Pod CIDR changed", "node", n.Name, "old", cur.Spec.PodCIDR, "new", want.Spec.PodCIDR)
		if err := k.c.Delete(ctx, &cur, client.Preconditions{UID: &cur.UID}); client.IgnoreNotFound(err) != nil {
			return err
		}
		return k.c.Create(ctx, want)
	}
	patch := client.MergeFrom(cur.DeepCopy())
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	maps.Copy(cur.Labels, want.Labels)
	if n.Zone == "" {
		// A node no longer in a zone (--zones=0) loses the labels an
		// earlier run gave it.
		delete(cur.Labels, corev1.LabelTopologyZone)
		delete(cur.Labels, corev1.LabelTopologyRegion)
	}
	cur.Spec.PodCIDR, cur.Spec.PodCIDRs = want.Spec.PodCIDR, want.Spec.PodCIDRs
	// A cordon (spec.unschedulable) stays, as on a real node; the taints
	// the node lifecycle controller set while svcnet up was stopped go
	// once the heartbeats are back.
	return k.c.Patch(ctx, &cur, patch)
}

func (k *nodeKeeper) writeStatus(ctx context.Context, n Node) error {
	var cur corev1.Node
	if err := k.r.Get(ctx, client.ObjectKey{Name: n.Name}, &cur); err != nil {
		return err
	}
	orig := cur.DeepCopy()
	cur.Status = nodeStatus(n, k.kubeletPort, metav1.NewTime(k.now()))
	// Keep the transition times of conditions that did not change.
	for i, c := range cur.Status.Conditions {
		for _, o := range orig.Status.Conditions {
			if o.Type == c.Type && o.Status == c.Status {
				cur.Status.Conditions[i].LastTransitionTime = o.LastTransitionTime
			}
		}
	}
	return k.c.Status().Patch(ctx, &cur, client.MergeFrom(orig))
}

func (k *nodeKeeper) renewLease(ctx context.Context, n Node) error {
	now := metav1.NewMicroTime(k.now())
	var lease coordinationv1.Lease
	err := k.r.Get(ctx, client.ObjectKey{Namespace: leaseNS, Name: n.Name}, &lease)
	if apierrors.IsNotFound(err) {
		lease = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: leaseNS, Name: n.Name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(n.Name),
				LeaseDurationSeconds: ptr.To(int32(leaseDuration / time.Second)),
				RenewTime:            &now,
			},
		}
		var node corev1.Node
		if err := k.r.Get(ctx, client.ObjectKey{Name: n.Name}, &node); err == nil {
			lease.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
		}
		return k.c.Create(ctx, &lease)
	}
	if err != nil {
		return err
	}
	patch := client.MergeFrom(lease.DeepCopy())
	lease.Spec.HolderIdentity = ptr.To(n.Name)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(leaseDuration / time.Second))
	lease.Spec.RenewTime = &now
	return k.c.Patch(ctx, &lease, patch)
}

// PodCIDR is the Pod CIDR of node i (1-based) carved out of a cluster CIDR:
// the i-th /24 (IPv4) or /64 (IPv6).
func PodCIDR(cluster netip.Prefix, i int) (netip.Prefix, error) {
	bits := 24
	if cluster.Addr().Is6() {
		bits = 64
	}
	if room := 1 << min(max(bits-cluster.Bits(), 0), 30); i < 0 || i >= room {
		return netip.Prefix{}, fmt.Errorf("cluster CIDR %s has no /%d for node %d", cluster, bits, i)
	}
	a := cluster.Masked().Addr().As16()
	// Node i's subnet number goes in the bytes just above the host part.
	byteIdx := bits/8 - 1
	if cluster.Addr().Is4() {
		byteIdx += 12
	}
	v := i
	for b := byteIdx; v > 0 && b >= 0; b-- {
		a[b] |= byte(v & 0xff)
		v >>= 8
	}
	addr := netip.AddrFrom16(a)
	if cluster.Addr().Is4() {
		addr = addr.Unmap()
	}
	return netip.PrefixFrom(addr, bits), nil
}

// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/migrate/metallb"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// MetalLB's speaker in the failover benchmark: v0.16's speaker (built from
// its Go module by `make metallb` into bin/metallb) runs on every node
// beside svcnet's agent, which then only forwards (no
// LoadBalancerAnnouncement exists). The address comes from svcnet's
// loadbalancer controller, from the same range MetalLB's IPAddressPool
// holds: the speaker announces any address of its pools that a Service's
// status holds, whoever gave it. The speakers run as MetalLB's manifests
// run them: with memberlist (its LAN defaults) for fast dead-node
// detection in L2, its native BGP implementation in BGP (no BFD there:
// MetalLB has BFD only in its FRR modes).
const (
	annMetalLBNamespace = "metallb-system"
	annMetalLBLabels    = "app=metallb,component=speaker"
	annMetalLBMLPort    = "7946"
)

// annImpl is what announces the address.
type annImpl string

const (
	annBySvcnet  annImpl = "svcnet"
	annByMetalLB annImpl = "MetalLB"
)

// installMetalLB installs MetalLB's CRDs, its namespace and objects, and
// the memberlist key the speakers share.
func (c *annCluster) installMetalLB(ctx context.Context) error {
	crds := filepath.Join(c.root, "bin/metallb/crds")
	if _, err := envtest.InstallCRDs(c.env.Config, envtest.CRDInstallOptions{Paths: []string{crds}}); err != nil {
		return fmt.Errorf("installing MetalLB's CRDs from %s (run make metallb): %w", crds, err)
	}
	if err := c.env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: annMetalLBNamespace}}); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(c.dir, "memberlist"), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "memberlist", "secretkey"), []byte("svcnet-bench-memberlist-key"), 0o600); err != nil {
		return err
	}
	for _, o := range c.metallbObjects() {
		if err := c.env.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("creating MetalLB's %s: %w", o.GetObjectKind().GroupVersionKind().Kind, err)
		}
	}
	return nil
}

// metallbObjects are MetalLB's equivalent of c.announcement(): the pool,
// and an L2Advertisement, or a BGPPeer at the same hold time as svcnet's
// and a BGPAdvertisement. MetalLB's native BGP refuses a keepaliveTime:
// it sends keepalives every third of the hold time, which is svcnet's
// setting here too.
func (c *annCluster) metallbObjects() []client.Object {
	obj := func(version, kind string, spec map[string]any) client.Object {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": metallb.Group + "/" + version, "kind": kind,
			"metadata": map[string]any{"name": "bench", "namespace": annMetalLBNamespace},
			"spec":     spec,
		}}
	}
	objs := []client.Object{obj("v1beta1", "IPAddressPool", map[string]any{"addresses": []any{annPoolCIDR}})}
	if c.mode == svcnetv1alpha1.AnnouncementModeL2 {
		return append(objs, obj("v1beta1", "L2Advertisement", map[string]any{"ipAddressPools": []any{"bench"}}))
	}
	return append(objs,
		obj("v1beta2", "BGPPeer", map[string]any{"myASN": int64(64512), "peerASN": int64(64500), "peerAddress": annRouterIP,
			"holdTime": annHoldTime.String()}),
		obj("v1beta1", "BGPAdvertisement", map[string]any{"ipAddressPools": []any{"bench"}}))
}

// startSpeaker runs MetalLB's speaker in n's namespace, as its DaemonSet's
// hostNetwork Pod: its Pod object (which memberlist finds the peers by)
// holds the node's address.
func (c *annCluster) startSpeaker(ctx context.Context, n *netlab.Node) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "speaker-" + n.Name, Namespace: annMetalLBNamespace,
			Labels: map[string]string{"app": "metallb", "component": "speaker"}},
		Spec: corev1.PodSpec{NodeName: n.Name, HostNetwork: true,
			Containers: []corev1.Container{{Name: "speaker", Image: "quay.io/metallb/speaker"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: n.IP.String(), PodIPs: []corev1.PodIP{{IP: n.IP.String()}},
			HostIP: n.IP.String()},
	}
	var existing corev1.Pod
	if err := c.env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &existing); err != nil {
		if err := c.env.CreatePod(ctx, pod); err != nil {
			return err
		}
	}
	p, err := startProc(filepath.Join(c.dir, n.Name+"-speaker.log"), "ip", "netns", "exec", n.NetNS,
		"env", "KUBECONFIG="+c.kubeconfig, filepath.Join(c.root, "bin/metallb/speaker"),
		"--node-name="+n.Name, "--namespace="+annMetalLBNamespace, "--pod-name="+pod.Name,
		"--ml-bindaddr="+n.IP.String(), "--ml-bindport="+annMetalLBMLPort, "--ml-labels="+annMetalLBLabels,
		"--ml-secret-key-path="+filepath.Join(c.dir, "memberlist"),
		"--port=19120", "--health-probe-port=19121", "--log-level=info")
	if err != nil {
		return err
	}
	c.speakers[n.Name] = p
	return nil
}

// metallbSettle is how long a restarted speaker, or a node whose link
// came back, is given to rejoin memberlist before the next try: a node
// the others declared dead announces alone until it is refuted alive.
const metallbSettle = 5 * time.Second

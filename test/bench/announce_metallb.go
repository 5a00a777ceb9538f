// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	svcnetv1alpha1 "github.com/svcnet-io/svcnet/api/v1alpha1"
	"github.com/svcnet-io/svcnet/internal/migrate/metallb"
	"github.com/svcnet-io/svcnet/localcluster/frr"
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
// detection in L2, its native BGP implementation in BGP, and for BFD
// its FRR mode (MetalLB has BFD there only): FRR (zebra, bgpd, bfdd) in
// each node's namespace, its configuration written by the speaker and
// applied by a reloader (frrReloader).
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
	objs := []client.Object{obj("v1beta1", "IPAddressPool", map[string]any{"addresses": []any{c.family.pool}})}
	if c.mode == svcnetv1alpha1.AnnouncementModeL2 {
		return append(objs, obj("v1beta1", "L2Advertisement", map[string]any{"ipAddressPools": []any{"bench"}}))
	}
	peer := map[string]any{"myASN": int64(64512), "peerASN": int64(64500), "peerAddress": c.family.router.Addr().String(), "holdTime": annHoldTime.String()}
	if c.metallbFRR() {
		// FRR mode takes a keepaliveTime.
		peer["keepaliveTime"] = annKeepalive.String()
	}
	if c.bfdInterval > 0 {
		// BFD comes from a BFDProfile (intervals in milliseconds).
		peer["bfdProfile"] = "bench"
		objs = append(objs, obj("v1beta1", "BFDProfile", map[string]any{"receiveInterval": c.bfdInterval.Milliseconds(),
			"transmitInterval": c.bfdInterval.Milliseconds(), "detectMultiplier": int64(annBFDMultiplier)}))
	}
	objs = append(objs, obj("v1beta1", "BGPAdvertisement", map[string]any{"ipAddressPools": []any{"bench"}}))
	if c.family.name == annIPv4.name {
		return append(objs, obj("v1beta2", "BGPPeer", peer))
	}
	// FRR takes its router ID from an IPv4 address, which an IPv6-only
	// node lacks: as MetalLB's users there do, each node's peer names one,
	// the peer selecting the node by its hostname label.
	for i, n := range c.nodes {
		p := maps.Clone(peer)
		p["routerID"] = fmt.Sprintf("10.0.0.%d", i+1)
		p["nodeSelectors"] = []any{map[string]any{"matchLabels": map[string]any{corev1.LabelHostname: n.Name}}}
		o := obj("v1beta2", "BGPPeer", p)
		o.SetName("bench-" + n.Name)
		objs = append(objs, o)
	}
	return objs
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
	env := []string{"KUBECONFIG=" + c.kubeconfig}
	if c.metallbFRR() {
		env = append(env, "METALLB_BGP_TYPE=frr", "FRR_CONFIG_FILE="+c.reloader.confFile(n.Name), "FRR_RELOADER_PID_FILE="+c.reloader.pidFile)
	}
	argv := append(append([]string{"ip", "netns", "exec", n.NetNS, "env"}, env...), filepath.Join(c.root, "bin/metallb/speaker"),
		"--node-name="+n.Name, "--namespace="+annMetalLBNamespace, "--pod-name="+pod.Name,
		"--ml-bindaddr="+n.IP.String(), "--ml-bindport="+annMetalLBMLPort, "--ml-labels="+annMetalLBLabels,
		"--ml-secret-key-path="+filepath.Join(c.dir, "memberlist"),
		"--port=19120", "--health-probe-port=19121", "--log-level=info")
	p, err := startProc(filepath.Join(c.dir, n.Name+"-speaker.log"), argv...)
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

// frrReloader is the reloader of MetalLB's FRR mode for every node of a
// cluster: the speaker writes FRR's integrated configuration to
// FRR_CONFIG_FILE and sends SIGHUP to the pid in FRR_RELOADER_PID_FILE,
// here this process's. MetalLB's own reloader applies the file with
// frr-reload.py, which Debian's frr package lacks; this one starts the
// node's FRR on the file, and again whenever the file changes (the
// configuration only changes while the cluster is set up, not during the
// tries: a restarted speaker writes the same file again).
type frrReloader struct {
	root, dir string
	pidFile   string
	nodes     map[string]*netlab.Node
	sigs      chan os.Signal
	done      chan struct{}

	mu      sync.Mutex
	applied map[string]string // by node: the configuration its FRR runs
	routers map[string]*frr.Router
	err     error
}

func startFRRReloader(root, dir string, nodes []*netlab.Node) (*frrReloader, error) {
	r := &frrReloader{root: root, dir: dir, pidFile: filepath.Join(dir, "frr-reloader.pid"), nodes: map[string]*netlab.Node{},
		sigs: make(chan os.Signal, 16), done: make(chan struct{}), applied: map[string]string{}, routers: map[string]*frr.Router{}}
	for _, n := range nodes {
		r.nodes[n.Name] = n
	}
	if err := os.WriteFile(r.pidFile, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	signal.Notify(r.sigs, syscall.SIGHUP)
	go r.run()
	return r, nil
}

func (r *frrReloader) confFile(node string) string {
	return filepath.Join(r.dir, "metallb-frr-"+node+".conf")
}

func (r *frrReloader) run() {
	for {
		select {
		case <-r.done:
			return
		case <-r.sigs:
			r.reload()
		}
	}
}

// reload (re)starts the FRR of each node whose file changed.
func (r *frrReloader) reload() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, n := range r.nodes {
		b, err := os.ReadFile(r.confFile(name))
		if err != nil || string(b) == r.applied[name] {
			continue
		}
		if old := r.routers[name]; old != nil {
			old.Stop()
		}
		rt, err := frr.StartIntegrated(filepath.Join(r.root, "bin/frr/root"), filepath.Join(r.dir, "frr-"+name), netlab.Path(n.NetNS), string(b))
		if err != nil {
			r.err = fmt.Errorf("%s: %w", name, err)
			progress("(o) MetalLB FRR mode: %v\n", r.err)
			continue
		}
		r.routers[name], r.applied[name] = rt, string(b)
	}
}

func (r *frrReloader) stop() {
	signal.Stop(r.sigs)
	close(r.done)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rt := range r.routers {
		rt.Stop()
	}
}

// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nodesim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/svcnet-io/svcnet/internal/platform/certs"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/internal/platform/nodeauth"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/container"
	"github.com/svcnet-io/svcnet/localcluster/nodesim/server"
)

// DefaultKubeletPort is the kubelet's --port.
const DefaultKubeletPort = 10250

// KubeletOptions serve a kubelet's API on every simulated node, where a
// kubelet serves it: HTTPS on the node's address.
type KubeletOptions struct {
	// Port is the kubelet port (DefaultKubeletPort when zero); the Nodes
	// publish it in status.daemonEndpoints.
	Port int
	// CACert and CAKey (PEM) sign each node's serving certificate;
	// CACert also authenticates client certificates, such as the API
	// server's kubelet client.
	CACert, CAKey []byte
}

func (o *KubeletOptions) port() int {
	if o.Port == 0 {
		return DefaultKubeletPort
	}
	return o.Port
}

// certificateExpiry is how long a node's serving certificate lasts.
const certificateExpiry = 365 * 24 * time.Hour

// addKubelets serves the kubelet API of every node from r's Pods, with a
// kubelet's authentication (client certificates of the CA, or tokens
// through TokenReview) and authorization (SubjectAccessReview).
func addKubelets(mgr manager.Manager, r *podReconciler, opts Options) error {
	kc, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	ca, err := dynamiccertificates.NewStaticCAContent("client-ca", opts.Kubelet.CACert)
	if err != nil {
		return fmt.Errorf("kubelet client CA: %w", err)
	}
	authn, authz, err := nodeauth.Delegated(kc, ca)
	if err != nil {
		return fmt.Errorf("kubelet API: %w", err)
	}
	for _, n := range opts.Nodes {
		rt := &nodeRuntime{r: r, node: n.Name}
		srv := server.New(server.Config{
			NodeName: n.Name, Runtime: rt, Authenticator: authn, Authorizer: authz,
			Log: r.log.WithName("kubelet").WithValues("node", n.Name), Metrics: http.HandlerFunc(rt.metrics),
			// The machine's log folder, which holds the containers' logs
			// (LogDir, the kubelet's /var/log/pods) beside the other
			// components', as a node's /var/log does.
			LogRoot: filepath.Dir(opts.LogDir),
		})
		k := &kubeletServer{node: n, handler: srv, port: opts.Kubelet.port(), caCert: opts.Kubelet.CACert, caKey: opts.Kubelet.CAKey, log: r.log}
		if err := mgr.Add(k); err != nil {
			return err
		}
	}
	return nil
}

// kubeletServer serves one node's API on its address; a manager.Runnable.
type kubeletServer struct {
	node          Node
	handler       http.Handler
	port          int
	caCert, caKey []byte
	log           logr.Logger
}

// sans are the names of the kubelet's serving certificate: the node's
// name and its address of each family.
func (k *kubeletServer) sans() []string {
	out := []string{k.node.Name}
	for _, ip := range k.node.Net.IPs {
		out = append(out, ip.String())
	}
	return out
}

// Start listens inside the node's network namespace until ctx ends.
func (k *kubeletServer) Start(ctx context.Context) error {
	certPEM, keyPEM, err := certs.NewServing(k.caCert, k.caKey, k.node.Name, k.sans(), time.Now(), certificateExpiry)
	if err != nil {
		return fmt.Errorf("kubelet serving certificate of %s: %w", k.node.Name, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	var l net.Listener
	addr := net.JoinHostPort(k.node.Net.IP.String(), strconv.Itoa(k.port))
	if err := netns.Do(netlab.Path(k.node.Net.NetNS), func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return fmt.Errorf("kubelet API of %s on %s: %w", k.node.Name, addr, err)
	}
	srv := &http.Server{
		Handler:           k.handler,
		ReadHeaderTimeout: 30 * time.Second,
		// Client certificates are asked for and checked by the
		// authenticator, which also takes bearer tokens.
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12},
		// HTTP/2 off: SPDY and WebSocket upgrades need HTTP/1.1.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(l, "", "") }()
	k.log.Info("Serving the kubelet API", "node", k.node.Name, "address", addr)
	select {
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	case err := <-errc:
		return err
	}
}

// nodeRuntime is one node's view of the simulator's Pods, for its API.
type nodeRuntime struct {
	r    *podReconciler
	node string
}

var _ server.Runtime = (*nodeRuntime)(nil)

func (n *nodeRuntime) find(ref server.PodRef) (*runningPod, error) {
	n.r.mu.Lock()
	defer n.r.mu.Unlock()
	run := n.r.pods[client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}]
	if run == nil || run.node != n.node || (ref.UID != "" && string(run.uid) != ref.UID) {
		return nil, fmt.Errorf("pod %s not found on node %s: %w", ref, n.node, server.ErrPodNotFound)
	}
	return run, nil
}

func (n *nodeRuntime) running(ref server.PodRef, name string) (*container.Container, error) {
	run, err := n.find(ref)
	if err != nil {
		return nil, err
	}
	return run.rt.Running(name)
}

func (n *nodeRuntime) Exec(ctx context.Context, ref server.PodRef, name string, cmd []string, eio container.ExecIO) (int32, error) {
	proc, err := n.running(ref, name)
	if err != nil {
		return 0, err
	}
	return proc.Exec(ctx, cmd, eio)
}

func (n *nodeRuntime) Attach(ctx context.Context, ref server.PodRef, name string, eio container.ExecIO) error {
	proc, err := n.running(ref, name)
	if err != nil {
		return err
	}
	return proc.Attach(ctx, eio)
}

// PortForward connects stream to port on the Pod's loopback, from inside
// its network namespace, as the container runtime does.
func (n *nodeRuntime) PortForward(ctx context.Context, ref server.PodRef, port int32, stream io.ReadWriteCloser) error {
	run, err := n.find(ref)
	if err != nil {
		return err
	}
	path := ""
	n.r.mu.Lock()
	if run.net != nil {
		path = netlab.Path(run.net.NetNS)
	} else if node := n.r.nodes[run.node]; node != nil {
		path = netlab.Path(node.Net.NetNS)
	}
	n.r.mu.Unlock()
	dial := netns.DialContext(path)
	conn, err := dial(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	if err != nil {
		if conn, err = dial(ctx, "tcp6", net.JoinHostPort("::1", strconv.Itoa(int(port)))); err != nil {
			return fmt.Errorf("failed to connect to localhost:%d inside namespace of pod %s: %w", port, ref, err)
		}
	}
	defer conn.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	})
	_, err = io.Copy(stream, conn)
	wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (n *nodeRuntime) LogFile(ref server.PodRef, name string, previous bool) (string, func() bool, error) {
	run, err := n.find(ref)
	if err != nil {
		return "", nil, err
	}
	path, _, err := run.rt.LogFile(name, previous)
	if err != nil {
		return "", nil, err
	}
	if previous {
		return path, func() bool { return false }, nil
	}
	return path, func() bool { return run.rt.ContainerRunning(name) }, nil
}

// Pods are the Pods bound to the node, from the simulator's cache.
func (n *nodeRuntime) Pods() []corev1.Pod {
	var list corev1.PodList
	if err := n.r.c.List(context.Background(), &list); err != nil {
		return nil
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Spec.NodeName == n.node {
			out = append(out, p)
		}
	}
	return out
}

// metrics serves a few of the kubelet's gauges in the Prometheus text
// format: the Pods and containers the node runs.
func (n *nodeRuntime) metrics(w http.ResponseWriter, _ *http.Request) {
	n.r.mu.Lock()
	pods := 0
	for _, run := range n.r.pods {
		if run.node == n.node && !run.finished {
			pods++
		}
	}
	n.r.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# HELP kubelet_running_pods Number of pods that have a running pod sandbox\n# TYPE kubelet_running_pods gauge\nkubelet_running_pods %d\n", pods)
}

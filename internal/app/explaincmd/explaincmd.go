// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package explaincmd is `svcnet explain` (and `kubectl svcnet explain`):
// why a Service does or does not answer, hop by hop, from a chosen
// client. It reads the cluster and writes nothing.
package explaincmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/internal/app/cli"
	"github.com/svcnet-io/svcnet/internal/explain"
	"github.com/svcnet-io/svcnet/internal/lbclass"
	"github.com/svcnet-io/svcnet/internal/nodeview"
	"github.com/svcnet-io/svcnet/internal/platform/restconfig"
	"github.com/svcnet-io/svcnet/internal/platform/scheme"
)

// Exit statuses: the path works, it is broken (the report says where),
// or the report could not be made.
const (
	exitBroken = 1
	exitError  = 2
)

// options are explain's flags.
type options struct {
	kubeconfig string
	namespace  string
	fromPod    string
	node       string
	external   bool
	clientIP   string
	output     string
	serve      lbclass.Selection
	// agentPort is where the nodes' agents serve their API; 0 reads none.
	agentPort     int
	agentInsecure bool
	// clusterDomain is the domain cluster DNS serves; askDNS whether to
	// ask it (askDNSAuto: where explain runs in a Pod or on a node).
	clusterDomain string
	askDNS        string
}

// --ask-dns values.
const (
	askDNSAuto   = "auto"
	askDNSAlways = "always"
	askDNSNever  = "never"
)

// NewCommand is `explain`.
func NewCommand() *cobra.Command {
	o := &options{namespace: metav1.NamespaceDefault, output: "text", serve: lbclass.DefaultSelection(), agentPort: nodeview.DefaultPort, clusterDomain: "cluster.local", askDNS: askDNSAuto}
	cmd := &cobra.Command{
		Use:   "explain svc/NAME",
		Short: "Say why a Service answers or not: every hop from a client to its Pods, and the first that breaks (reads, never writes)",
		Long: `Follows the path of a connection to a Service, hop by hop: the name (what
cluster DNS answers), the Service (type, ports, policies, addresses), the
Pods its selector matches (Ready, ports), its EndpointSlices, the client's
node (internalTrafficPolicy, and what that node's svcnet agent says its
rules hold: the endpoints each port sends to, whether they are current),
and, from outside, the nodePorts, loadBalancerSourceRanges and which node
announces its LoadBalancer address; then the Service's Warning Events. It
ends with the first hop that breaks and what to change. Everything is read
from the API server and the client node's agent (its API on the node's
address, port --agent-port, with your credentials: it needs get on
nodes/proxy of that node); nothing is written.

Exit status: 0 when the path works, 1 when it is broken, 2 when the report
could not be made (a client that does not exist, an API server that does
not answer).`,
		Example: `  # From any Pod:
  svcnet explain svc/web -n shop
  # From a given Pod (its node's policies apply), as data:
  svcnet explain svc/web -n shop --from pod/client -o json
  # From outside, to one node's nodePort, from a client address:
  svcnet explain svc/web -n shop --external --node node-3 --client-ip 203.0.113.7
  # As a kubectl plugin (kubectl-svcnet on the PATH):
  kubectl svcnet explain svc/web -n shop`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; default: $KUBECONFIG, ~/.kube/config or the in-cluster configuration.")
	f.StringVarP(&o.namespace, "namespace", "n", o.namespace, "The Service's namespace (and the client Pod's).")
	f.StringVar(&o.fromPod, "from", "", "The client: pod/NAME, a Pod in the namespace. Unset: any Pod.")
	f.StringVar(&o.node, "node", "", "The client's node: its own programs (hostNetwork), or with --external the node whose nodePort the client reaches.")
	f.BoolVar(&o.external, "external", false, "The client is outside the cluster.")
	f.StringVar(&o.clientIP, "client-ip", "", "With --external: the client's address, checked against loadBalancerSourceRanges.")
	f.StringVarP(&o.output, "output", "o", o.output, "text or json.")
	f.StringVar(&o.clusterDomain, "cluster-domain", o.clusterDomain, "The cluster's DNS domain, under which cluster DNS is asked for the Service's name.")
	f.StringVar(&o.askDNS, "ask-dns", o.askDNS, "For a Pod client, ask cluster DNS (kube-dns's ClusterIP, port 53) for the Service's name from where explain runs: auto (when explain runs in a Pod or on a node), always, never.")
	f.IntVar(&o.agentPort, "agent-port", o.agentPort, "Port of the svcnet agents' API on the nodes' addresses; 0 does not read the agents (nodes that kube-proxy runs).")
	f.BoolVar(&o.agentInsecure, "agent-insecure-skip-tls-verify", false, "Accept an agent's serving certificate without checking it against the kubeconfig's CA (agents with their own self-signed certificate), as kube-apiserver accepts kubelets' by default.")
	o.serve.AddFlags(f, "the LoadBalancer class svcnet's manager serves")
	return cmd
}

func (o *options) run(cmd *cobra.Command, arg string) error {
	key, from, err := o.parse(arg)
	if err != nil {
		return &cli.ExitError{Code: exitError, Err: err}
	}
	cfg, err := restconfig.Load(o.kubeconfig, "")
	if err != nil {
		return &cli.ExitError{Code: exitError, Err: err}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return &cli.ExitError{Code: exitError, Err: err}
	}
	in, err := explain.Gather(cmd.Context(), c, key, from, o.serve)
	if err != nil {
		return &cli.ExitError{Code: exitError, Err: err}
	}
	if o.askDNS == askDNSAlways || (o.askDNS == askDNSAuto && in.OnClusterNetwork(os.Getenv("KUBERNETES_SERVICE_HOST") != "", localAddrs())) {
		in.AskDNS(cmd.Context(), o.clusterDomain)
	}
	if o.agentPort != 0 {
		agents, err := nodeview.NewClient(cfg, o.agentPort, o.agentInsecure)
		if err != nil {
			return &cli.ExitError{Code: exitError, Err: err}
		}
		in.ReadAgent(cmd.Context(), agents)
	}
	r := explain.Analyze(in)
	if err := o.write(cmd.OutOrStdout(), r); err != nil {
		return &cli.ExitError{Code: exitError, Err: err}
	}
	if !r.Works {
		return &cli.ExitError{Code: exitBroken}
	}
	return nil
}

// parse checks the flags and the Service argument.
func (o *options) parse(arg string) (types.NamespacedName, explain.From, error) {
	var from explain.From
	name, ok := strings.CutPrefix(arg, "svc/")
	if !ok {
		name, ok = strings.CutPrefix(arg, "service/")
	}
	if !ok && strings.Contains(arg, "/") {
		return types.NamespacedName{}, from, fmt.Errorf("%q: name a Service as svc/NAME", arg)
	}
	if name == "" {
		return types.NamespacedName{}, from, errors.New("no Service named: svc/NAME")
	}
	if o.output != "text" && o.output != "json" {
		return types.NamespacedName{}, from, fmt.Errorf("-o %s: text or json", o.output)
	}
	switch {
	case o.fromPod != "" && o.external:
		return types.NamespacedName{}, from, errors.New("--from and --external name two clients: give one")
	case o.fromPod != "" && o.node != "":
		return types.NamespacedName{}, from, errors.New("--from pod/NAME runs on the Pod's node: leave out --node")
	case o.askDNS != askDNSAuto && o.askDNS != askDNSAlways && o.askDNS != askDNSNever:
		return types.NamespacedName{}, from, fmt.Errorf("--ask-dns %q: auto, always or never", o.askDNS)
	case o.agentPort < 0 || o.agentPort > 65535:
		return types.NamespacedName{}, from, fmt.Errorf("--agent-port %d: a port, or 0", o.agentPort)
	case o.clientIP != "" && !o.external:
		return types.NamespacedName{}, from, errors.New("--client-ip is the address of an outside client: add --external")
	}
	if o.fromPod != "" {
		pod, ok := strings.CutPrefix(o.fromPod, "pod/")
		if !ok || pod == "" {
			return types.NamespacedName{}, from, fmt.Errorf("--from %q: give pod/NAME", o.fromPod)
		}
		from.Pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: o.namespace, Name: pod}}
	}
	from.Node, from.External = o.node, o.external
	if o.clientIP != "" {
		ip, err := netip.ParseAddr(o.clientIP)
		if err != nil {
			return types.NamespacedName{}, from, fmt.Errorf("--client-ip %q: %w", o.clientIP, err)
		}
		from.ClientIP = ip
	}
	return types.NamespacedName{Namespace: o.namespace, Name: name}, from, nil
}

func (o *options) write(w io.Writer, r explain.Report) error {
	if o.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return explain.Text(w, r)
}

// localAddrs are this machine's addresses, in the namespace explain runs.
func localAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}

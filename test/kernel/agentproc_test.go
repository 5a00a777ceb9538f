// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2/textlogger"

	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
)

// forwardAPIServer makes the API server, on this namespace's loopback,
// reachable at the same address inside node n.
func (c *cluster) forwardAPIServer(t *testing.T, n *netlab.Node) {
	t.Helper()
	u, err := url.Parse(c.env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.lab.Forward(n.NetNS, u.Host, u.Host); err != nil {
		t.Fatal(err)
	}
}

// agentProcessEnv makes this test binary run `svcnet agent`
// (agentProcess) or `svcnet kube-proxy` (kubeProxyProcess) with its
// arguments instead of the tests: agents that a test can SIGKILL.
const agentProcessEnv = "SVCNET_KERNEL_AGENT_PROCESS"

// agentProcessEnv's values.
const (
	agentProcess     = "1"
	kubeProxyProcess = "kube-proxy"
)

func runAgentProcess(opts agent.Options, args []string) int {
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	opts.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	agentCfg, err := opts.Complete()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(2)))
	if err := agent.Main(ctx, agentCfg, log); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startInNode starts this test binary as an agent process (its
// agentProcessEnv set to kind) in node n's network namespace, writing its
// output to out and killed if the test process dies.
func startInNode(t *testing.T, n *netlab.Node, kind string, out io.Writer, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), agentProcessEnv+"="+kind)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := netns.Do(netlab.Path(n.NetNS), cmd.Start); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// startAgentProcess runs node n's agent as a process inside n's network
// namespace, as a DaemonSet Pod with hostNetwork runs (its BGP speaker
// then dials its peers from the node), reaching the API server through a
// forwarder (forwardAPIServer); it logs to the cluster's log folder and is
// killed at cleanup. Flags in extra override the defaults.
func (c *cluster) startAgentProcess(t *testing.T, n *netlab.Node, kubeconfig string, extra ...string) *exec.Cmd {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(c.logDir, n.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	args := append([]string{"--kubeconfig", kubeconfig, "--node-name", n.Name, "--mode", c.mode,
		"--cluster-cidr", "10.244.0.0/16", "--healthz-bind-address", "0", "--metrics-bind-address", "0", "--conntrack-max-per-core=0"}, extra...)
	cmd := startInNode(t, n, agentProcess, log, args...)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return cmd
}

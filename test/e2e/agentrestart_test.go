// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svcnet-io/svcnet/localcluster/up"
	"github.com/svcnet-io/svcnet/test/builder"
	"github.com/svcnet-io/svcnet/test/harness/proctree"
)

// agentRestartTimeout bounds the wait for a killed agent to be back and
// programming its node (its first restart comes a second after it died).
const agentRestartTimeout = time.Minute

// TestUpAgentRestart kills one node's agent with SIGKILL, as a failover
// drill does, and checks that svcnet up carries on as a kubelet would: the
// control plane, the manager and the other node's agent keep running
// untouched, the agent is restarted, reported on svcnet up's output and
// as a Warning Event on its Node, and programs its node again.
func TestUpAgentRestart(t *testing.T) {
	requireNetns(t)
	ctx := context.Background()
	dataDir := t.TempDir()
	args := upArgs(t, dataDir)
	args[1] = "--nodes=2"
	u := startUp(t, append(args, "--dns=false"))

	killed := agentPID(t, u, "node-1")
	others := stableDescendants(u.cmd.Process.Pid, killed)
	if err := syscall.Kill(killed, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, u, "svcnet agent on node-1 stopped (signal: killed); restarting it", agentRestartTimeout)
	var restarted int
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, agentRestartTimeout, true, func(context.Context) (bool, error) {
		restarted = findAgent(u, "node-1")
		return restarted != 0 && restarted != killed, nil
	}); err != nil {
		t.Fatalf("node-1's agent was not started again:\n%s", u.out)
	}
	for _, pid := range others {
		if !alive(pid) {
			t.Errorf("process %d (%s) below svcnet up stopped when node-1's agent was killed", pid, cmdline(pid))
		}
	}

	// The restarted agent programs its node: a Service created now shows
	// in node-1's table (a Service without endpoints is one element of
	// no-endpoint-services, commented with its name).
	c := kubeClient(t, dataDir)
	svc := builder.Service("after-restart", "default").Port("http", 80, intstr.FromInt32(8080)).Selector("app", "none").Obj()
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, agentRestartTimeout, true, func(ctx context.Context) (bool, error) {
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", "svcnet-node-1", "nft", "list", "table", "ip", "svcnet").Output()
		return err == nil && strings.Contains(string(out), `"default/after-restart:http"`), nil
	}); err != nil {
		t.Fatalf("node-1's restarted agent did not program Service after-restart: %v", err)
	}

	var events corev1.EventList
	if err := c.List(ctx, &events, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(events.Items, func(e corev1.Event) bool {
		return e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == "node-1" && e.Reason == up.ProxyRestartedReason && e.Type == corev1.EventTypeWarning
	}) {
		t.Errorf("no %s Warning Event on Node node-1 among %d Events", up.ProxyRestartedReason, len(events.Items))
	}
	stopUp(t, u)
}

// agentPID is the pid of node's svcnet agent below svcnet up.
func agentPID(t *testing.T, u *upProcess, node string) int {
	t.Helper()
	pid := findAgent(u, node)
	if pid == 0 {
		t.Fatalf("no svcnet agent for %s below svcnet up (pid %d)", node, u.cmd.Process.Pid)
	}
	return pid
}

// findAgent is the pid of node's svcnet agent below svcnet up, or 0.
func findAgent(u *upProcess, node string) int {
	for _, pid := range proctree.Descendants(u.cmd.Process.Pid) {
		args := strings.Split(cmdline(pid), " ")
		if slices.Contains(args, "agent") && slices.Contains(args, "--node-name="+node) {
			return pid
		}
	}
	return 0
}

// stableDescendants are the processes below pid, but skip, that are
// there at two looks a second apart with the same command line: the
// children that run for the whole session, not a short command caught
// as it starts or ends (its command line then reads empty).
func stableDescendants(pid, skip int) []int {
	first := map[int]string{}
	for _, p := range proctree.Descendants(pid) {
		if c := cmdline(p); p != skip && c != "" && longLived(p) {
			first[p] = c
		}
	}
	time.Sleep(time.Second)
	var out []int
	for _, p := range proctree.Descendants(pid) {
		if c, ok := first[p]; ok && cmdline(p) == c {
			out = append(out, p)
		}
	}
	return out
}

// longLived tells the children that run for the whole session (the
// control plane, the manager, the agents, the Pods' programs) from the
// short commands the agents run (nft, iptables-restore, ip).
func longLived(pid int) bool {
	args := strings.Split(cmdline(pid), " ")
	name := args[0][strings.LastIndex(args[0], "/")+1:]
	return !slices.Contains([]string{"nft", "iptables-restore", "iptables-save", "ip6tables-restore", "ip6tables-save", "ip", "conntrack", "iptables", "ip6tables"}, name)
}

// cmdline is pid's command line, arguments separated by spaces.
func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

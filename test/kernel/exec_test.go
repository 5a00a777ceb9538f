// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package kernel

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/svcnet-io/svcnet/dataplane/agent"
	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/dataplane/model"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
	"github.com/svcnet-io/svcnet/localcluster/netlab"
	"github.com/svcnet-io/svcnet/test/builder"
)

// The agent programs a simulated node's namespace by starting iptables
// from a thread inside it: the rules land there and nowhere else.
func TestExecInNamespace(t *testing.T) {
	requireKernel(t)
	ctx := context.Background()
	node, other := netlab.Path("svcnet-exec-node"), netlab.Path("svcnet-exec-other")
	for _, p := range []string{node, other} {
		if err := netns.Create(p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = netns.Delete(p) })
	}
	in := "*nat\n:KUBE-EXEC-TEST - [0:0]\n-A KUBE-EXEC-TEST -p tcp -j DNAT --to-destination 10.1.0.1:80\nCOMMIT\n"
	if err := iptables.NewExec(corev1.IPv4Protocol, node).Restore(ctx, []byte(in)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ns   string
		want bool
	}{{node, true}, {other, false}, {"", false}} {
		save, err := iptables.NewExec(corev1.IPv4Protocol, c.ns).Save(ctx, "nat")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(save), "-A KUBE-EXEC-TEST -p tcp -j DNAT --to-destination 10.1.0.1:80"); got != c.want {
			t.Errorf("namespace %q holds the rule: %v, want %v; its nat table:\n%s", c.ns, got, c.want, save)
		}
	}
	// A failed restore names the binary and keeps iptables' message.
	err := iptables.NewExec(corev1.IPv4Protocol, node).Restore(ctx, []byte("*nat\n-A NO-SUCH-CHAIN -j ACCEPT\nCOMMIT\n"))
	if err == nil || !strings.Contains(err.Error(), "iptables-restore") || !strings.Contains(err.Error(), "line") {
		t.Errorf("restore of a rule in a missing chain: got %v, want an error naming iptables-restore and the line", err)
	}
	if err := iptables.NewExec(corev1.IPv4Protocol, netlab.Path("svcnet-exec-missing")).Restore(ctx, []byte(in)); err == nil {
		t.Error("restore into a missing namespace succeeded")
	}
}

// `svcnet agent --cleanup` on a node that ran the agent: every chain and
// jump of the agent's mode goes, another program's rules stay.
func TestAgentCleanup(t *testing.T) {
	requireKernel(t)
	ctx := context.Background()
	node := netlab.Path("svcnet-cleanup-node")
	if err := netns.Create(node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Delete(node) })
	ipt := iptables.NewExec(corev1.IPv4Protocol, node)
	foreign := "*filter\n:OTHER-CHAIN - [0:0]\n-A OTHER-CHAIN -j ACCEPT\n-A INPUT -j OTHER-CHAIN\nCOMMIT\n"
	if err := ipt.Restore(ctx, []byte(foreign)); err != nil {
		t.Fatal(err)
	}
	svc := builder.Service("web", "ns").Port("http", 80, intstr.FromInt32(8080)).ClusterIPs("10.96.0.10").Obj()
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Namespace: "ns", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	m := model.Build(corev1.IPv4Protocol, model.Node{Name: "node-1"}, []*corev1.Service{svc},
		map[types.NamespacedName][]*discoveryv1.EndpointSlice{{Namespace: "ns", Name: "web"}: {slice}}, model.Options{})
	if _, err := iptables.NewSyncer(ipt).Sync(ctx, iptables.Render(m, iptables.Config{})); err != nil {
		t.Fatal(err)
	}
	saveAll := func() string {
		t.Helper()
		var all strings.Builder
		for _, table := range []string{"filter", "nat"} {
			save, err := ipt.Save(ctx, table)
			if err != nil {
				t.Fatal(err)
			}
			all.Write(save)
		}
		return all.String()
	}
	if !strings.Contains(saveAll(), "KUBE-SEP-") {
		t.Fatal("the agent's rules were not programmed")
	}

	opts := agent.DefaultOptions()
	opts.NetNS, opts.NodeName = node, "node-1"
	opts.Conntrack.MaxPerCore = 0 // nf_conntrack_max is the host's
	cfg, err := opts.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Cleanup(ctx, cfg, logr.Discard()); err != nil {
		t.Fatal(err)
	}
	after := saveAll()
	if strings.Contains(after, "KUBE-") {
		t.Errorf("KUBE- chains or jumps left after cleanup:\n%s", after)
	}
	for _, want := range []string{"-A OTHER-CHAIN -j ACCEPT", "-A INPUT -j OTHER-CHAIN"} {
		if !strings.Contains(after, want) {
			t.Errorf("cleanup removed another program's rule %q:\n%s", want, after)
		}
	}
}

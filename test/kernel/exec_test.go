package kernel

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/svcnet-io/svcnet/dataplane/iptables"
	"github.com/svcnet-io/svcnet/internal/localcluster/netlab"
	"github.com/svcnet-io/svcnet/internal/platform/netns"
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

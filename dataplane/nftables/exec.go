package nftables

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcnet-io/svcnet/internal/platform/netns"
)

// NewInterface returns knftables' real implementation (the nft binary) for
// a family's table. A non-empty netnsPath (such as /run/netns/<name>) runs
// nft in that network namespace, which is how one process programs
// simulated nodes.
func NewInterface(f corev1.IPFamily, table, netnsPath string) (knftables.Interface, error) {
	var nft knftables.Interface
	err := netns.Do(netnsPath, func() error {
		var err error
		nft, err = knftables.New(familyOf(f).nft, table)
		return err
	})
	if err != nil {
		return nil, err
	}
	path, err := exec.LookPath("nft")
	if err != nil {
		return nil, err
	}
	if netnsPath == "" {
		return &batching{Interface: nft, nft: path}, nil
	}
	return &inNetNS{Interface: &batching{Interface: nft, nft: path, netns: netnsPath}, path: netnsPath}, nil
}

// batching runs a transaction with `nft -f -` as knftables does, but with
// consecutive element commands of one set merged into one command: nft
// parses one command of a thousand elements far faster than a thousand
// commands, which is most of a cold sync's time at 10,000 Services.
type batching struct {
	knftables.Interface
	nft   string
	netns string
}

func (b *batching) Run(ctx context.Context, tx *knftables.Transaction) error {
	cmd := exec.CommandContext(ctx, b.nft, "-f", "-")
	cmd.Stdin = strings.NewReader(mergeElements(tx.String(), maxBatch))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := netns.Run(b.netns, cmd); err != nil {
		return fmt.Errorf("nft -f: %w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// maxBatch bounds the elements of one merged command.
const maxBatch = 1000

// mergeElements merges runs of "add element" (or "delete element") lines
// naming the same set into lines of at most max elements each; every other
// line, and the order of everything, stays.
func mergeElements(text string, max int) string {
	var b strings.Builder
	var head string
	var elems []string
	flush := func() {
		if len(elems) > 0 {
			b.WriteString(head + " { " + strings.Join(elems, ", ") + " }\n")
		}
		elems = elems[:0]
	}
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		h, body, ok := splitElementLine(line)
		if !ok {
			flush()
			b.WriteString(line + "\n")
			continue
		}
		if h != head || len(elems) == max {
			flush()
			head = h
		}
		elems = append(elems, body)
	}
	flush()
	return b.String()
}

// splitElementLine cuts "add element ip t s { k : v }" into its command
// and set ("add element ip t s") and its element ("k : v").
func splitElementLine(line string) (string, string, bool) {
	if !strings.HasPrefix(line, "add element ") && !strings.HasPrefix(line, "delete element ") {
		return "", "", false
	}
	head, rest, ok := strings.Cut(line, " { ")
	if !ok || !strings.HasSuffix(rest, " }") {
		return "", "", false
	}
	return head, strings.TrimSuffix(rest, " }"), true
}

// inNetNS runs knftables' checks and listings in a network namespace;
// transactions go through batching, which starts nft there itself.
type inNetNS struct {
	knftables.Interface
	path string
}

func (n *inNetNS) Check(ctx context.Context, tx *knftables.Transaction) error {
	return netns.Do(n.path, func() error { return n.Interface.Check(ctx, tx) })
}

func (n *inNetNS) List(ctx context.Context, objectType string) (out []string, err error) {
	err = netns.Do(n.path, func() error {
		out, err = n.Interface.List(ctx, objectType)
		return err
	})
	return out, err
}

func (n *inNetNS) ListRules(ctx context.Context, chain string) (out []*knftables.Rule, err error) {
	err = netns.Do(n.path, func() error {
		out, err = n.Interface.ListRules(ctx, chain)
		return err
	})
	return out, err
}

func (n *inNetNS) ListElements(ctx context.Context, objectType, name string) (out []*knftables.Element, err error) {
	err = netns.Do(n.path, func() error {
		out, err = n.Interface.ListElements(ctx, objectType, name)
		return err
	})
	return out, err
}

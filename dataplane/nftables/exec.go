package nftables

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
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
	b := &batching{Interface: nft, nft: path, family: familyOf(f).nft, table: table, netns: netnsPath}
	if netnsPath == "" {
		return b, nil
	}
	return &inNetNS{batching: b, path: netnsPath}, nil
}

// batching runs a transaction with `nft -f -` as knftables does, but with
// consecutive element commands of one set merged into one command: nft
// parses one command of a thousand elements far faster than a thousand
// commands, which is most of a cold sync's time at 10,000 Services.
type batching struct {
	knftables.Interface
	nft    string
	family knftables.Family
	table  string
	netns  string
}

func (b *batching) Run(ctx context.Context, tx *knftables.Transaction) error {
	return b.RunWithElements(ctx, tx, nil)
}

// RunWithElements implements elementStreamer: tx's commands, then the
// elements addElements writes, go to nft's input as they are produced.
func (b *batching) RunWithElements(ctx context.Context, tx *knftables.Transaction, addElements func(*elementWriter)) error {
	cmd := exec.CommandContext(ctx, b.nft, "-f", "-")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := netns.Do(b.netns, cmd.Start); err != nil {
		stdin.Close()
		return fmt.Errorf("nft -f: %w", err)
	}
	// A write fails only when nft has stopped reading; its exit says why.
	werr := b.write(stdin, tx, addElements)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("nft -f: %w: %s", err, strings.TrimSpace(out.String()))
	}
	if werr != nil {
		return fmt.Errorf("nft -f: writing its input: %w", werr)
	}
	return nil
}

func (b *batching) write(stdin io.WriteCloser, tx *knftables.Transaction, addElements func(*elementWriter)) error {
	w := bufio.NewWriterSize(stdin, 64<<10)
	_, err := w.WriteString(mergeElements(tx.String(), maxBatch))
	if err == nil && addElements != nil {
		ew := &elementWriter{w: w, family: b.family, table: b.table}
		addElements(ew)
		err = ew.close()
	}
	if err == nil {
		err = w.Flush()
	}
	return errors.Join(err, stdin.Close())
}

// elementStreamer runs a transaction followed by elements written straight
// into nft's input. A full sync at 10,000 Services adds hundreds of
// thousands of elements; held as knftables operations and then as text
// they were most of the agent's peak memory (docs/BENCHMARKS.md).
type elementStreamer interface {
	RunWithElements(ctx context.Context, tx *knftables.Transaction, addElements func(*elementWriter)) error
}

// elementWriter writes "add element" commands the way knftables does,
// with consecutive elements of one set merged as mergeElements merges
// them. The first write error sticks and is returned by close.
type elementWriter struct {
	w      *bufio.Writer
	family knftables.Family
	table  string
	set    string // the set of the open command, "" when none is open
	n      int    // elements in the open command
	quoted []byte // room for a quoted comment, reused
	err    error
}

// add writes one element; value is written only for a map's element.
func (e *elementWriter) add(set, key string, w wanted, isMap bool) {
	if e.err != nil {
		return
	}
	if set != e.set || e.n == maxBatch {
		e.end()
		e.str("add element " + string(e.family) + " " + e.table + " " + set + " { ")
		e.set = set
	} else {
		e.str(", ")
	}
	e.n++
	e.str(key)
	if w.comment != "" {
		e.str(" comment ")
		e.quoted = strconv.AppendQuote(e.quoted[:0], w.comment)
		if e.err == nil {
			_, e.err = e.w.Write(e.quoted)
		}
	}
	if isMap {
		e.str(" : ")
		e.str(w.value)
	}
}

// end closes the open command.
func (e *elementWriter) end() {
	if e.set != "" {
		e.str(" }\n")
	}
	e.set, e.n = "", 0
}

func (e *elementWriter) str(s string) {
	if e.err == nil {
		_, e.err = e.w.WriteString(s)
	}
}

func (e *elementWriter) close() error {
	e.end()
	return e.err
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
	*batching
	path string
}

func (n *inNetNS) Check(ctx context.Context, tx *knftables.Transaction) error {
	return netns.Do(n.path, func() error { return n.batching.Check(ctx, tx) })
}

func (n *inNetNS) List(ctx context.Context, objectType string) (out []string, err error) {
	err = netns.Do(n.path, func() error {
		out, err = n.batching.List(ctx, objectType)
		return err
	})
	return out, err
}

func (n *inNetNS) ListRules(ctx context.Context, chain string) (out []*knftables.Rule, err error) {
	err = netns.Do(n.path, func() error {
		out, err = n.batching.ListRules(ctx, chain)
		return err
	})
	return out, err
}

func (n *inNetNS) ListElements(ctx context.Context, objectType, name string) (out []*knftables.Element, err error) {
	err = netns.Do(n.path, func() error {
		out, err = n.batching.ListElements(ctx, objectType, name)
		return err
	})
	return out, err
}

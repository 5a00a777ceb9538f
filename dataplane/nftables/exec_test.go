package nftables

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/knftables"
)

// TestElementWriterWritesWhatKnftablesWrites checks that the elements a
// full sync streams into nft are, byte for byte, what knftables writes for
// the same elements once mergeElements has merged them: runs of one set,
// a run longer than one command holds, comments that need quoting, set and
// map elements.
func TestElementWriterWritesWhatKnftablesWrites(t *testing.T) {
	type el struct {
		set, key string
		w        wanted
		isMap    bool
	}
	var els []el
	for i := range maxBatch + 5 {
		els = append(els, el{set: "cluster-ips", key: fmt.Sprintf("10.96.%d.%d . tcp . 80", i/256, i%256), w: wanted{comment: fmt.Sprintf("ns/svc%d:http", i)}})
	}
	els = append(els,
		el{set: "endpoints-tcp-2", key: "10.96.0.1 . tcp . 80 . 0", w: wanted{value: "10.244.1.2 . 8080", comment: `ns/odd "name":port`}, isMap: true},
		el{set: "endpoints-tcp-2", key: "10.96.0.1 . tcp . 80 . 1", w: wanted{value: "10.244.1.3 . 8080"}, isMap: true},
		el{set: "hairpin", key: "10.244.1.2 . 10.244.1.2"},
		el{set: "endpoints-tcp-2", key: "10.96.0.2 . tcp . 80 . 0", w: wanted{value: "10.244.1.4 . 8080", comment: "ns/b:http"}, isMap: true},
	)

	tx := knftables.NewFake(knftables.IPv4Family, TableName).NewTransaction()
	for _, e := range els {
		tx.Add(elemID{e.set, e.key}.knftWith(e.w, e.isMap))
	}
	want := mergeElements(tx.String(), maxBatch)

	var b strings.Builder
	bw := bufio.NewWriter(&b)
	ew := &elementWriter{w: bw, family: knftables.IPv4Family, table: TableName}
	for _, e := range els {
		ew.add(e.set, e.key, e.w, e.isMap)
	}
	if err := ew.close(); err != nil {
		t.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("streamed elements differ from knftables' (-knftables +streamed):\n%s", diff)
	}
	if got := strings.Count(b.String(), "\n"); got != 5 {
		t.Errorf("%d commands, want 5: two for cluster-ips (%d elements), then one per run", got, maxBatch+5)
	}
}

// fakeNFT is a shell script standing in for nft: it gets what batching
// writes on its standard input.
func fakeNFT(t *testing.T, script string) *batching {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nft")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &batching{Interface: knftables.NewFake(knftables.IPv4Family, TableName), nft: path, family: knftables.IPv4Family, table: TableName}
}

// TestRunWithElementsStreamsTheTransactionThenTheElements checks what
// reaches nft: the transaction's commands, then the elements.
func TestRunWithElementsStreamsTheTransactionThenTheElements(t *testing.T) {
	got := filepath.Join(t.TempDir(), "input")
	b := fakeNFT(t, `cat > `+got)
	tx := b.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Set{Name: "hairpin", Type: "ipv4_addr . ipv4_addr"})
	err := b.RunWithElements(context.Background(), tx, func(w *elementWriter) {
		w.add("hairpin", "10.244.1.2 . 10.244.1.2", wanted{}, false)
		w.add("hairpin", "10.244.1.3 . 10.244.1.3", wanted{}, false)
	})
	if err != nil {
		t.Fatal(err)
	}
	input, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	want := tx.String() + "add element ip svcnet hairpin { 10.244.1.2 . 10.244.1.2, 10.244.1.3 . 10.244.1.3 }\n"
	if diff := cmp.Diff(want, string(input)); diff != "" {
		t.Errorf("nft's input (-want +got):\n%s", diff)
	}
}

// TestRunWithElementsReportsWhyNFTStopped: nft refusing its input early
// (its parser stops at the first error, long before a full sync's last
// element) is reported with nft's own message, not as a broken pipe.
func TestRunWithElementsReportsWhyNFTStopped(t *testing.T) {
	b := fakeNFT(t, `head -c 100 > /dev/null; echo "Error: Could not process rule: No such file or directory" >&2; exit 1`)
	tx := b.NewTransaction()
	tx.Add(&knftables.Table{})
	err := b.RunWithElements(context.Background(), tx, func(w *elementWriter) {
		for i := range 200000 {
			w.add("hairpin", fmt.Sprintf("10.%d.%d.%d . 10.0.0.1", i>>16, (i>>8)&255, i&255), wanted{}, false)
		}
	})
	if err == nil || !strings.Contains(err.Error(), "Could not process rule") {
		t.Fatalf("got %v, want nft's message", err)
	}
}

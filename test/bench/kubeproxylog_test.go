// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"
)

// klogText is what klog's text output, kube-proxy's, writes for log.
func klogText(t *testing.T, log func()) string {
	t.Helper()
	var out bytes.Buffer
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	klog.SetOutput(&out)
	defer func() { klog.SetOutput(nil); _ = fs.Set("logtostderr", "true") }()
	log()
	klog.Flush()
	return out.String()
}

// kubeProxyLikeTx is a transaction written the way kube-proxy 1.37's
// nftables proxier writes a Service of two endpoints.
func kubeProxyLikeTx(ips ...string) *knftables.Transaction {
	tx := knftables.NewFake(knftables.IPv4Family, "kube-proxy").NewTransaction()
	tx.Add(&knftables.Chain{Name: "service-ULMVA6XW-bench/svc0/tcp/http"})
	tx.Flush(&knftables.Chain{Name: "service-ULMVA6XW-bench/svc0/tcp/http"})
	var elems []string
	for i, ip := range ips {
		elems = append(elems, knftables.Concat(i, ":", ip, ".", 8080))
		tx.Add(&knftables.Element{Set: "hairpin-connections", Key: []string{ip, ip, "tcp", "8080"}})
	}
	tx.Add(&knftables.Rule{Chain: "service-ULMVA6XW-bench/svc0/tcp/http", Rule: knftables.Concat(
		"meta l4proto tcp dnat ip addr . port to numgen random mod", len(ips), "map {", strings.Join(elems, ", "), "}")})
	return tx
}

// TestLoggedTransactions reads transactions back from klog's own text
// output, as kube-proxy's proxier logs them at V(9), among other lines
// and with one still being written at the end.
func TestLoggedTransactions(t *testing.T) {
	first, second := kubeProxyLikeTx("10.240.0.5", "10.240.0.6"), kubeProxyLikeTx("10.240.0.55", "10.240.0.6")
	log := klogText(t, func() {
		klog.InfoS("Running nftables transaction", "ipFamily", "IPv4", "transaction", first.String())
		klog.InfoS("Deleting stale nftables chains", "numChains", 1)
		klog.InfoS("Running nftables transaction", "ipFamily", "IPv4", "transaction", second.String())
	})
	// The last transaction cut off half-way, as a log being written is.
	cut := log[:strings.LastIndex(log, " >")]

	for _, c := range []struct {
		log  string
		want []string
	}{{log, []string{first.String(), second.String()}}, {cut, []string{first.String()}}} {
		got, n, err := parseLoggedTransactions(strings.NewReader(c.log), "kube-proxy.log")
		if err != nil {
			t.Fatal(err)
		}
		// Reading on from where the complete transactions end finds
		// none of them again.
		if again, _, err := parseLoggedTransactions(strings.NewReader(c.log[n:]), "kube-proxy.log"); err != nil || len(again) != 0 {
			t.Errorf("from byte %d on: %d transactions, %v; want none", n, len(again), err)
		}
		if len(got) != len(c.want) {
			t.Fatalf("read %d transactions, want %d, from:\n%s", len(got), len(c.want), c.log)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("transaction %d read as\n%s\nwant\n%s", i, got[i], c.want[i])
			}
		}
	}

	// Where the cut log's complete transactions end, the whole log holds
	// the second and nothing else: a capture reads on from there.
	_, n, _ := parseLoggedTransactions(strings.NewReader(cut), "kube-proxy.log")
	if later, _, err := parseLoggedTransactions(strings.NewReader(log[n:]), "kube-proxy.log"); err != nil || len(later) != 1 || later[0] != second.String() {
		t.Errorf("from byte %d of the whole log: %q, %v; want the second transaction", n, later, err)
	}

	capture := kubeProxyCapture{}
	if err := capture.markChanges([]string{first.String(), second.String()}, []string{"10.240.0.55"}); err != nil {
		t.Fatal(err)
	}
	if capture.later[0].change != -1 || capture.later[1].change != 0 {
		t.Errorf("10.240.0.55 marked in %+v, want in the second transaction alone", capture.later)
	}
	if err := capture.markChanges([]string{first.String()}, []string{"10.240.0.7"}); err == nil {
		t.Error("a change no transaction writes was not an error")
	}
	if !writesEndpoint("add rule ip kube-proxy x meta l4proto tcp dnat to 10.240.0.9:8080\n", "10.240.0.9") {
		t.Error("a single endpoint's DNAT does not write its endpoint")
	}
}

// TestLoggedRestore reads the input of kube-proxy's first iptables-restore
// back from klog's text output of the bytes, as its iptables proxier
// logs them at V(9), and nothing from a line still being written.
func TestLoggedRestore(t *testing.T) {
	rules := []byte("*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -j KUBE-SVC-NPX46M4PTMTKRN6Y\nCOMMIT\n")
	log := klogText(t, func() {
		klog.InfoS("Syncing iptables rules")
		klog.InfoS("Restoring iptables", "ipFamily", "IPv4", "rules", rules)
		klog.InfoS("Restoring iptables", "ipFamily", "IPv4", "rules", []byte("*filter\nCOMMIT\n"))
	})
	got, err := loggedRestore(strings.NewReader(log), "kube-proxy.log")
	if err != nil || !bytes.Equal(got, rules) {
		t.Fatalf("read %q, %v; want the first restore's input %q, from:\n%s", got, err, rules, log)
	}
	at := strings.Index(log, "Restoring iptables")
	first := log[:at+strings.Index(log[at:], "\n")]
	if got, err := loggedRestore(strings.NewReader(first), "kube-proxy.log"); got != nil || err != nil {
		t.Errorf("a restore's line without its end read as %q, %v", got, err)
	}
}

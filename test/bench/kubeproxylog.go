// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// What kube-proxy itself writes into a node's kernel, read from its log:
// at V(9) (--vmodule=proxier=9) its nftables proxier logs each
// transaction before it runs it, and its iptables proxier the input of
// each iptables-restore. The benchmarks that measure "kube-proxy's
// layout" replay these, so that the rules are kube-proxy's own and not
// a rendering of them.

// startKubeProxy runs kube-proxy in mode on a new node of w, logging to
// a file in dir, with extra flags.
func (w *agentWorld) startKubeProxy(ctx context.Context, root, dir, mode string, extra ...string) (*benchNode, *proc, string, error) {
	n, err := w.addNode(ctx)
	if err != nil {
		return nil, nil, "", err
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := w.env.WriteKubeconfig(kc); err != nil {
		return nil, nil, "", err
	}
	logPath := filepath.Join(dir, "kube-proxy-"+mode+".log")
	argv := append([]string{"ip", "netns", "exec", n.node.NetNS}, kubeProxyArgv(root, kc, n.node.Name, mode, extra...)...)
	p, err := startProc(logPath, argv...)
	if err != nil {
		return nil, nil, "", err
	}
	return n, p, logPath, nil
}

// waitLogged waits until kube-proxy's log, from byte offset from on,
// holds a transaction that writes endpoint ip.
func waitLogged(ctx context.Context, logPath string, from int64, ip string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		txs, _, err := loggedTransactions(logPath, from)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(txs, func(tx string) bool { return writesEndpoint(tx, ip) }) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-proxy logged no transaction writing endpoint %s within a minute (log: %s)", ip, logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// writesEndpoint reports whether a kube-proxy transaction writes a rule
// or element for endpoint ip: in a DNAT map ("<i> : <ip> . <port>"), the
// hairpin set ("<ip> . <ip> . tcp . <port>") or a single endpoint's
// DNAT ("dnat to <ip>:<port>").
func writesEndpoint(tx, ip string) bool {
	return strings.Contains(tx, " "+ip+" ") || strings.Contains(tx, " "+ip+":")
}

// loggedTransactionStart is how kube-proxy's nftables proxier (at V(9))
// begins logging the transaction it is about to run; klog writes the
// multi-line value on the lines that follow, each behind a tab, and
// closes it with a line " >".
const loggedTransactionStart = `"Running nftables transaction"`

// loggedTransactions reads the complete transactions logged from byte
// offset from of a kube-proxy log on, and returns the offset just past
// the last of them, where a later read can start.
func loggedTransactions(logPath string, from int64) ([]string, int64, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, from, err
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return nil, from, err
	}
	txs, n, err := parseLoggedTransactions(f, logPath)
	return txs, from + n, err
}

// parseLoggedTransactions reads the complete transactions of the log
// named name, and how many bytes they and the lines before them take;
// one still being written at its end is not one of them.
func parseLoggedTransactions(f io.Reader, name string) ([]string, int64, error) {
	var txs []string
	var cur *bytes.Buffer
	var read, done int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		read += int64(len(line)) + 1
		switch {
		case cur == nil && strings.Contains(line, loggedTransactionStart) && strings.HasSuffix(line, "transaction=<"):
			cur = &bytes.Buffer{}
		case cur != nil && line == " >":
			txs = append(txs, cur.String())
			cur, done = nil, read
		case cur != nil && strings.HasPrefix(line, "\t"):
			cur.WriteString(line[1:])
			cur.WriteByte('\n')
		case cur != nil:
			return nil, done, fmt.Errorf("%s: a logged transaction has the line %q", name, line)
		}
	}
	return txs, done, sc.Err()
}

// loggedRestoreStart is how kube-proxy's iptables proxier (at V(9))
// logs the input of an iptables-restore before it runs it; klog writes
// the bytes as a quoted string.
const loggedRestoreStart = `"Restoring iptables"`

// loggedRestore is the input of the first iptables-restore logged in
// the log named name, nil while there is none complete.
func loggedRestore(f io.Reader, name string) ([]byte, error) {
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadString('\n')
		if errors.Is(err, io.EOF) {
			// A line without its end is still being written.
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if !strings.Contains(line, loggedRestoreStart) {
			continue
		}
		_, value, ok := strings.Cut(strings.TrimSpace(line), " rules=")
		if !ok {
			return nil, fmt.Errorf("%s: a logged iptables-restore without its rules: %.200s", name, line)
		}
		quoted, err := strconv.QuotedPrefix(value)
		if err == nil {
			value, err = strconv.Unquote(quoted)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: the rules of a logged iptables-restore: %w", name, err)
		}
		return []byte(value), nil
	}
}

// captureKubeProxyIPTables runs kube-proxy in iptables mode on a new node
// of w until it logs the input of its first iptables-restore, and writes
// to path that input with the jumps from the built-in chains kube-proxy
// inserted into its node before it: the ruleset its cold sync writes,
// as one iptables-restore file. It returns where kube-proxy put the rule
// of the Service named service in KUBE-SERVICES.
func captureKubeProxyIPTables(ctx context.Context, root, dir string, w *agentWorld, path, service string) (string, error) {
	n, p, logPath, err := w.startKubeProxy(ctx, root, dir, "iptables", "--iptables-min-sync-period=0", "--vmodule=proxier=9")
	if err != nil {
		return "", err
	}
	defer p.stop()
	deadline := time.Now().Add(agentTimeout)
	var data []byte
	for data == nil {
		f, err := os.Open(logPath)
		if err != nil {
			return "", err
		}
		data, err = loggedRestore(f, logPath)
		f.Close()
		if err != nil {
			return "", err
		}
		if data != nil {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("kube-proxy logged no iptables-restore within %s (log: %s)", agentTimeout, logPath)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
	save, err := w.lab.Run(n.node.NetNS, "iptables-save")
	if err != nil {
		return "", fmt.Errorf("iptables-save in kube-proxy's node: %w: %s", err, firstLines(save, 5))
	}
	full := withBuiltinJumps(data, save)
	if err := os.WriteFile(path, full, 0o644); err != nil {
		return "", err
	}
	return kubeServicesRank(full, service), nil
}

// builtinChains are the chains iptables tables start with.
var builtinChains = []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}

// withBuiltinJumps is an iptables-restore input with the rules of save
// (iptables-save's output) that jump from a built-in chain to one of
// kube-proxy's, each added to its table's section before its COMMIT.
func withBuiltinJumps(restore []byte, save string) []byte {
	jumps := map[string][]string{}
	table := ""
	for _, line := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line
		case strings.HasPrefix(line, "-A ") && strings.Contains(line, " -j KUBE-"):
			chain, _, _ := strings.Cut(strings.TrimPrefix(line, "-A "), " ")
			if slices.Contains(builtinChains, chain) {
				jumps[table] = append(jumps[table], line)
			}
		}
	}
	var out strings.Builder
	table = ""
	for _, line := range strings.SplitAfter(string(restore), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "*") {
			table = trimmed
		}
		if trimmed == "COMMIT" {
			for _, j := range jumps[table] {
				out.WriteString(j + "\n")
			}
		}
		out.WriteString(line)
	}
	return []byte(out.String())
}

// kubeServicesRank says where the first rule of KUBE-SERVICES for the
// Service named service lies among that chain's rules.
func kubeServicesRank(rules []byte, service string) string {
	var n, at int
	for _, line := range strings.Split(string(rules), "\n") {
		if !strings.HasPrefix(line, "-A KUBE-SERVICES ") {
			continue
		}
		n++
		if at == 0 && strings.Contains(line, "/"+service+":") {
			at = n
		}
	}
	if at == 0 {
		return fmt.Sprintf("the Service has no rule among the %d of KUBE-SERVICES", n)
	}
	return fmt.Sprintf("the Service's rule is %d of %d in KUBE-SERVICES", at, n)
}

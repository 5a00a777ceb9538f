// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package iptables

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Fake is an in-memory Interface that understands the subset of
// iptables-restore this package writes (*table, :chain, -A, -I, -D, -X,
// COMMIT) with --noflush semantics, and applies each table atomically.
type Fake struct {
	mu sync.Mutex
	// tables maps table -> chain -> rules.
	tables map[string]map[string][]string
	order  map[string][]string
	// FailNext makes the next Restore fail without changing anything.
	FailNext error
	// FailNextSave makes the next Save fail.
	FailNextSave error
	// Restores counts successful restores; LastRestore is the last input.
	Restores    int
	LastRestore []byte
}

var builtinChains = map[string][]string{
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"mangle": {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
}

// NewFake returns an empty Fake with the built-in chains.
func NewFake() *Fake {
	f := &Fake{tables: map[string]map[string][]string{}, order: map[string][]string{}}
	for t, chains := range builtinChains {
		f.tables[t] = map[string][]string{}
		for _, c := range chains {
			f.tables[t][c] = nil
			f.order[t] = append(f.order[t], c)
		}
	}
	return f
}

// Lock guards the counters for a reader on another goroutine.
func (f *Fake) Lock() { f.mu.Lock() }

// Unlock releases Lock.
func (f *Fake) Unlock() { f.mu.Unlock() }

// Restore implements Interface.
func (f *Fake) Restore(_ context.Context, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.FailNext != nil {
		err := f.FailNext
		f.FailNext = nil
		return err
	}
	st := &fakeRestore{f: f, tables: map[string]map[string][]string{}, order: map[string][]string{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		if err := st.line(sc.Text()); err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
	}
	if st.cur != "" {
		return errors.New("missing COMMIT")
	}
	for t := range st.tables {
		f.tables[t] = st.tables[t]
		f.order[t] = st.order[t]
	}
	f.Restores++
	f.LastRestore = slices.Clone(data)
	return nil
}

// fakeRestore is one restore being staged: the tables it names, copied,
// changed line by line, and swapped in only if every line applies.
type fakeRestore struct {
	f      *Fake
	tables map[string]map[string][]string
	order  map[string][]string
	cur    string
}

func (st *fakeRestore) line(line string) error {
	switch {
	case line == "" || strings.HasPrefix(line, "#"):
	case strings.HasPrefix(line, "*"):
		st.cur = line[1:]
		if _, ok := st.f.tables[st.cur]; !ok {
			return fmt.Errorf("unknown table %q", st.cur)
		}
		st.tables[st.cur] = cloneTable(st.f.tables[st.cur])
		st.order[st.cur] = slices.Clone(st.f.order[st.cur])
	case line == "COMMIT":
		st.cur = ""
	case st.cur == "":
		return fmt.Errorf("%q outside a table", line)
	case strings.HasPrefix(line, ":"):
		name := strings.Fields(line[1:])[0]
		if _, ok := st.tables[st.cur][name]; !ok {
			st.order[st.cur] = append(st.order[st.cur], name)
		}
		st.tables[st.cur][name] = nil
	case strings.HasPrefix(line, "-A ") || strings.HasPrefix(line, "-I "):
		return st.addRule(line)
	case strings.HasPrefix(line, "-D "):
		chain, rule, _ := strings.Cut(line[3:], " ")
		i := slices.Index(st.tables[st.cur][chain], rule)
		if i < 0 {
			return fmt.Errorf("no such rule in %q: %q", chain, rule)
		}
		st.tables[st.cur][chain] = slices.Delete(st.tables[st.cur][chain], i, i+1)
	case strings.HasPrefix(line, "-X "):
		return st.deleteChain(strings.TrimSpace(line[3:]))
	default:
		return fmt.Errorf("unsupported %q", line)
	}
	return nil
}

// addRule appends (-A) or inserts at the top (-I CHAIN 1) a rule whose
// chain and jump target exist.
func (st *fakeRestore) addRule(line string) error {
	fields := strings.SplitN(line, " ", 3)
	if len(fields) < 3 {
		return fmt.Errorf("rule without a body: %q", line)
	}
	chain, rule := fields[1], fields[2]
	table := st.tables[st.cur]
	if _, ok := table[chain]; !ok {
		return fmt.Errorf("no chain %q", chain)
	}
	if fields[0] == "-I" {
		rule = strings.TrimPrefix(rule, "1 ")
		table[chain] = append([]string{rule}, table[chain]...)
	} else {
		table[chain] = append(table[chain], rule)
	}
	if target, ok := jumpTarget(rule); ok {
		if _, exists := table[target]; !exists && !isVerdict(target) {
			return fmt.Errorf("jump to missing chain %q", target)
		}
	}
	return nil
}

// deleteChain deletes a chain that no rule jumps to any more.
func (st *fakeRestore) deleteChain(name string) error {
	for c, rules := range st.tables[st.cur] {
		for _, r := range rules {
			if t, ok := jumpTarget(r); ok && t == name {
				return fmt.Errorf("chain %q is still referenced from %q", name, c)
			}
		}
	}
	delete(st.tables[st.cur], name)
	st.order[st.cur] = slices.DeleteFunc(st.order[st.cur], func(s string) bool { return s == name })
	return nil
}

// Save implements Interface, in iptables-save's layout.
func (f *Fake) Save(_ context.Context, table string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.FailNextSave; err != nil {
		f.FailNextSave = nil
		return nil, err
	}
	return []byte(f.dumpLocked(table)), nil
}

// ChainRules implements Interface.
func (f *Fake) ChainRules(_ context.Context, table, chain string) ([]string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rules, ok := f.tables[table][chain]
	if !ok {
		return nil, false, nil
	}
	out := make([]string, 0, len(rules))
	for _, r := range rules {
		out = append(out, "-A "+chain+" "+r)
	}
	return out, true, nil
}

// Flush empties every chain of a table, as `iptables -t TABLE -F` does.
func (f *Fake) Flush(table string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.tables[table] {
		f.tables[table][c] = nil
	}
}

// Dump returns both tables as iptables-save would print them.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dumpLocked("filter") + f.dumpLocked("nat")
}

func (f *Fake) dumpLocked(table string) string {
	var b strings.Builder
	b.WriteString("*" + table + "\n")
	for _, c := range f.order[table] {
		b.WriteString(":" + c + " - [0:0]\n")
	}
	for _, c := range f.order[table] {
		for _, r := range f.tables[table][c] {
			b.WriteString("-A " + c + " " + r + "\n")
		}
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

func cloneTable(t map[string][]string) map[string][]string {
	out := make(map[string][]string, len(t))
	for k, v := range t {
		out[k] = slices.Clone(v)
	}
	return out
}

func isVerdict(t string) bool {
	switch t {
	case "ACCEPT", "DROP", "REJECT", "RETURN", "DNAT", "SNAT", "MASQUERADE", "MARK":
		return true
	}
	return false
}

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
	// Restores counts successful restores; LastRestore is the last input.
	Restores    int
	LastRestore []byte
}

var builtinChains = map[string][]string{
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
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
	staged := map[string]map[string][]string{}
	stagedOrder := map[string][]string{}
	var cur string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			cur = line[1:]
			if _, ok := f.tables[cur]; !ok {
				return fmt.Errorf("line %d: unknown table %q", n, cur)
			}
			staged[cur] = cloneTable(f.tables[cur])
			stagedOrder[cur] = slices.Clone(f.order[cur])
		case line == "COMMIT":
			cur = ""
		case cur == "":
			return fmt.Errorf("line %d: %q outside a table", n, line)
		case strings.HasPrefix(line, ":"):
			name := strings.Fields(line[1:])[0]
			if _, ok := staged[cur][name]; !ok {
				stagedOrder[cur] = append(stagedOrder[cur], name)
			}
			staged[cur][name] = nil
		case strings.HasPrefix(line, "-A ") || strings.HasPrefix(line, "-I "):
			fields := strings.SplitN(line, " ", 3)
			if len(fields) < 3 {
				return fmt.Errorf("line %d: rule without a body: %q", n, line)
			}
			chain, rule := fields[1], fields[2]
			if _, ok := staged[cur][chain]; !ok {
				return fmt.Errorf("line %d: no chain %q", n, chain)
			}
			if fields[0] == "-I" {
				rule = strings.TrimPrefix(rule, "1 ")
				staged[cur][chain] = append([]string{rule}, staged[cur][chain]...)
			} else {
				staged[cur][chain] = append(staged[cur][chain], rule)
			}
			if target, ok := jumpTarget(rule); ok {
				if _, exists := staged[cur][target]; !exists && !isVerdict(target) {
					return fmt.Errorf("line %d: jump to missing chain %q", n, target)
				}
			}
		case strings.HasPrefix(line, "-D "):
			chain, rule, _ := strings.Cut(line[3:], " ")
			i := slices.Index(staged[cur][chain], rule)
			if i < 0 {
				return fmt.Errorf("line %d: no such rule in %q: %q", n, chain, rule)
			}
			staged[cur][chain] = slices.Delete(staged[cur][chain], i, i+1)
		case strings.HasPrefix(line, "-X "):
			name := strings.TrimSpace(line[3:])
			for c, rules := range staged[cur] {
				for _, r := range rules {
					if t, ok := jumpTarget(r); ok && t == name {
						return fmt.Errorf("line %d: chain %q is still referenced from %q", n, name, c)
					}
				}
			}
			delete(staged[cur], name)
			stagedOrder[cur] = slices.DeleteFunc(stagedOrder[cur], func(s string) bool { return s == name })
		default:
			return fmt.Errorf("line %d: unsupported %q", n, line)
		}
	}
	if cur != "" {
		return errors.New("missing COMMIT")
	}
	for t := range staged {
		f.tables[t] = staged[t]
		f.order[t] = stagedOrder[t]
	}
	f.Restores++
	f.LastRestore = slices.Clone(data)
	return nil
}

// Save implements Interface, in iptables-save's layout.
func (f *Fake) Save(_ context.Context, table string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return []byte(f.dumpLocked(table)), nil
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

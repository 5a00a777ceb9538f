// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package nftables

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/knftables"
)

type objectKind int

const (
	kindChain objectKind = iota
	kindSet
	kindMap
)

// object is a chain (with its rules), a set or a map of the table. Objects
// are compared by content: a chain whose rules differ is flushed and
// rewritten, a set whose definition differs is deleted and made again.
type object struct {
	kind  objectKind
	name  string
	chain *knftables.Chain
	rules []*knftables.Rule
	set   *knftables.Set
	m     *knftables.Map
	// key and value lay out the elements of a data set or map (none for a
	// verdict map or a set the kernel fills), so that they can be written
	// over netlink.
	key, value []field

	content string
}

func newChain(name string) *object {
	return &object{kind: kindChain, name: name, chain: &knftables.Chain{Name: name}}
}

// newBaseChain is a chain hooked into the kernel.
func newBaseChain(name string, t knftables.BaseChainType, hook knftables.BaseChainHook, prio knftables.BaseChainPriority) *object {
	o := newChain(name)
	o.chain.Type, o.chain.Hook, o.chain.Priority = &t, &hook, &prio
	return o
}

// add appends a rule made of the space-joined parts.
func (o *object) add(parts ...string) *object {
	o.rules = append(o.rules, &knftables.Rule{Chain: o.name, Rule: knftables.Concat(toAny(parts)...)})
	return o
}

// addWithComment appends a rule with a comment.
func (o *object) addWithComment(comment string, parts ...string) *object {
	o.add(parts...)
	o.rules[len(o.rules)-1].Comment = &comment
	return o
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func newSet(name, typeOf, comment string, flags ...knftables.SetFlag) *object {
	s := &knftables.Set{Name: name, TypeOf: typeOf, Flags: flags}
	if comment != "" {
		s.Comment = &comment
	}
	return &object{kind: kindSet, name: name, set: s}
}

// newTypedSet is a set declared by data type rather than by expression.
func newTypedSet(name, typ string, timeout time.Duration, flags ...knftables.SetFlag) *object {
	s := &knftables.Set{Name: name, Type: typ, Flags: flags}
	if timeout > 0 {
		s.Timeout = &timeout
	}
	return &object{kind: kindSet, name: name, set: s}
}

func newMap(name, typeOf, comment string) *object {
	m := &knftables.Map{Name: name, TypeOf: typeOf}
	if comment != "" {
		m.Comment = &comment
	}
	return &object{kind: kindMap, name: name, m: m}
}

// freeze computes the content the object is compared by.
func (o *object) freeze() *object {
	var b strings.Builder
	switch o.kind {
	case kindChain:
		c := o.chain
		b.WriteString("chain")
		if c.Type != nil {
			fmt.Fprintf(&b, " %s %s %s", *c.Type, *c.Hook, *c.Priority)
		}
		for _, r := range o.rules {
			b.WriteString("\n" + r.Rule)
			if r.Comment != nil {
				b.WriteString(" comment " + *r.Comment)
			}
		}
	case kindSet:
		s := o.set
		fmt.Fprintf(&b, "set %s|%s|%v", s.Type, s.TypeOf, s.Flags)
		if s.Timeout != nil {
			fmt.Fprintf(&b, "|%s", *s.Timeout)
		}
	case kindMap:
		fmt.Fprintf(&b, "map %s|%s|%v", o.m.Type, o.m.TypeOf, o.m.Flags)
	}
	o.content = b.String()
	return o
}

// withFields declares the layout of the object's elements.
func (o *object) withFields(key []field, value ...field) *object {
	o.key, o.value = key, value
	return o
}

// isData tells whether the object is a set or map whose elements are
// plain data with a declared layout: those go over netlink when the
// interface offers it, never validated by the kernel at commit.
func (o *object) isData() bool { return o != nil && len(o.key) > 0 }

// isSetOrMap tells whether the object holds elements.
func (o *object) isSetOrMap() bool { return o.kind != kindChain }

// dynamic tells whether the kernel adds elements to the set itself (the
// affinity sets): a full sync keeps them instead of flushing them.
func (o *object) dynamic() bool {
	return o.kind == kindSet && slices.Contains(o.set.Flags, knftables.DynamicFlag)
}

// elem is one element of a set or map; value is empty in a set. comment
// names the service port the element is for, as kube-proxy's do.
type elem struct {
	set, key, value, comment string
}

// elemID identifies an element: its set and key.
type elemID struct {
	set, key string
}

func (e elem) id() elemID { return elemID{e.set, e.key} }

// knft is the element as knftables writes it.
func (id elemID) knft(value string, isMap bool) *knftables.Element {
	return id.knftWith(wanted{value: value}, isMap)
}

// knftWith is knft with the element's comment.
func (id elemID) knftWith(w wanted, isMap bool) *knftables.Element {
	value := w.value
	e := &knftables.Element{Key: []string{id.key}}
	if w.comment != "" {
		e.Comment = &w.comment
	}
	if isMap {
		e.Map = id.set
		e.Value = []string{value}
	} else {
		e.Set = id.set
	}
	return e
}

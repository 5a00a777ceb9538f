// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

// Package enumflag is how svcnet's commands take an enumeration (a
// pipeline, an install method, an announcement mode): a named string type
// whose flag takes any word, and Check, which the command's Complete calls
// for every such setting, flag or code alike, so that every bad value is
// reported at once, naming its flag and the valid values.
package enumflag

import (
	"fmt"
	"slices"
	"strings"
)

// Value binds a named string type to a flag (pflag.Value).
type Value[T ~string] struct {
	p   *T
	typ string
}

// Var is a flag value that sets *p; typ is the type name help shows.
func Var[T ~string](p *T, typ string) *Value[T] {
	return &Value[T]{p: p, typ: typ}
}

// String implements pflag.Value.
func (v *Value[T]) String() string {
	if v.p == nil {
		return ""
	}
	return string(*v.p)
}

// Set implements pflag.Value: any word, which Check judges.
func (v *Value[T]) Set(s string) error {
	*v.p = T(strings.TrimSpace(s))
	return nil
}

// Type implements pflag.Value.
func (v *Value[T]) Type() string { return v.typ }

// Check says what is wrong with v as the value of --flag, or nil.
func Check[T ~string](flag string, v T, valid []T) error {
	if slices.Contains(valid, v) {
		return nil
	}
	words := make([]string, len(valid))
	for i, w := range valid {
		words[i] = string(w)
	}
	return fmt.Errorf("--%s %q is not valid; valid values: %s", flag, v, strings.Join(words, ", "))
}

// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package up

import (
	"strings"

	"github.com/spf13/pflag"

	"github.com/svcnet-io/svcnet/internal/app/manager"
)

// managerFlags turns the manager's options back into `svcnet manager`'s
// flags: one --name=value for each option that differs from the
// command's own default, so that the manager flags given to svcnet up
// reach the manager it runs as a child.
func managerFlags(o manager.Options) []string {
	current := pflag.NewFlagSet("current", pflag.ContinueOnError)
	o.AddFlags(current)
	defaults := pflag.NewFlagSet("defaults", pflag.ContinueOnError)
	d := manager.DefaultOptions()
	d.AddFlags(defaults)
	var args []string
	current.VisitAll(func(f *pflag.Flag) {
		value := flagValue(f)
		if def := defaults.Lookup(f.Name); def != nil && flagValue(def) == value {
			return
		}
		args = append(args, "--"+f.Name+"="+value)
	})
	return args
}

// flagValue is f's value as its flag takes it: a list comma separated,
// not in the brackets of pflag's String.
func flagValue(f *pflag.Flag) string {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		return strings.Join(sv.GetSlice(), ",")
	}
	return f.Value.String()
}

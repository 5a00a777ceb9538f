// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package enumflag

import (
	"testing"

	"github.com/spf13/pflag"
)

type color string

var colors = []color{"red", "blue"}

func TestAFlagTakesAnyWordAndCheckJudgesIt(t *testing.T) {
	c := color("red")
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.Var(Var(&c, "color"), "color", "a color")
	if got := fs.Lookup("color").DefValue; got != "red" {
		t.Errorf("default shown as %q, want red", got)
	}
	if err := fs.Parse([]string{"--color= green "}); err != nil {
		t.Fatalf("a flag refused a word: %v", err)
	}
	if c != "green" {
		t.Errorf("--color= green  set %q, want green", c)
	}
	err := Check("color", c, colors)
	if err == nil || err.Error() != `--color "green" is not valid; valid values: red, blue` {
		t.Errorf("Check(green) = %v", err)
	}
	if err := Check("color", color("blue"), colors); err != nil {
		t.Errorf("Check(blue) = %v", err)
	}
	if typ := fs.Lookup("color").Value.Type(); typ != "color" {
		t.Errorf("type %q, want color", typ)
	}
}

// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package explain

import (
	"fmt"
	"io"
	"strings"
)

// Text writes the report for people: a line per hop with its facts
// below, then the verdict.
func Text(w io.Writer, r Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Service %s, from %s\n\n", r.Service, r.From)
	for _, h := range r.Hops {
		mark := "ok  "
		if len(h.Problems) > 0 {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "%s %s\n", mark, h.Name)
		for _, f := range h.Facts {
			fmt.Fprintf(&b, "       %s\n", f)
		}
		for _, p := range h.Problems {
			fmt.Fprintf(&b, "     ! %s\n", p.Problem)
		}
	}
	if r.Works {
		b.WriteString("\nThe path works: every hop holds.\n")
	} else {
		fmt.Fprintf(&b, "\nBroken at %s: %s.\nFix: %s.\n", r.Broken.Hop, r.Broken.Problem, r.Broken.Fix)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

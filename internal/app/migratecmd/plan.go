// Copyright The svcnet Authors. SPDX-License-Identifier: Apache-2.0

package migratecmd

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/svcnet-io/svcnet/internal/migrate"
)

// newPlanCommand is `migrate plan`: the preflight report.
func newPlanCommand(opts *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Report what moving this cluster to svcnet would change, and what must be dealt with first (exit 1 on a blocker)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: want text or json", output)
			}
			c, err := opts.client()
			if err != nil {
				return err
			}
			report, err := migrate.Plan(cmd.Context(), c)
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				err = enc.Encode(report)
			} else {
				err = writeText(cmd.OutOrStdout(), report)
			}
			if err != nil {
				return err
			}
			if n := report.Blockers(); n > 0 {
				return fmt.Errorf("%d blockers: deal with them before moving the cluster", n)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

// writeText writes the report as a table, blockers first, and a count.
func writeText(w io.Writer, r *migrate.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	counts := map[migrate.Severity]int{}
	for _, f := range r.Findings {
		counts[f.Severity]++
		msg := f.Message
		if f.Object != "" {
			msg = f.Object + ": " + msg
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.ToUpper(string(f.Severity)), f.Area, msg)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d blockers, %d changes, %d notes\n", counts[migrate.Blocker], counts[migrate.Change], counts[migrate.Note])
	return err
}

package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"svc/modules/ledger"
	"svc/modules/withdrawal"
)

// errLedgerInconsistent makes svc exit non-zero after the report is printed.
var errLedgerInconsistent = errors.New("ledger is inconsistent")

// adminLedgerCmd is `svc admin ledger`: the ledger's operator commands.
func adminLedgerCmd() *cobra.Command {
	c := &cobra.Command{Use: "ledger", Short: "Inspect the double-entry ledger"}
	check := &cobra.Command{
		Use:   "check",
		Short: "Recompute every user balance and entry from the postings; exit 1 when anything is inconsistent",
		Long: "Compares every materialized user balance with the sum of its postings, checks that every entry's\n" +
			"postings sum to zero on accounts of its asset, lists negative user balances, and compares every\n" +
			"user's held balance with the gross of their open withdrawals (and each withdrawal's entries with\n" +
			"its status). It reads one consistent snapshot and changes nothing. Exit status 0 means consistent,\n" +
			"1 inconsistent (or an error).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := openApp(cmd.Context())
			if err != nil {
				return err
			}
			defer a.Close()
			r, err := ledger.Check(cmd.Context(), a.DB.Bun, withdrawal.CheckHolds)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if jsonFlag(cmd) {
				if err := printJSON(out, r); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "checked %d accounts, %d entries, %d postings in %s\n", r.Accounts, r.Entries, r.Postings, r.Took.Round(time.Millisecond))
				for _, sec := range []struct {
					title string
					list  []string
				}{
					{"materialized vs derived drifts", r.MaterializedVsDerivedDrifts},
					{"unbalanced entries", r.UnbalancedEntries},
					{"negative balances", r.NegativeBalances},
					{"holds vs open withdrawals", r.HoldMismatches},
				} {
					fmt.Fprintf(out, "%s: %d\n", sec.title, len(sec.list))
					for _, s := range sec.list {
						fmt.Fprintf(out, "  %s\n", s)
					}
				}
				if r.LedgerConsistent {
					fmt.Fprintln(out, "ledger consistent")
				} else {
					fmt.Fprintln(out, "LEDGER INCONSISTENT")
				}
			}
			if !r.LedgerConsistent {
				return errLedgerInconsistent
			}
			return nil
		},
	}
	c.AddCommand(check)
	return c
}

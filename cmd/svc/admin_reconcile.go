package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"svc/modules/audit"
	"svc/modules/reconcile"
	"svc/platform/timefmt"
)

// adminReconciliationCmd is `svc admin reconciliation`: the report now (as
// GET /v1/admin/reconciliation), the history the hourly job keeps, and
// the acknowledgement that lifts an insolvency halt.
func adminReconciliationCmd() *cobra.Command {
	var (
		history bool
		limit   int
		full    bool
	)
	c := &cobra.Command{
		Use:   "reconciliation [--full] [--history [--limit 24]]",
		Short: "Reconcile the ledger and custody now, or list the last reports (--history)",
		Long: `Without flags: computes the reconciliation report now (the hourly job's computation), stores it
in the history and acts on it as the job does (an insolvent asset's withdrawals are halted, a
solvent one's halt lifted), and prints it. Its ledger check is incremental, as the hourly job's (what
was committed since the last consistent check, and the accounts written since); --full checks the
whole ledger.
--history lists the last stored reports, newest first. docs/reconciliation.md explains every field
and what to do when it is red.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 1000 {
				return fmt.Errorf("--limit %d: want 1 to 1000", limit)
			}
			a, err := openApp(cmd.Context())
			if err != nil {
				return err
			}
			defer a.Close()
			out := cmd.OutOrStdout()
			if history {
				rows, err := a.Reconcile.History(cmd.Context(), limit)
				if err != nil {
					return err
				}
				if jsonFlag(cmd) {
					return printJSON(out, rows)
				}
				tw := table(out)
				fmt.Fprintln(tw, "ID\tAT\tTRIGGER\tHEALTHY\tALERTS")
				for _, r := range rows {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%t\t%s\n", r.ID, timefmt.Format(r.CreatedAt), r.Trigger, r.Healthy, strings.Join(r.Report.Alerts, "; "))
				}
				return tw.Flush()
			}
			run := a.Reconcile.Run
			if full {
				run = a.Reconcile.RunFull
			}
			rep, err := run(cmd.Context(), reconcile.TriggerOnDemand)
			if err != nil {
				return err
			}
			if jsonFlag(cmd) {
				return printJSON(out, rep)
			}
			fmt.Fprintf(out, "healthy %t, ledger consistent %t (at %s)\n", rep.Healthy, rep.LedgerConsistent, rep.GeneratedAt)
			fmt.Fprintf(out, "ledger check: %s\n", rep.LedgerCheck)
			tw := table(out)
			fmt.Fprintln(tw, "ASSET\tLEDGER CUSTODY\tIN FLIGHT\tOWED TO USERS\tCHAIN\tDIFFERENCE\tINSOLVENT\tSOURCE")
			for _, l := range rep.Custody {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%t\t%s\n", l.Asset, l.LedgerCustody, l.LedgerInFlight, l.UserObligations,
					orNull(l.ChainBalance), orNull(l.Difference), l.Insolvent, l.ChainSource)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			tw = table(out)
			fmt.Fprintln(tw, "ASSET\tLIABILITIES TOTAL\tSNAPSHOT AT\tLIABILITIES ROOT")
			for _, l := range rep.Custody {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", l.Asset, orNull(l.LiabilitiesTotal), orNull(l.LiabilitiesSnapshotAt), orNull(l.LiabilitiesRoot))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, list := range []struct {
				name  string
				items []string
			}{{"alerts", rep.Alerts}, {"materialized vs derived drifts", rep.MaterializedVsDerivedDrifts}, {"unbalanced entries", rep.UnbalancedEntries}} {
				if len(list.items) > 0 {
					fmt.Fprintf(out, "%s:\n  %s\n", list.name, strings.Join(list.items, "\n  "))
				}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&history, "history", false, "list the last stored reports instead of computing one")
	c.Flags().IntVar(&limit, "limit", 24, "how many reports --history lists")
	c.Flags().BoolVar(&full, "full", false, "check the whole ledger rather than what was committed since the last consistent check")

	var as, asset, note string
	ack := &cobra.Command{
		Use:   "ack --as NAME [--asset ASSET] [--note TEXT]",
		Short: "Acknowledge an insolvency: lift the halt on withdrawals of the asset (all, without --asset)",
		Long: `Records that you looked at an insolvency the reconciliation found (audited as cli:NAME): the
asset's withdrawals flow again at once. The episode stays open, with no new alert or halt, until a
report finds the asset solvent.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if as == "" {
				return fmt.Errorf("--as NAME is required: the acknowledgement is recorded as made by cli:NAME")
			}
			name, err := operatorName(as)
			if err != nil {
				return err
			}
			a, err := openApp(cmd.Context())
			if err != nil {
				return err
			}
			defer a.Close()
			eps, err := a.Reconcile.Ack(cmd.Context(), audit.CLI(name), asset, note)
			if err != nil {
				return err
			}
			if jsonFlag(cmd) {
				return printJSON(cmd.OutOrStdout(), eps)
			}
			for _, ep := range eps {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: insolvency since %s acknowledged; withdrawals flow again\n", ep.Asset, timefmt.Format(ep.StartedAt))
			}
			return nil
		},
	}
	ack.Flags().StringVar(&as, "as", "", "the operator's name, recorded as cli:NAME (required)")
	ack.Flags().StringVar(&asset, "asset", "", "only this asset")
	ack.Flags().StringVar(&note, "note", "", "what you checked")
	c.AddCommand(ack)
	return c
}

func orNull(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}

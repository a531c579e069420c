package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
	"svc/modules/audit"
	"svc/modules/operator"
	"svc/modules/reconcile"
	"svc/platform/timefmt"
)

// adminReconciliationCmd is `svc admin reconciliation`: the report now (as
// GET /v1/admin/reconciliation), the history the hourly job keeps, and
// the acknowledgement that lifts an insolvency or inconsistency halt.
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
in the history and acts on it as the job does (the withdrawals of an insolvent asset, or of one
whose ledger is inconsistent, are halted; a clean one's halt lifted), and prints it. SHORTFALL is
what the chain lacks to cover what users are owed: (user obligations - expected shortfall) - chain
balance; positive is insolvent, zero or negative the margin. ACCEPTED is the shortfall an
acknowledgement accepted (ack). Its ledger check is incremental, as the hourly job's (what
was committed since the last consistent check, and the accounts written since); --full checks the
whole ledger.
--history lists the last stored reports, newest first. docs/reconciliation.md explains every field
and what to do when it is red.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkLimit(limit, 1000); err != nil {
				return err
			}
			return withApp(cmd, func(a *app.App) error {
				if history {
					rows, err := a.Reconcile.History(cmd.Context(), limit)
					if err != nil {
						return err
					}
					return showTable(cmd, "", "ID\tAT\tTRIGGER\tHEALTHY\tALERTS", rows, func(tw io.Writer, r reconcile.Stored) {
						fmt.Fprintf(tw, "%d\t%s\t%s\t%t\t%s\n", r.ID, timefmt.Format(r.CreatedAt), r.Trigger, r.Healthy, strings.Join(r.Report.Alerts, "; "))
					})
				}
				run := a.Reconcile.Run
				if full {
					run = a.Reconcile.RunFull
				}
				rep, err := run(cmd.Context(), reconcile.TriggerOnDemand)
				if err != nil {
					return err
				}
				return show(cmd, rep, func(out io.Writer) error { return printReport(out, rep) })
			})
		},
	}
	c.Flags().BoolVar(&history, "history", false, "list the last stored reports instead of computing one")
	c.Flags().IntVar(&limit, "limit", 24, "how many reports --history lists")
	c.Flags().BoolVar(&full, "full", false, "check the whole ledger rather than what was committed since the last consistent check")
	c.AddCommand(adminReconciliationAckCmd())
	return c
}

// printReport prints a reconciliation report: its verdict, the custody
// and the liabilities of each asset, and what it found.
func printReport(out io.Writer, rep reconcile.Report) error {
	fmt.Fprintf(out, "healthy %t, ledger consistent %t (at %s)\n", rep.Healthy, rep.LedgerConsistent, rep.GeneratedAt)
	fmt.Fprintf(out, "ledger check: %s\n", rep.LedgerCheck)
	if err := printTable(out, "", "ASSET\tLEDGER CUSTODY\tIN FLIGHT\tOWED\tOF WHICH PLATFORM\tEXPECTED SHORTFALL\tCHAIN\tDIFFERENCE\tSHORTFALL\tINSOLVENT\tACCEPTED\tINCONSISTENT\tSOURCE",
		rep.Custody, custodyRow); err != nil {
		return err
	}
	if err := printTable(out, "", "ASSET\tLIABILITIES TOTAL\tSNAPSHOT AT\tLIABILITIES ROOT", rep.Custody, func(tw io.Writer, l reconcile.CustodyLine) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", l.Asset, orNull(l.LiabilitiesTotal), orNull(l.LiabilitiesSnapshotAt), orNull(l.LiabilitiesRoot))
	}); err != nil {
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
}

// custodyRow is an asset's line of the report: the custody against what
// is owed (to users and to platform accounts, and the platform accounts'
// part of it), and the ledger's findings.
func custodyRow(tw io.Writer, l reconcile.CustodyLine) {
	inconsistent := "false"
	if l.Inconsistent {
		inconsistent = fmt.Sprintf("true (%d findings", l.LedgerFindings)
		if l.AcknowledgedFindings != nil {
			inconsistent += fmt.Sprintf(", %d accepted", *l.AcknowledgedFindings)
		}
		inconsistent += ")"
	}
	platform := l.PlatformObligations
	if platform == "" {
		platform = "-" // a report stored before the field
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%t\t%s\t%s\t%s\n", l.Asset, l.LedgerCustody, l.LedgerInFlight, l.UserObligations,
		platform, l.ExpectedShortfall, orNull(l.ChainBalance), orNull(l.Difference), orNull(l.Shortfall), l.Insolvent, orNull(l.AcknowledgedShortfall),
		inconsistent, l.ChainSource)
}

// adminReconciliationAckCmd is `svc admin reconciliation ack`.
func adminReconciliationAckCmd() *cobra.Command {
	var keyPath, asset, note string
	ack := &cobra.Command{
		Use:   "ack --key FILE [--asset ASSET] [--note TEXT]",
		Short: "Acknowledge an insolvency or an inconsistency: lift the halt on withdrawals of the asset (all, without --asset)",
		Long: `Records that you looked at an insolvency or an inconsistent ledger the reconciliation found: the
asset's withdrawals flow again at once. The acknowledgement accepts what the latest report found:
the shortfall of an insolvency ((user obligations - expected shortfall) - chain balance), the
number of findings of an inconsistency. The episode stays open without a halt until a report finds
the asset solvent (consistent); a report that finds a larger shortfall, or more findings, than you
accepted halts the asset again with a new alert.

It is a signed action of an admin (--key, default $` + KeyEnv + `): the command reads what it would
accept, signs exactly that (each episode's shortfall or findings, and the note) and acknowledges;
if a report changed them in between, the service refuses the signature (sign again). Audited as
op:NAME.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := loadKey(keyPath)
			if err != nil {
				return err
			}
			return withApp(cmd, func(a *app.App) error {
				open, err := a.Reconcile.Unacknowledged(cmd.Context(), asset)
				if err != nil {
					return err
				}
				if len(open) == 0 {
					return reconcile.ErrNothingToAck
				}
				x := reconcile.AckExpect(open, note)
				env, err := key.Sign(operator.NewStatement(x.Action, x.Resource, x.Facts, time.Now()))
				if err != nil {
					return err
				}
				eps, err := a.Reconcile.Ack(cmd.Context(), audit.Actor{}, &env, asset, note)
				if err != nil {
					return err
				}
				return show(cmd, eps, func(out io.Writer) error {
					for _, ep := range eps {
						accepted := "a shortfall of " + orNull(unitsOf(cmd.Context(), a, ep.Asset, ep.AckedShortfall))
						if ep.Kind == reconcile.KindInconsistency {
							accepted = "findings: " + orNull(countOf(ep.AckedFindings))
						}
						fmt.Fprintf(out, "%s: %s since %s acknowledged by %s, accepting %s; withdrawals flow again until a report finds more\n",
							ep.Asset, ep.Kind, timefmt.Format(ep.StartedAt), orNull(ep.AckedBy), accepted)
					}
					return nil
				})
			})
		},
	}
	keyFlag(ack, &keyPath)
	ack.Flags().StringVar(&asset, "asset", "", "only this asset")
	ack.Flags().StringVar(&note, "note", "", "what you checked")
	return ack
}

// unitsOf renders units of code in its display units, with the code.
func unitsOf(ctx context.Context, a *app.App, code string, units *int64) *string {
	if units == nil {
		return nil
	}
	if as, err := a.Assets.Get(ctx, code); err == nil {
		s := as.Format(*units) + " " + code
		return &s
	}
	s := fmt.Sprintf("%d units", *units)
	return &s
}

func countOf(n *int64) *string {
	if n == nil {
		return nil
	}
	s := fmt.Sprint(*n)
	return &s
}

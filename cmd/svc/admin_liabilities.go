package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
	"svc/modules/liabilities"
)

// adminLiabilitiesCmd is `svc admin liabilities`: the latest published
// proof of liabilities of each asset (as GET /v1/admin/liabilities), and
// `snapshot`, which takes one now.
func adminLiabilitiesCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "liabilities",
		Short: "The latest proof of liabilities of each asset: the Merkle sum tree's root and total",
		Long: `Prints each asset's latest proof-of-liabilities snapshot: the root of the Merkle sum tree over
every user's available + held + reserved and every platform account's (each a leaf), the total it
commits to, the number of users and of platform accounts and the snapshot's time (the numbers to
publish). Snapshots are taken with each hourly reconciliation and by
'svc admin liabilities snapshot'. docs/provable-custody.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withApp(cmd, func(a *app.App) error {
				list, err := a.Liabilities.Latest(cmd.Context())
				if err != nil {
					return err
				}
				return printLiabilities(cmd, a, list)
			})
		},
	}
	var keyPath string
	snap := &cobra.Command{
		Use:   "snapshot [--key FILE]",
		Short: "Take a proof-of-liabilities snapshot of every asset now",
		Long: `Reads every user's and platform account's available + held + reserved of every asset at one
consistent snapshot of the ledger (a read-only transaction: no write waits for it), builds each
asset's Merkle sum tree with fresh salts, stores it and prints what it publishes. Users' and
platform accounts' proofs are then answered from it. The snapshot is recorded as requested by
op:NAME, the operator the enrollment chain enrolled the key for, with --key (or $` + KeyEnv + `; an
unknown or revoked key is refused), else by cli:LOGIN, your login name.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := optionalKey(keyPath)
			if err != nil {
				return err
			}
			return withApp(cmd, func(a *app.App) error {
				actor, err := actorOf(cmd.Context(), a, key)
				if err != nil {
					return err
				}
				list, err := a.Liabilities.Snapshot(cmd.Context(), liabilities.TriggerOnDemand, actor.ID)
				if err != nil {
					return err
				}
				return printLiabilities(cmd, a, list)
			})
		},
	}
	keyFlag(snap, &keyPath)
	c.AddCommand(snap)
	return c
}

// printLiabilities prints snapshots as GET /v1/admin/liabilities shows
// them.
func printLiabilities(cmd *cobra.Command, a *app.App, list []liabilities.Published) error {
	views, err := liabilities.Views(cmd.Context(), a.DB.Bun, list)
	if err != nil {
		return err
	}
	return show(cmd, liabilities.PublishedList{Snapshots: views}, func(out io.Writer) error {
		return printTable(out, "no proof of liabilities yet: svc admin liabilities snapshot takes one",
			"ASSET\tSNAPSHOT\tAT\tTRIGGER\tUSERS\tPLATFORM ACCOUNTS\tTOTAL\tTOTAL UNITS\tROOT", views, func(tw io.Writer, v liabilities.PublishedView) {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", v.Asset, v.SnapshotID, v.SnapshotAt, v.Trigger, v.Users, v.PlatformAccounts,
					v.Total, v.TotalUnits, v.Root)
			})
	})
}

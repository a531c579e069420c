package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"svc/modules/audit"
)

// adminAuditCmd is `svc admin audit`: the operator audit trail, as
// GET /v1/admin/audit serves it.
func adminAuditCmd() *cobra.Command {
	var (
		limit          int
		cursor         int64
		action, target string
	)
	c := &cobra.Command{
		Use:   "audit [--limit 50] [--cursor ID] [--action A] [--target T]",
		Short: "List the operator audit trail, newest first",
		Long: `List the operator audit trail, newest first: who (an admin key id, or cli:NAME from --as)
did what (deposit.resolve, apikey.mint, apikey.revoke, event.redeliver, asset.set_limits,
withdrawal.approve, ...) to which resource, when, with the digest and the parameters of the
request. Entries are never changed or deleted.

--cursor takes the id printed after a full page (next_cursor with --json) to read the next one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > audit.MaxListLimit {
				return fmt.Errorf("--limit %d: want 1 to %d", limit, audit.MaxListLimit)
			}
			p := audit.ListParams{Limit: limit, Action: action, Target: target}
			if cmd.Flags().Changed("cursor") {
				if cursor < 1 {
					return fmt.Errorf("--cursor %d: want a positive entry id", cursor)
				}
				p.Cursor = &cursor
			}
			a, err := openApp(cmd.Context())
			if err != nil {
				return err
			}
			defer a.Close()
			entries, next, err := audit.List(cmd.Context(), a.DB.Bun, p)
			if err != nil {
				return err
			}
			page := audit.ToListView(entries, next)
			if jsonFlag(cmd) {
				return printJSON(cmd.OutOrStdout(), page)
			}
			out := cmd.OutOrStdout()
			if len(page.Entries) == 0 {
				fmt.Fprintln(out, "no audit entries")
				return nil
			}
			tw := table(out)
			fmt.Fprintln(tw, "ID\tAT\tACTOR\tACTION\tTARGET\tDETAIL")
			for _, e := range page.Entries {
				actor := audit.Actor{ID: e.Actor, Label: e.ActorLabel}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.At, actor, e.Action, e.Target, e.Detail)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if page.NextCursor != nil {
				fmt.Fprintf(out, "more: --cursor %d\n", *page.NextCursor)
			}
			return nil
		},
	}
	c.Flags().IntVar(&limit, "limit", audit.DefaultListLimit, fmt.Sprintf("at most this many entries (1 to %d)", audit.MaxListLimit))
	c.Flags().Int64Var(&cursor, "cursor", 0, "the next cursor of the previous page: entries older than this id")
	c.Flags().StringVar(&action, "action", "", "only this action, e.g. deposit.resolve")
	c.Flags().StringVar(&target, "target", "", "only this target: a deposit, withdrawal, key or event id, or an asset code")
	return c
}

package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
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
			if err := checkLimit(limit, audit.MaxListLimit); err != nil {
				return err
			}
			p := audit.ListParams{Limit: limit, Action: action, Target: target}
			if cmd.Flags().Changed("cursor") {
				if cursor < 1 {
					return fmt.Errorf("--cursor %d: want a positive entry id", cursor)
				}
				p.Cursor = &cursor
			}
			return withApp(cmd, func(a *app.App) error {
				entries, next, err := audit.List(cmd.Context(), a.DB.Bun, p)
				if err != nil {
					return err
				}
				page := audit.ToListView(entries, next)
				return show(cmd, page, func(out io.Writer) error {
					return printPage(out, "no audit entries", "ID\tAT\tACTOR\tACTION\tTARGET\tDETAIL", page.Entries, page.NextCursor, func(tw io.Writer, e audit.View) {
						actor := audit.Actor{ID: e.Actor, Label: e.ActorLabel}
						fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.At, actor, e.Action, e.Target, e.Detail)
					})
				})
			})
		},
	}
	c.Flags().IntVar(&limit, "limit", audit.DefaultListLimit, fmt.Sprintf("at most this many entries (1 to %d)", audit.MaxListLimit))
	c.Flags().Int64Var(&cursor, "cursor", 0, "the next cursor of the previous page: entries older than this id")
	c.Flags().StringVar(&action, "action", "", "only this action, e.g. deposit.resolve")
	c.Flags().StringVar(&target, "target", "", "only this target: a deposit, withdrawal, key or event id, or an asset code")
	return c
}

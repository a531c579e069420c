package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
	"svc/modules/event"
)

// adminWebhookEndpointsCmd is `svc admin webhook-endpoints`: list the
// webhook endpoints and their deliveries (adding and changing them is the
// admin API's: docs/webhooks.md, "Webhook endpoints").
func adminWebhookEndpointsCmd() *cobra.Command {
	eps := &cobra.Command{Use: "webhook-endpoints", Short: "List webhook endpoints and their deliveries (dead ones: --status dead)"}
	list := &cobra.Command{
		Use:   "list",
		Short: "List webhook endpoints, oldest first (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withApp(cmd, func(a *app.App) error {
				all, err := a.Endpoints.ListEndpoints(cmd.Context())
				if err != nil {
					return err
				}
				now := a.Clock.Now()
				views := viewsOf(all, func(ep event.Endpoint) event.EndpointRecord { return event.ToEndpointRecord(ep, now) })
				return showTable(cmd, "no webhook endpoints", "ID\tURL\tEVENTS\tDISABLED\tCREATED", views, func(tw io.Writer, r event.EndpointRecord) {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\n", r.ID, r.URL, strings.Join(r.Events, ","), r.Disabled, r.CreatedAt)
				})
			})
		},
	}
	var (
		status, endpoint string
		limit            int
	)
	deliveries := &cobra.Command{
		Use:   "deliveries [--status pending|delivered|dead] [--endpoint ID] [--limit 50]",
		Short: "List events' deliveries to webhook endpoints, newest event first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := event.DeliveryListParams{Status: event.Status(status), Limit: limit}
			switch p.Status {
			case "", event.StatusPending, event.StatusDelivered, event.StatusDead:
			default:
				return fmt.Errorf("--status %q: want pending, delivered or dead", status)
			}
			if err := checkLimit(limit, 200); err != nil {
				return err
			}
			if endpoint != "" {
				id, err := uuid.Parse(endpoint)
				if err != nil {
					return fmt.Errorf("--endpoint %q: want an endpoint's id (a uuid)", endpoint)
				}
				p.EndpointID = id
			}
			return withApp(cmd, func(a *app.App) error {
				all, err := a.Endpoints.ListDeliveries(cmd.Context(), p)
				if err != nil {
					return err
				}
				return showTable(cmd, "no deliveries", "EVENT\tRAW ID\tTYPE\tENDPOINT\tSTATUS\tATTEMPTS\tNEXT ATTEMPT\tLAST ERROR", all,
					func(tw io.Writer, x event.DeliveryListItem) {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", x.EventID, x.EventRawID, x.EventType, x.EndpointID, x.Status,
							x.Attempts, x.NextAttemptAt, cut(x.LastError, 80))
					})
			})
		},
	}
	deliveries.Flags().StringVar(&status, "status", "", "only deliveries in this status: pending, delivered or dead")
	deliveries.Flags().StringVar(&endpoint, "endpoint", "", "only deliveries to this endpoint (its id)")
	deliveries.Flags().IntVar(&limit, "limit", 50, "at most this many deliveries (1 to 200)")
	eps.AddCommand(list, deliveries)
	return eps
}

// cut is s, or "-" when nil, cut to n characters.
func cut(s *string, n int) string {
	if s == nil {
		return "-"
	}
	if rs := []rune(*s); len(rs) > n {
		return string(rs[:n]) + "…"
	}
	return *s
}

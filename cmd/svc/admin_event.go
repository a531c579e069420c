package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
	"svc/modules/alert"
	"svc/modules/audit"
	"svc/modules/event"
	"svc/platform/timefmt"
)

// adminEventsCmd is `svc admin events`: list outbound events, redeliver a
// dead one.
func adminEventsCmd() *cobra.Command {
	events := &cobra.Command{Use: "events", Short: "List outbound webhook events and redeliver dead ones"}
	var (
		status string
		limit  int
	)
	list := &cobra.Command{
		Use:   "list [--status pending|delivered|dead] [--limit 50]",
		Short: "List outbound events, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch event.Status(status) {
			case "", event.StatusPending, event.StatusDelivered, event.StatusDead:
			default:
				return fmt.Errorf("--status %q: want pending, delivered or dead", status)
			}
			if err := checkLimit(limit, 200); err != nil {
				return err
			}
			return withApp(cmd, func(a *app.App) error {
				evs, err := a.Events.List(cmd.Context(), event.ListParams{Status: event.Status(status), Limit: limit})
				if err != nil {
					return err
				}
				return showTable(cmd, "", "ID\tRAW ID\tTYPE\tSTATUS\tATTEMPTS\tNEXT ATTEMPT\tCREATED\tLAST ERROR", viewsOf(evs, event.ToRecord), eventRow)
			})
		},
	}
	list.Flags().StringVar(&status, "status", "", "only events in this status: pending, delivered or dead")
	list.Flags().IntVar(&limit, "limit", 50, "at most this many events (1 to 200)")

	var key string
	redeliver := &cobra.Command{
		Use:   "redeliver ID --key FILE",
		Short: "Queue a dead event again with a fresh schedule (ID: its raw uuid or its evt_ id), signed; recorded in the audit trail as op:NAME",
		Long: `Queue a dead event again with a fresh schedule (ID: its raw uuid or its evt_ id).

The redelivery is signed with an enrolled operator's key (--key, default $SVC_OPERATOR_KEY; an
approver's or an admin's): the statement names the event and its type. It is recorded in the audit
trail as made by "op:NAME".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := event.ParseID(args[0])
			if err != nil {
				return err
			}
			if err := requireKey(key); err != nil {
				return err
			}
			return withApp(cmd, func(a *app.App) error {
				cur, err := a.Events.Get(cmd.Context(), id)
				if err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
				env, err := signWith(key, event.RedeliverExpect(cur))
				if err != nil {
					return err
				}
				e, err := a.Events.Redeliver(cmd.Context(), id, audit.Actor{}, env)
				if err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
				return showLine(cmd, event.RedeliverResponse{ID: e.PublicID(), Status: e.Status}, "%s (%s) is %s again, with a fresh %d attempts: the worker sends it next\n",
					e.PublicID(), e.Type, e.Status, event.MaxAttempts)
			})
		},
	}
	keyFlag(redeliver, &key)
	events.AddCommand(list, redeliver)
	return events
}

// eventRow is an event's row, its last error cut to 80 characters.
func eventRow(tw io.Writer, r event.Record) {
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.RawID, r.Type, r.Status, r.Attempts, r.NextAttemptAt, r.CreatedAt, cut(r.LastError, 80))
}

// adminAlertsCmd is `svc admin alerts`: list and acknowledge operator
// alerts.
func adminAlertsCmd() *cobra.Command {
	alerts := &cobra.Command{Use: "alerts", Short: "List and acknowledge operator alerts"}
	type view struct {
		ID             int64   `json:"id"`
		Type           string  `json:"type"`
		Subject        string  `json:"subject"`
		Detail         string  `json:"detail"`
		CreatedAt      string  `json:"created_at"`
		AcknowledgedAt *string `json:"acknowledged_at"`
		AcknowledgedBy *string `json:"acknowledged_by"`
	}
	toView := func(x alert.Alert) view {
		return view{ID: x.ID, Type: x.Type, Subject: x.Subject, Detail: x.Detail, CreatedAt: timefmt.Format(x.CreatedAt),
			AcknowledgedAt: timefmt.Ptr(x.AcknowledgedAt), AcknowledgedBy: x.AcknowledgedBy}
	}
	var (
		open  bool
		limit int
	)
	list := &cobra.Command{
		Use:   "list [--open] [--limit 50]",
		Short: "List operator alerts, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return fmt.Errorf("--limit %d: want at least 1", limit)
			}
			return withApp(cmd, func(a *app.App) error {
				all, err := a.Alerts.List(cmd.Context(), alert.ListParams{Open: open, Limit: limit})
				if err != nil {
					return err
				}
				return showTable(cmd, "", "ID\tTYPE\tSUBJECT\tCREATED\tACKNOWLEDGED\tDETAIL", viewsOf(all, toView), func(tw io.Writer, v view) {
					ack := "-"
					if v.AcknowledgedAt != nil {
						ack = *v.AcknowledgedAt
						if v.AcknowledgedBy != nil {
							ack += " by " + *v.AcknowledgedBy
						}
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", v.ID, v.Type, v.Subject, v.CreatedAt, ack, v.Detail)
				})
			})
		},
	}
	list.Flags().BoolVar(&open, "open", false, "only alerts nobody has acknowledged")
	list.Flags().IntVar(&limit, "limit", 50, "at most this many alerts")

	var by string
	ack := &cobra.Command{
		Use:   "ack ID [--by NAME]",
		Short: "Acknowledge an alert (it stays listed, marked as acknowledged)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id < 1 {
				return fmt.Errorf("alert id %q: want a positive integer", args[0])
			}
			if by = strings.TrimSpace(by); by == "" {
				return fmt.Errorf("--by: say who acknowledges the alert")
			}
			return withApp(cmd, func(a *app.App) error {
				x, err := a.Alerts.Acknowledge(cmd.Context(), id, by)
				if err != nil {
					return fmt.Errorf("alert %d: %w", id, err)
				}
				return show(cmd, toView(x), func(out io.Writer) error {
					fmt.Fprintf(out, "alert %d (%s %s) acknowledged at %s by %s\n", x.ID, x.Type, x.Subject, orDash(x.AcknowledgedAt), *x.AcknowledgedBy)
					return nil
				})
			})
		},
	}
	ack.Flags().StringVar(&by, "by", os.Getenv("USER"), "who acknowledges it (default: $USER)")
	alerts.AddCommand(list, ack)
	return alerts
}

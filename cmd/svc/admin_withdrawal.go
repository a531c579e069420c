package main

import (
	"fmt"
	"io"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
	"svc/modules/withdrawal"
)

// adminWithdrawalsCmd is `svc admin withdrawals`: the approval queue and
// the operators' decisions, as the /v1/admin/withdrawals endpoints do. The
// decisions need --as NAME: they are recorded as made by cli:NAME.
func adminWithdrawalsCmd() *cobra.Command {
	ws := &cobra.Command{Use: "withdrawals", Short: "Withdrawals: list, show, approve, reject, release, mark-broadcast"}

	var (
		status, cursor string
		limit          int
	)
	list := &cobra.Command{
		Use:   "list [--status pending_approval] [--limit 50] [--cursor ID]",
		Short: "List withdrawals oldest first (--status pending_approval is the approval queue)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := withdrawal.AdminListParams{Status: withdrawal.Status(status), Limit: limit}
			if status != "" && !p.Status.Valid() {
				return fmt.Errorf("--status %q is not a withdrawal status", status)
			}
			if err := checkLimit(limit, withdrawal.MaxAdminLimit); err != nil {
				return err
			}
			if cursor != "" {
				id, err := uuid.Parse(cursor)
				if err != nil {
					return fmt.Errorf("--cursor %q is not a withdrawal id", cursor)
				}
				p.Cursor = &id
			}
			return withApp(cmd, func(a *app.App) error {
				rows, next, err := a.Withdrawals.AdminList(cmd.Context(), p)
				if err != nil {
					return err
				}
				views, err := a.Withdrawals.AdminViews(cmd.Context(), rows)
				if err != nil {
					return err
				}
				lv := withdrawal.AdminListView{Withdrawals: views}
				if next != nil {
					s := next.String()
					lv.NextCursor = &s
				}
				return show(cmd, lv, func(out io.Writer) error {
					return printPage(out, "no withdrawals", "WITHDRAWAL\tCREATED\tUSER\tASSET\tGROSS\tSTATUS\tREASON", views, next, func(tw io.Writer, v withdrawal.AdminView) {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.WithdrawalID, v.CreatedAt, holderName(v.ExternalUserID, v.PlatformAccount), v.Asset, v.AmountGross,
							v.Status, dashIfNil(v.ApprovalReason))
					})
				})
			})
		},
	}
	list.Flags().StringVar(&status, "status", "", "only withdrawals in this status")
	list.Flags().IntVar(&limit, "limit", withdrawal.DefaultAdminLimit, fmt.Sprintf("at most this many (1 to %d)", withdrawal.MaxAdminLimit))
	list.Flags().StringVar(&cursor, "cursor", "", "continue after this withdrawal (the last one of the previous page)")

	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show one withdrawal with who approved, rejected or released it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := withdrawalID(args[0])
			if err != nil {
				return err
			}
			return withApp(cmd, func(a *app.App) error {
				w, err := a.Withdrawals.Get(cmd.Context(), id)
				if err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				views, err := a.Withdrawals.AdminViews(cmd.Context(), []withdrawal.Withdrawal{w})
				if err != nil {
					return err
				}
				v := views[0]
				return show(cmd, v, func(out io.Writer) error {
					tw := table(out)
					for _, f := range []struct{ k, v string }{
						{"withdrawal", v.WithdrawalID}, {"user", dashIfNil(v.ExternalUserID)}, {"platform account", dashIfNil(v.PlatformAccount)}, {"asset", v.Asset}, {"status", string(v.Status)},
						{"destination", v.DestinationAddress}, {"gross", v.AmountGross}, {"fee", dashIfNil(v.Fee)}, {"net", dashIfNil(v.AmountNet)},
						{"approval mode", dashIfNil(v.ApprovalMode)}, {"approval reason", dashIfNil(v.ApprovalReason)},
						{"approved by", dashIfNil(v.ApprovedBy)}, {"rejected by", dashIfNil(v.RejectedBy)}, {"released by", dashIfNil(v.ReleasedBy)},
						{"release attestation", dashIfNil(v.ReleaseAttestation)}, {"failure reason", dashIfNil(v.FailureReason)},
						{"txid", dashIfNil(v.Txid)}, {"processor payout", dashIfNil(v.BackendRef)}, {"created", v.CreatedAt}, {"updated", v.UpdatedAt},
					} {
						fmt.Fprintf(tw, "%s\t%s\n", f.k, f.v)
					}
					return tw.Flush()
				})
			})
		},
	}

	var as, note, reason, attestation string
	decide := func(use, short, long string, run func(cmd *cobra.Command, s *withdrawal.Service, p withdrawal.DecideParams) (any, string, error)) *cobra.Command {
		c := &cobra.Command{
			Use: use, Short: short, Long: long, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				id, err := withdrawalID(args[0])
				if err != nil {
					return err
				}
				// Required here: no default to the login name for a decision.
				actor, err := requiredOperator(as, "decision")
				if err != nil {
					return err
				}
				return withApp(cmd, func(a *app.App) error {
					res, summary, err := run(cmd, a.Withdrawals, withdrawal.DecideParams{WithdrawalID: id, Actor: actor})
					if err != nil {
						return fmt.Errorf("%s: %w", id, err)
					}
					return showLine(cmd, res, "%s\n", summary)
				})
			},
		}
		asFlag(c, &as, asRequiredUsage)
		return c
	}
	approve := decide("approve ID --as NAME [--note TEXT]", "Approve a withdrawal waiting for an operator",
		`Approve a withdrawal in pending_approval. The service then pays it, except USDT_TRC20: send the
printed amount from the printed wallet yourself, then report the transaction (mark-broadcast).
Above the asset's four-eyes threshold a second, different operator must approve too.`,
		func(cmd *cobra.Command, s *withdrawal.Service, p withdrawal.DecideParams) (any, string, error) {
			if cmd.Flags().Changed("note") {
				p.Note = &note
			}
			v, _, err := s.Approve(cmd.Context(), p, nil)
			if err != nil {
				return nil, "", err
			}
			msg := fmt.Sprintf("withdrawal %s is %s (approved by %s)", v.WithdrawalID, v.Status, dashIfNil(v.ApprovedBy))
			switch {
			case v.ApprovalsNeeded > 0:
				msg = fmt.Sprintf("withdrawal %s: approval by %s recorded; %d more approval by a different operator is needed (four-eyes)",
					v.WithdrawalID, p.Actor, v.ApprovalsNeeded)
			case v.AmountToSend != nil:
				msg += fmt.Sprintf("\nsend exactly %s %s to %s", *v.AmountToSend, v.Asset, v.DestinationAddress)
				if v.SendFrom != nil {
					msg += " from the hot wallet " + *v.SendFrom
				}
				msg += ", then report the transaction id with mark-broadcast"
			}
			return v, msg, nil
		})
	approve.Flags().StringVar(&note, "note", "", "a note kept in the audit trail")
	reject := decide("reject ID --as NAME [--reason TEXT]", "Reject a withdrawal waiting for an operator; its hold returns at once",
		"Reject a withdrawal in pending_approval: the gross returns to the user's available balance in the\nsame transaction and the withdrawal reads refunded, with the reason as failure_reason.",
		func(cmd *cobra.Command, s *withdrawal.Service, p withdrawal.DecideParams) (any, string, error) {
			if cmd.Flags().Changed("reason") {
				p.Reason = &reason
			}
			v, _, err := s.Reject(cmd.Context(), p, nil)
			if err != nil {
				return nil, "", err
			}
			return v, fmt.Sprintf("withdrawal %s is %s: %s %s returned to %s (%s)", v.WithdrawalID, v.Status, v.AmountGross, v.Asset,
				holderName(v.ExternalUserID, v.PlatformAccount), dashIfNil(v.FailureReason)), nil
		})
	reject.Flags().StringVar(&reason, "reason", "", "why, shown to the platform as failure_reason")
	release := decide("release ID --as NAME --attestation TEXT", "Return the hold of a withdrawal whose payout did not and will not complete",
		`Release is the only way to return a hold once a payout may exist (approved, submitted, broadcast or
failed). Attest, in 10 to 2000 characters, what you checked: that no payout exists or can still
complete. The attestation is stored on the withdrawal, which reads refunded.`,
		func(cmd *cobra.Command, s *withdrawal.Service, p withdrawal.DecideParams) (any, string, error) {
			p.Attestation = attestation
			v, _, err := s.Release(cmd.Context(), p, nil)
			if err != nil {
				return nil, "", err
			}
			return v, fmt.Sprintf("withdrawal %s is %s: %s %s returned to %s (released by %s)", v.WithdrawalID, v.Status, v.AmountGross,
				v.Asset, holderName(v.ExternalUserID, v.PlatformAccount), dashIfNil(v.ReleasedBy)), nil
		})
	release.Flags().StringVar(&attestation, "attestation", "", "what you checked: no payout exists or can still complete (10 to 2000 characters)")
	_ = release.MarkFlagRequired("attestation")

	var txid string
	markBroadcast := decide("mark-broadcast ID --as NAME --txid TXID", "Report the USDT_TRC20 transfer you sent for an approved withdrawal",
		`After approving a USDT_TRC20 withdrawal and sending the printed amount from the hot wallet yourself,
report the transaction. The service reads it from the TRON node and checks it against the withdrawal
(the USDT contract, the hot wallet as sender, the destination, the net amount, a successful receipt,
one Transfer event); any mismatch is refused and named. The withdrawal becomes broadcast, and
confirmed once its block is solidified.`,
		func(cmd *cobra.Command, s *withdrawal.Service, p withdrawal.DecideParams) (any, string, error) {
			v, _, err := s.MarkBroadcast(cmd.Context(), p, txid, nil)
			if err != nil {
				return nil, "", err
			}
			return v, fmt.Sprintf("withdrawal %s is %s with transaction %s; it is confirmed once its block is solidified",
				v.WithdrawalID, v.Status, dashIfNil(v.Txid)), nil
		})
	markBroadcast.Flags().StringVar(&txid, "txid", "", "the TRON transaction id of the transfer you sent")
	_ = markBroadcast.MarkFlagRequired("txid")

	ws.AddCommand(list, show, approve, reject, release, markBroadcast)
	return ws
}

func withdrawalID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fmt.Errorf("%q is not a withdrawal id", s)
	}
	return id, nil
}

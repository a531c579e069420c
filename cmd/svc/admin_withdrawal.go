package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
	"svc/modules/audit"
	"svc/modules/operator"
	"svc/modules/withdrawal"
)

// adminWithdrawalsCmd is `svc admin withdrawals`: the approval queue and
// the operators' decisions, as the /v1/admin/withdrawals endpoints do. A
// decision is signed with the operator's key (--key FILE, default
// $SVC_OPERATOR_KEY): the command reads the withdrawal, signs what the
// service will compare (withdrawal.DecisionExpect) and decides; the audit
// trail records the operator the key belongs to (op:NAME).
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
		Short: "Show one withdrawal with who approved (each signature verified), rejected or released it",
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
					for _, ap := range v.Approvals {
						fmt.Fprintf(tw, "approval\t%s\n", approvalLine(ap))
					}
					return tw.Flush()
				})
			})
		},
	}

	var keyPath, note, reason, attestation, txid string
	// decide builds a decision's command: it reads the withdrawal, builds
	// the statement of action with params (the flags given), signs it with
	// the operator's key and runs the decision with the signature.
	decide := func(use, short, long, action string, params func(cmd *cobra.Command) withdrawal.DecideParams,
		run func(cmd *cobra.Command, s *withdrawal.Service, p withdrawal.DecideParams) (any, string, error)) *cobra.Command {
		c := &cobra.Command{
			Use: use, Short: short, Long: long, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				id, err := withdrawalID(args[0])
				if err != nil {
					return err
				}
				return withApp(cmd, func(a *app.App) error {
					p := params(cmd)
					p.WithdrawalID = id
					env, err := signDecision(cmd, a.Withdrawals, keyPath, action, &p)
					if err != nil {
						return fmt.Errorf("%s: %w", id, err)
					}
					p.Signature = env
					res, summary, err := run(cmd, a.Withdrawals, p)
					if err != nil {
						return fmt.Errorf("%s: %w", id, err)
					}
					return showLine(cmd, res, "%s\n", summary)
				})
			},
		}
		keyFlag(c, &keyPath)
		return c
	}
	approve := decide("approve ID --key FILE [--note TEXT]", "Approve a withdrawal waiting for an operator",
		`Approve a withdrawal in pending_approval, signed with your operator key: the signature states the
asset, the gross, the destination and the note, and the service refuses it if the withdrawal says
otherwise. The service then pays it, except USDT_TRC20: send the printed amount from the printed
wallet yourself, then report the transaction (mark-broadcast). Above the asset's four-eyes
threshold a second, different operator must approve too, with their own key.`, audit.WithdrawalApprove,
		func(cmd *cobra.Command) withdrawal.DecideParams {
			var p withdrawal.DecideParams
			if cmd.Flags().Changed("note") {
				p.Note = &note
			}
			return p
		},
		func(cmd *cobra.Command, s *withdrawal.Service, p withdrawal.DecideParams) (any, string, error) {
			v, _, err := s.Approve(cmd.Context(), p, nil)
			if err != nil {
				return nil, "", err
			}
			msg := fmt.Sprintf("withdrawal %s is %s (approved by %s)", v.WithdrawalID, v.Status, dashIfNil(v.ApprovedBy))
			switch {
			case v.ApprovalsNeeded > 0:
				msg = fmt.Sprintf("withdrawal %s: approval by %s recorded; %d more approval by a different operator is needed (four-eyes)",
					v.WithdrawalID, v.Approvals[len(v.Approvals)-1].Actor, v.ApprovalsNeeded)
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
	reject := decide("reject ID --key FILE [--reason TEXT]", "Reject a withdrawal waiting for an operator; its hold returns at once",
		"Reject a withdrawal in pending_approval, signed with your operator key: the gross returns to the\nuser's available balance in the same transaction and the withdrawal reads refunded, with the\nreason as failure_reason.",
		audit.WithdrawalReject,
		func(cmd *cobra.Command) withdrawal.DecideParams {
			var p withdrawal.DecideParams
			if cmd.Flags().Changed("reason") {
				p.Reason = &reason
			}
			return p
		},
		func(cmd *cobra.Command, s *withdrawal.Service, p withdrawal.DecideParams) (any, string, error) {
			v, _, err := s.Reject(cmd.Context(), p, nil)
			if err != nil {
				return nil, "", err
			}
			return v, fmt.Sprintf("withdrawal %s is %s: %s %s returned to %s (%s)", v.WithdrawalID, v.Status, v.AmountGross, v.Asset,
				holderName(v.ExternalUserID, v.PlatformAccount), dashIfNil(v.FailureReason)), nil
		})
	reject.Flags().StringVar(&reason, "reason", "", "why, shown to the platform as failure_reason")
	release := decide("release ID --key FILE --attestation TEXT", "Return the hold of a withdrawal whose payout did not and will not complete",
		`Release is the only way to return a hold once a payout may exist (approved, submitted, broadcast or
failed). Attest, in 10 to 2000 characters, what you checked: that no payout exists or can still
complete. The attestation is signed with your operator key and stored on the withdrawal, which
reads refunded.`, audit.WithdrawalRelease,
		func(*cobra.Command) withdrawal.DecideParams { return withdrawal.DecideParams{Attestation: attestation} },
		func(cmd *cobra.Command, s *withdrawal.Service, p withdrawal.DecideParams) (any, string, error) {
			v, _, err := s.Release(cmd.Context(), p, nil)
			if err != nil {
				return nil, "", err
			}
			return v, fmt.Sprintf("withdrawal %s is %s: %s %s returned to %s (released by %s)", v.WithdrawalID, v.Status, v.AmountGross,
				v.Asset, holderName(v.ExternalUserID, v.PlatformAccount), dashIfNil(v.ReleasedBy)), nil
		})
	release.Flags().StringVar(&attestation, "attestation", "", "what you checked: no payout exists or can still complete (10 to 2000 characters)")
	_ = release.MarkFlagRequired("attestation")

	markBroadcast := decide("mark-broadcast ID --key FILE --txid TXID", "Report the USDT_TRC20 transfer you sent for an approved withdrawal",
		`After approving a USDT_TRC20 withdrawal and sending the printed amount from the hot wallet yourself,
report the transaction, signed with your operator key (the signature states the amount sent, the
destination and the txid). The service reads it from the TRON node and checks it against the
withdrawal (the USDT contract, the hot wallet as sender, the destination, the net amount, a
successful receipt, one Transfer event); any mismatch is refused and named. The withdrawal becomes
broadcast, and confirmed once its block is solidified.`, audit.WithdrawalMarkBroadcast,
		func(*cobra.Command) withdrawal.DecideParams {
			return withdrawal.DecideParams{Txid: strings.TrimSpace(txid)}
		},
		func(cmd *cobra.Command, s *withdrawal.Service, p withdrawal.DecideParams) (any, string, error) {
			v, _, err := s.MarkBroadcast(cmd.Context(), p, nil)
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

// signDecision reads the withdrawal of p, says on standard error (unless
// --json) what the operator signs, and signs action's statement of it with
// the key at keyPath (withdrawal.DecisionExpect).
func signDecision(cmd *cobra.Command, s *withdrawal.Service, keyPath, action string, p *withdrawal.DecideParams) (*operator.Envelope, error) {
	w, err := s.Get(cmd.Context(), p.WithdrawalID)
	if err != nil {
		return nil, err
	}
	views, err := s.AdminViews(cmd.Context(), []withdrawal.Withdrawal{w})
	if err != nil {
		return nil, err
	}
	x := withdrawal.DecisionExpect(action, views[0], *p)
	if !jsonFlag(cmd) {
		facts := make([]string, 0, len(x.Facts))
		for _, k := range slices.Sorted(maps.Keys(x.Facts)) {
			facts = append(facts, fmt.Sprintf("%s=%q", k, x.Facts[k]))
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "signing %s of %s: %s\n", x.Action, x.Resource, strings.Join(facts, " "))
	}
	return signWith(keyPath, x)
}

// approvalLine is one approval as show prints it.
func approvalLine(ap withdrawal.ApprovalView) string {
	verified := "unsigned"
	switch {
	case ap.Operator != nil && ap.SignatureVerified:
		verified = "signature verified, key " + dashIfNil(ap.KeyID)
	case ap.Operator != nil:
		verified = "SIGNATURE DOES NOT VERIFY, key " + dashIfNil(ap.KeyID)
	}
	line := fmt.Sprintf("%s at %s (%s)", ap.Actor, ap.ApprovedAt, verified)
	if ap.Note != nil {
		line += fmt.Sprintf(": %q", *ap.Note)
	}
	return line
}

func withdrawalID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fmt.Errorf("%q is not a withdrawal id", s)
	}
	return id, nil
}

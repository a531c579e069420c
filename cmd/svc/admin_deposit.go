package main

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"svc/cmd/svc/app"
	"svc/modules/deposit"
)

// adminDepositsCmd is `svc admin deposits`: the review queue and its
// resolution, as GET /v1/admin/deposits/review and POST .../resolve do.
func adminDepositsCmd() *cobra.Command {
	deposits := &cobra.Command{Use: "deposits", Short: "Deposits waiting for an operator: list the review queue, resolve an item"}
	review := reviewListCmd("review [--limit 50]", "List the deposits in review, oldest first, with why they are there", "deposits",
		(*deposit.Service).ReviewDetails,
		"the review queue is empty", "DEPOSIT\tUSER\tASSET\tIN REVIEW SINCE\tCREDITED\tREASON", reviewRows)

	var action, paymentID, key string
	resolve := &cobra.Command{
		Use:   "resolve ID --action credit|dismiss [--payment-id PAYMENT] --key FILE",
		Short: "Resolve a deposit in review, signed: credit what the processor says a payment was worth, or dismiss it",
		Long: `Resolve a deposit in review.

  --action credit   asks the payment processor what the payment was worth and credits exactly
                    that (there is no amount to give); --payment-id names the payment when the
                    deposit has more than one uncredited payment. An invoice marked settled by
                    hand with no payment is credited at the invoice's amount.
  --action dismiss  closes the review without crediting.

The decision is signed with an enrolled operator's key (--key, default $SVC_OPERATOR_KEY; an
approver's or an admin's): the statement names the deposit, the action, the asset, the user or
platform account, the payment when given and, for a credit, the amount the processor says now.
The payments' resolved_by and the audit trail record "op:NAME".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuid.Parse(args[0])
			if err != nil {
				return fmt.Errorf("%q is not a deposit id", args[0])
			}
			if action != deposit.ActionCredit && action != deposit.ActionDismiss {
				return fmt.Errorf("--action %q: want credit or dismiss", action)
			}
			if err := requireKey(key); err != nil {
				return err
			}
			p := deposit.ResolveParams{DepositID: id, Action: action}
			if paymentID != "" {
				p.PaymentID = &paymentID
			}
			return withApp(cmd, func(a *app.App) error {
				ctx := cmd.Context()
				pv, err := a.Deposits.Preview(ctx, p)
				if err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				if p.Signature, err = signWith(key, deposit.ResolveExpect(pv.Deposit, pv.Asset, action, p.PaymentID, pv.Credit)); err != nil {
					return err
				}
				res, _, err := a.Deposits.Resolve(ctx, p, nil)
				if err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				return showLine(cmd, res, "deposit %s is %s: credited %s %s by this resolution, %s in total (resolved by %s)\n",
					res.Deposit.DepositID, res.Deposit.Status, res.Credited, res.Deposit.Asset, res.Deposit.AmountCredited, signedBy(ctx, a, p.Signature))
			})
		},
	}
	resolve.Flags().StringVar(&action, "action", "", "credit or dismiss")
	resolve.Flags().StringVar(&paymentID, "payment-id", "", "for credit: which uncredited payment (needed when there are several)")
	keyFlag(resolve, &key)
	_ = resolve.MarkFlagRequired("action")

	var creditPayment, creditKey, reason string
	credit := &cobra.Command{
		Use:   "credit-after-dismissal ID --payment-id PAYMENT --reason TEXT --key FILE",
		Short: "Credit a payment that confirmed after its deposit was dismissed, signed (the deposit stays dismissed)",
		Long: `Credits one payment that arrived or confirmed after an operator dismissed its deposit (the
deposit.payment_after_dismissal alert names it), through the ledger as any deposit payment is:
at most once, with the reason in the audit trail. The deposit stays dismissed. Only a payment the
processor settled, with an exact amount.

The credit is signed with an enrolled operator's key (--key, default $SVC_OPERATOR_KEY; an
approver's or an admin's): the statement names the deposit, the payment, its amount, the asset,
the user or platform account and the reason. The payment's resolved_by and the audit trail
record "op:NAME".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuid.Parse(args[0])
			if err != nil {
				return fmt.Errorf("%q is not a deposit id", args[0])
			}
			if err := requireKey(creditKey); err != nil {
				return err
			}
			return withApp(cmd, func(a *app.App) error {
				ctx := cmd.Context()
				d, rows, err := a.Deposits.Snapshot(ctx, id)
				if err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				i := slices.IndexFunc(rows, func(p deposit.Payment) bool { return p.PaymentID == creditPayment })
				if i < 0 {
					return fmt.Errorf("%s: deposit %s has no payment %s", id, id, creditPayment)
				}
				x, err := a.Assets.Get(ctx, d.Asset)
				if err != nil {
					return err
				}
				env, err := signWith(creditKey, deposit.CreditAfterDismissalExpect(d, x, rows[i], reason))
				if err != nil {
					return err
				}
				p, err := a.Deposits.CreditAfterDismissal(ctx, deposit.CreditParams{DepositID: id, PaymentID: creditPayment, Reason: reason, Signature: env})
				if err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				return showLine(cmd, p, "payment %s of deposit %s credited: %s (resolved by %s)\n", p.PaymentID, id, p.Amount, dashIfNil(p.ResolvedBy))
			})
		},
	}
	credit.Flags().StringVar(&creditPayment, "payment-id", "", "the payment to credit (required)")
	credit.Flags().StringVar(&reason, "reason", "", "why, for the audit trail (10 to 2000 characters; required)")
	keyFlag(credit, &creditKey)
	_ = credit.MarkFlagRequired("payment-id")
	_ = credit.MarkFlagRequired("reason")

	deposits.AddCommand(review, resolve, credit)
	return deposits
}

// adminWalletAlertsCmd is `svc admin wallet-alerts`: BTC wallet receives
// that match no deposit payment.
func adminWalletAlertsCmd() *cobra.Command {
	alerts := &cobra.Command{Use: "wallet-alerts", Short: "BTC wallet receives that match no deposit payment"}
	list := reviewListCmd("list [--limit 50]", "List wallet alerts, newest first", "alerts",
		(*deposit.Service).WalletAlerts,
		"no wallet alerts", "ID\tASSET\tTXID\tAMOUNT\tCONFIRMATIONS\tDETECTED\tNOTE", walletAlertRow)
	alerts.AddCommand(list)
	return alerts
}

// reviewListCmd is a command that lists at most --limit of what the deposit
// service's read returns (--limit as the review queue takes it: 1 to
// deposit.MaxReviewLimit), as a table or, with --json, as JSON; what names
// the items in the flag's help.
func reviewListCmd[T any](use, short, what string, read func(s *deposit.Service, ctx context.Context, limit int) ([]T, error),
	none, header string, row func(tw io.Writer, x T)) *cobra.Command {
	var limit int
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkLimit(limit, deposit.MaxReviewLimit); err != nil {
				return err
			}
			return withApp(cmd, func(a *app.App) error {
				items, err := read(a.Deposits, cmd.Context(), limit)
				if err != nil {
					return err
				}
				return showTable(cmd, none, header, items, row)
			})
		},
	}
	c.Flags().IntVar(&limit, "limit", deposit.DefaultReviewLimit, fmt.Sprintf("at most this many %s (1 to %d)", what, deposit.MaxReviewLimit))
	return c
}

// reviewRows is a deposit in review's row, with its invoice's and its
// payments' reasons under it.
func reviewRows(tw io.Writer, it deposit.ReviewDetail) {
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", it.DepositID, holderName(it.ExternalUserID, it.PlatformAccount), it.Asset, dashIfNil(it.ReviewSince),
		it.AmountCredited, dashIfNil(it.ReviewReason))
	if it.InvoiceReview != nil {
		fmt.Fprintf(tw, "\t\t\t\t\tinvoice: %s\n", *it.InvoiceReview)
	}
	for _, p := range it.Payments {
		if reason, ok := it.Reasons[p.PaymentID]; ok {
			fmt.Fprintf(tw, "\t\t\t\t\tpayment %s (%s): %s\n", p.PaymentID, p.Amount, reason)
		}
	}
}

func walletAlertRow(tw io.Writer, w deposit.WalletAlertView) {
	confs := "-"
	if w.Confirmations != nil {
		confs = fmt.Sprint(*w.Confirmations)
	}
	fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", w.ID, w.Asset, w.Txid, w.Amount, confs, w.DetectedAt, dashIfNil(w.Note))
}

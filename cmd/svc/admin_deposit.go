package main

import (
	"context"
	"fmt"
	"io"

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

	var (
		action, paymentID, as string
	)
	resolve := &cobra.Command{
		Use:   "resolve ID --action credit|dismiss [--payment-id PAYMENT] [--as NAME]",
		Short: "Resolve a deposit in review: credit what the processor says a payment was worth, or dismiss it",
		Long: `Resolve a deposit in review.

  --action credit   asks the payment processor what the payment was worth and credits exactly
                    that (there is no amount to give); --payment-id names the payment when the
                    deposit has more than one uncredited payment. An invoice marked settled by
                    hand with no payment is credited at the invoice's amount.
  --action dismiss  closes the review without crediting.

The decision is recorded as resolved by "cli:NAME" (--as, default the login name), also in
the audit trail.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuid.Parse(args[0])
			if err != nil {
				return fmt.Errorf("%q is not a deposit id", args[0])
			}
			if action != deposit.ActionCredit && action != deposit.ActionDismiss {
				return fmt.Errorf("--action %q: want credit or dismiss", action)
			}
			actor, err := loginActor(as)
			if err != nil {
				return err
			}
			by := actor.ID
			p := deposit.ResolveParams{DepositID: id, Action: action, By: by, Actor: actor}
			if paymentID != "" {
				p.PaymentID = &paymentID
			}
			return withApp(cmd, func(a *app.App) error {
				res, _, err := a.Deposits.Resolve(cmd.Context(), p, nil)
				if err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				return showLine(cmd, res, "deposit %s is %s: credited %s %s by this resolution, %s in total (resolved by %s)\n",
					res.Deposit.DepositID, res.Deposit.Status, res.Credited, res.Deposit.Asset, res.Deposit.AmountCredited, by)
			})
		},
	}
	resolve.Flags().StringVar(&action, "action", "", "credit or dismiss")
	resolve.Flags().StringVar(&paymentID, "payment-id", "", "for credit: which uncredited payment (needed when there are several)")
	asFlag(resolve, &as, "the operator's name recorded as the resolver (default: the login name)")
	_ = resolve.MarkFlagRequired("action")

	var creditPayment, creditAs, reason string
	credit := &cobra.Command{
		Use:   "credit-after-dismissal ID --payment-id PAYMENT --reason TEXT --as NAME",
		Short: "Credit a payment that confirmed after its deposit was dismissed (the deposit stays dismissed)",
		Long: `Credits one payment that arrived or confirmed after an operator dismissed its deposit (the
deposit.payment_after_dismissal alert names it), through the ledger as any deposit payment is:
at most once, resolved by cli:NAME, with the reason in the audit trail. The deposit stays
dismissed. Only a payment the processor settled, with an exact amount.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuid.Parse(args[0])
			if err != nil {
				return fmt.Errorf("%q is not a deposit id", args[0])
			}
			if creditAs == "" {
				return errAsRequired("credit")
			}
			actor, err := loginActor(creditAs)
			if err != nil {
				return err
			}
			return withApp(cmd, func(a *app.App) error {
				p, err := a.Deposits.CreditAfterDismissal(cmd.Context(), id, creditPayment, actor, reason)
				if err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				return showLine(cmd, p, "payment %s of deposit %s credited: %s (resolved by %s)\n", p.PaymentID, id, p.Amount, actor.ID)
			})
		},
	}
	credit.Flags().StringVar(&creditPayment, "payment-id", "", "the payment to credit (required)")
	credit.Flags().StringVar(&reason, "reason", "", "why, for the audit trail (10 to 2000 characters; required)")
	asFlag(credit, &creditAs, asRequiredUsage)
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

package deposit

import (
	"context"
	"errors"
	"fmt"

	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/platform/btcpay"
	"svc/platform/db"
)

// reconcileOther handles an invoice that carries the deposit's orderId but
// is not the invoice the deposit recorded. A creation whose processor call
// timed out can leave one behind: the processor created it after the
// service gave up, and the retry, not finding it yet, created the one the
// deposit has. Nobody was shown its address, but money that reaches it is
// the deposit's user's all the same (a pooled address, a wallet reusing
// one), so it is never ignored: each of its payments is recorded under the
// deposit, never credited automatically, and the deposit goes to review
// with an alert; an operator credits it (svc admin deposits resolve, which
// finds the payment on the other invoice) or dismisses it. An unpaid one
// changes nothing. A different orderId is not this deposit's.
func (s *Service) reconcileOther(ctx context.Context, d Deposit, invoiceID string) error {
	if s.Processor == nil {
		return ErrNoProcessor
	}
	inv, err := s.Processor.GetInvoice(ctx, invoiceID)
	if errors.Is(err, btcpay.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reconcile deposit %s: other invoice %s: %w", d.ID, invoiceID, err)
	}
	if inv.OrderID() != d.ID.String() {
		s.log().ErrorContext(ctx, "deposit: webhook for another invoice whose orderId is not this deposit's; ignored",
			"deposit_id", d.ID, "invoice_id", invoiceID)
		return nil
	}
	methods, err := s.Processor.InvoicePaymentMethods(ctx, inv.ID, false)
	if err != nil {
		return fmt.Errorf("reconcile deposit %s: other invoice %s: %w", d.ID, invoiceID, err)
	}
	return db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		d, err := lockDeposit(ctx, tx, d.ID)
		if err != nil {
			return err
		}
		a, rows, err := assetAndPayments(ctx, tx, d)
		if err != nil {
			return err
		}
		now := s.now()
		reason := fmt.Sprintf("%s (%s), not the deposit's own (%s): a creation retried while the processor was slow made two; "+
			"check the invoice in the processor, then credit the payment or dismiss it", ReasonOtherInvoice, inv.ID, deref(d.InvoiceID))
		var reviews []reviewItem
		for _, m := range methods {
			if !btcpay.SameMethod(m.PaymentMethodID, a.PaymentMethod) {
				continue // money in another asset: the deposit's own reconcile alerts on that for its invoice
			}
			for _, pp := range m.Payments {
				p, _ := s.classify(d, a, inv, nil, m.PaymentMethodID, pp, now)
				if p.ProcessorStatus == string(btcpay.PaymentInvalid) {
					continue
				}
				p.ReviewReason = &reason
				inserted, err := insertPayment(ctx, tx, &p)
				if err != nil {
					return err
				}
				if !inserted {
					continue // recorded before (a repeated webhook), or under another deposit
				}
				rows = append(rows, p)
				reviews = append(reviews, reviewItem{payment: len(rows) - 1, reason: reason, trigger: NeedsReview})
				s.log().ErrorContext(ctx, "deposit: payment to another invoice carrying this deposit's orderId; an operator decides",
					"deposit_id", d.ID, "invoice_id", inv.ID, "deposit_invoice_id", deref(d.InvoiceID), "payment_id", pp.ID)
				if err := s.raise(ctx, tx, alert.Params{Type: AlertOtherInvoice, Subject: d.ID.String() + ":" + pp.ID,
					Detail: fmt.Sprintf("Deposit %s (%s) received payment %s of %s on invoice %s, which carries the deposit's orderId but is not "+
						"the invoice it recorded (%s). Nothing was credited: check the invoice in the processor, then "+
						"svc admin deposits resolve %s --action credit --payment-id %s, or dismiss it.",
						d.ID, d.Asset, pp.ID, p.Amount, inv.ID, deref(d.InvoiceID), d.ID, pp.ID)}); err != nil {
					return err
				}
			}
		}
		if len(reviews) == 0 {
			return nil
		}
		switch d.Status {
		case StatusPending, StatusConfirming, StatusSettled, StatusExpired, StatusReview:
			c := newChange(d)
			if err := s.toReview(ctx, &c, &d, reviews[0], rows, a); err != nil {
				return err
			}
			return s.write(ctx, tx, &d, &c)
		}
		// Dismissed (or not yet created): the alert says it; the payment
		// stays recorded for the operator.
		return nil
	})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

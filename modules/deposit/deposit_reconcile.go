package deposit

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/govalues/decimal"
	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/modules/asset"
	"svc/modules/event"
	"svc/modules/ingress"
	"svc/modules/ledger"
	"svc/platform/btcpay"
	"svc/platform/db"
	"svc/platform/money"
)

// Alert types raised by reconciliation.
const (
	AlertInvoiceMissing       = "deposit.invoice_missing"
	AlertPaymentAfterDismiss  = "deposit.payment_after_dismissal"
	AlertCreditedInvalidation = "deposit.credited_payment_invalidated"
	// AlertPaymentClash: the processor reports under this deposit's invoice
	// a payment the service recorded under another deposit.
	AlertPaymentClash = "deposit.payment_id_clash"
	// AlertOtherMethod: a payment through a payment method the deposit's
	// asset does not use (money in another asset).
	AlertOtherMethod = "deposit.payment_other_method"
	// AlertOtherInvoice: a payment to another invoice carrying the
	// deposit's orderId than the one the deposit recorded.
	AlertOtherInvoice = "deposit.payment_other_invoice"
)

// Review reasons (shown to operators by the CLI and in
// deposit.review_required).
const (
	ReasonAddressClash  = "the pooled address was handed out while another open deposit still held it"
	ReasonAfterExpiry   = "payment arrived after the invoice expired"
	ReasonLaterPayment  = "a later payment to the address of a settled or expired deposit"
	ReasonMarkedSettled = "the invoice was marked settled by hand in the processor"
	ReasonMarkedInvalid = "the invoice was marked invalid by hand in the processor while it had payments"
	ReasonUnderSettled  = "the processor settled the invoice without enough settled payments"
	ReasonNotConfirmed  = "payments did not confirm before the processor stopped monitoring the invoice"
	ReasonAllInvalid    = "every payment to the invoice was invalidated (replaced or double spent)"
	ReasonAfterDecision = "payment confirmed after an operator had dismissed the deposit or credited its invoice's marked value"
	ReasonPaymentClash  = "the processor reports a payment under this invoice that is already recorded under another deposit"
	// ReasonOtherInvoice starts the reason of a payment to another invoice
	// of the deposit (see reconcileOther).
	ReasonOtherInvoice = "paid to another invoice carrying this deposit's orderId"
)

// InvoiceEvent reconciles the deposit a processor invoice webhook names (by
// metadata.orderId, else by invoice id); it is the ingress's
// InvoiceHandler. Webhooks are only hints: the reconcile reads the invoice
// and its payments from the processor, so a duplicated, reordered or lost
// webhook changes nothing. Events about invoices that are not deposits are
// ignored. An error means the reconcile could not run (the processor or
// the database is unreachable) and the delivery is retried.
func (s *Service) InvoiceEvent(ctx context.Context, e ingress.InvoiceEvent) error {
	var (
		d     Deposit
		found bool
	)
	if id, err := uuid.Parse(e.OrderID); err == nil {
		d, err = s.Get(ctx, id)
		switch {
		case err == nil:
			found = true
		case !errors.Is(err, ErrNotFound):
			return err
		}
	}
	if !found && e.InvoiceID != "" {
		var err error
		if d, found, err = depositByInvoice(ctx, s.DB, e.InvoiceID); err != nil {
			return err
		}
	}
	if !found {
		s.log().DebugContext(ctx, "deposit: webhook for an invoice that is no deposit", "invoice_id", e.InvoiceID, "type", e.Type)
		return nil
	}
	if d.InvoiceID != nil && e.InvoiceID != "" && *d.InvoiceID != e.InvoiceID {
		return s.reconcileOther(ctx, d, e.InvoiceID)
	}
	folded, err := s.webhooks.do(d.ID, func() error { return s.Reconcile(ctx, d.ID) })
	if folded {
		s.log().DebugContext(ctx, "deposit: webhook folded into the reconciliation in progress", "deposit_id", d.ID, "type", e.Type)
	}
	return err
}

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
		a, err := (&asset.Store{DB: tx}).Get(ctx, d.Asset)
		if err != nil {
			return err
		}
		byDeposit, err := payments(ctx, tx, d.ID)
		if err != nil {
			return err
		}
		rows := byDeposit[d.ID]
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
				res, err := tx.NewInsert().Model(&p).On("CONFLICT (payment_id) DO NOTHING").Exec(ctx)
				if err != nil {
					return fmt.Errorf("record payment %s of deposit %s: %w", pp.ID, d.ID, err)
				}
				if n, _ := res.RowsAffected(); n == 0 {
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
			return s.toReview(ctx, tx, &d, reviews[0], rows, a)
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

// Reconcile brings one deposit in line with the processor: it reads the
// invoice and every payment (the network calls come first, outside any
// transaction), then applies what changed in one transaction that holds
// the deposit's row lock. It is idempotent and safe to run concurrently.
// A creating deposit is completed if its invoice exists (never created).
func (s *Service) Reconcile(ctx context.Context, id uuid.UUID) error {
	d, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	if d.Status == StatusFailed {
		return nil
	}
	if s.Processor == nil {
		return ErrNoProcessor
	}
	if d.Status == StatusCreating {
		adopted, err := s.adopt(ctx, d)
		if err != nil || !adopted {
			return err
		}
		if d, err = s.Get(ctx, id); err != nil {
			return err
		}
	}
	if d.InvoiceID == nil {
		return nil
	}
	inv, err := s.Processor.GetInvoice(ctx, *d.InvoiceID)
	if errors.Is(err, btcpay.ErrNotFound) {
		s.log().ErrorContext(ctx, "deposit: the processor does not know the deposit's invoice", "deposit_id", d.ID, "invoice_id", *d.InvoiceID)
		return db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
			if err := s.markPolled(ctx, tx, id); err != nil {
				return err
			}
			return s.raise(ctx, tx, alert.Params{Type: AlertInvoiceMissing, Subject: d.ID.String(),
				Detail: fmt.Sprintf("The processor answers 404 for invoice %s of deposit %s: check the store; the deposit is not reconciled.", *d.InvoiceID, d.ID)})
		})
	}
	if err != nil {
		return fmt.Errorf("reconcile deposit %s: %w", id, err)
	}
	methods, err := s.Processor.InvoicePaymentMethods(ctx, inv.ID, false)
	if err != nil {
		return fmt.Errorf("reconcile deposit %s: %w", id, err)
	}
	return db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		return s.apply(ctx, tx, id, inv, methods)
	})
}

// adopt completes a creating deposit whose invoice exists at the processor
// (an answer lost on the way back, a crash after the call). It reports
// whether it did.
func (s *Service) adopt(ctx context.Context, d Deposit) (bool, error) {
	list, err := s.Processor.InvoicesByOrderID(ctx, d.ID.String())
	if err != nil {
		return false, fmt.Errorf("adopt deposit %s: %w", d.ID, err)
	}
	inv, found := s.pickInvoice(d, list)
	if !found {
		return false, db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error { return s.markPolled(ctx, tx, d.ID) })
	}
	methods, err := s.Processor.InvoicePaymentMethods(ctx, inv.ID, true)
	if err != nil {
		return false, fmt.Errorf("adopt deposit %s: %w", d.ID, err)
	}
	a, err := s.assets().Get(ctx, d.Asset)
	if err != nil {
		return false, err
	}
	pm, ok := methodOf(methods, a.PaymentMethod)
	if !ok || pm.Destination == "" {
		s.log().ErrorContext(ctx, "deposit: the invoice found for a creating deposit offers no address", "deposit_id", d.ID, "invoice_id", inv.ID)
		return false, nil
	}
	if _, _, err := s.issue(ctx, d.ID, inv, pm.Destination, nil); err != nil {
		return false, err
	}
	s.log().InfoContext(ctx, "deposit: adopted the processor's invoice of a creating deposit", "deposit_id", d.ID, "invoice_id", inv.ID)
	return true, nil
}

// markPolled records when the deposit was last reconciled; real
// parameters (db.Querier): every poll and webhook of every open deposit.
func (s *Service) markPolled(ctx context.Context, tx bun.Tx, id uuid.UUID) error {
	_, err := db.Exec(ctx, tx, "UPDATE deposits SET polled_at = $1 WHERE id = $2", s.now(), id)
	return err
}

// reviewItem is one reason the deposit needs an operator.
type reviewItem struct {
	payment int // index of the payment in the deposit's rows; -1 for an invoice-level reason
	reason  string
	trigger Trigger
}

// apply is the transactional half of Reconcile.
func (s *Service) apply(ctx context.Context, tx bun.Tx, id uuid.UUID, inv btcpay.Invoice, methods []btcpay.InvoicePayMethod) error {
	d, err := lockDeposit(ctx, tx, id)
	if err != nil {
		return err
	}
	if d.Status == StatusCreating || d.Status == StatusFailed || d.InvoiceID == nil || *d.InvoiceID != inv.ID {
		return nil
	}
	a, err := (&asset.Store{DB: tx}).Get(ctx, d.Asset)
	if err != nil {
		return err
	}
	byDeposit, err := payments(ctx, tx, d.ID)
	if err != nil {
		return err
	}
	rows := byDeposit[d.ID]
	index := make(map[string]int, len(rows))
	for i, p := range rows {
		index[p.PaymentID] = i
	}
	grace, err := graceHolders(ctx, tx, d)
	if err != nil {
		return err
	}
	now := s.now()
	var (
		seen    []int // indexes in rows of the payments seen for the first time, not invalid
		reviews []reviewItem
	)
	var clashes []string
	for _, m := range methods {
		if !btcpay.SameMethod(m.PaymentMethodID, a.PaymentMethod) {
			// Money in another asset: not this deposit's to credit. One
			// operator alert per payment.
			for _, pp := range m.Payments {
				s.log().ErrorContext(ctx, "deposit: a payment through a payment method the deposit does not use",
					"deposit_id", d.ID, "method", m.PaymentMethodID, "payment_id", pp.ID)
				if err := s.raise(ctx, tx, alert.Params{Type: AlertOtherMethod, Subject: d.ID.String() + ":" + pp.ID,
					Detail: fmt.Sprintf("Deposit %s (%s) received payment %s of %s through %s, a payment method it does not use; nothing was credited. "+
						"Check the invoice %s in the processor and decide by hand (a ledger correction, or a refund).",
						d.ID, d.Asset, pp.ID, pp.Value, m.PaymentMethodID, inv.ID)}); err != nil {
					return err
				}
			}
			continue
		}
		for _, pp := range m.Payments {
			if i, ok := index[pp.ID]; ok {
				if err := s.refresh(ctx, tx, d, &rows[i], pp, now); err != nil {
					return err
				}
				continue
			}
			p, item := s.classify(d, a, inv, grace, m.PaymentMethodID, pp, now)
			res, err := tx.NewInsert().Model(&p).On("CONFLICT (payment_id) DO NOTHING").Exec(ctx)
			if err != nil {
				return fmt.Errorf("record payment %s of deposit %s: %w", pp.ID, d.ID, err)
			}
			if n, _ := res.RowsAffected(); n == 0 {
				// Recorded under another deposit: never under two. This
				// deposit goes to review; its other payments carry on.
				var other uuid.UUID
				if err := tx.NewSelect().Model((*Payment)(nil)).Column("deposit_id").Where("payment_id = ?", pp.ID).Scan(ctx, &other); err != nil {
					return fmt.Errorf("find the deposit of payment %s: %w", pp.ID, err)
				}
				clashes = append(clashes, fmt.Sprintf("payment %s is recorded under deposit %s", pp.ID, other))
				if err := s.raise(ctx, tx, alert.Params{Type: AlertPaymentClash, Subject: d.ID.String() + ":" + pp.ID,
					Detail: fmt.Sprintf("The processor reports payment %s of %s under invoice %s of deposit %s, but the service recorded it under deposit %s. "+
						"It is not credited twice; deposit %s is in review.", pp.ID, pp.Value, inv.ID, d.ID, other, d.ID)}); err != nil {
					return err
				}
				continue
			}
			rows = append(rows, p)
			index[p.PaymentID] = len(rows) - 1
			if p.ProcessorStatus == string(btcpay.PaymentInvalid) {
				continue
			}
			seen = append(seen, len(rows)-1)
			if item.reason != "" {
				item.payment = len(rows) - 1
				reviews = append(reviews, item)
			}
		}
	}
	if d.InvoiceReview == nil {
		reason := invoiceReview(inv, methods, rows)
		if len(clashes) > 0 {
			reason = ReasonPaymentClash + ": " + strings.Join(clashes, "; ")
		}
		if reason != "" {
			if _, err := tx.NewUpdate().Model((*Deposit)(nil)).Set("invoice_review = ?", reason).Where("id = ?", d.ID).Exec(ctx); err != nil {
				return err
			}
			d.InvoiceReview = &reason
			reviews = append(reviews, reviewItem{payment: -1, reason: reason, trigger: NeedsReview})
		}
	}
	// Every confirmed payment that needs no operator is credited: each
	// payment stands on its own. Except once an operator has decided the
	// deposit as a whole (dismissed it, or credited the invoice's
	// hand-marked value): a payment confirming after that may be the very
	// money the decision covered, so it goes to an operator instead.
	decided := d.Status == StatusDismissed || hasMarkedCredit(rows)
	for i := range rows {
		p := &rows[i]
		if p.ReviewReason == nil && !p.Credited && p.ResolvedBy == nil && p.ProcessorStatus == string(btcpay.PaymentSettled) &&
			p.Units != nil && *p.Units > 0 {
			if decided {
				reason := ReasonAfterDecision
				if _, err := tx.NewUpdate().Model((*Payment)(nil)).Set("review_reason = ?, updated_at = ?", reason, now).
					Where("id = ?", p.ID).Exec(ctx); err != nil {
					return err
				}
				p.ReviewReason = &reason
				reviews = append(reviews, reviewItem{payment: i, reason: reason, trigger: NeedsReview})
				continue
			}
			if err := s.credit(ctx, tx, d, p, *p.Units, a.Decimals, ResolvedAuto, now); err != nil {
				return err
			}
		}
	}
	if d.Status == StatusPending && len(seen) > 0 {
		first := rows[seen[0]]
		if err := s.transit(ctx, tx, &d, PaymentSeen, func(d *Deposit) any {
			return event.DepositDetectedData{DepositID: d.ID.String(), ExternalUserID: d.ExternalUserID, Asset: d.Asset,
				Status: string(d.Status), PaymentID: first.PaymentID, Amount: displayAmount(first, a.Decimals)}
		}); err != nil {
			return err
		}
	}
	switch {
	case len(reviews) > 0 && d.Status == StatusDismissed:
		// One alert per payment (and one for the invoice itself): an alert
		// acknowledged for the first payment must not hide the next.
		for _, item := range reviews {
			subject, what := d.ID.String()+":invoice", "the invoice"
			if item.payment >= 0 {
				p := rows[item.payment]
				subject, what = d.ID.String()+":"+p.PaymentID, fmt.Sprintf("payment %s of %s", p.PaymentID, p.Amount)
			}
			s.log().ErrorContext(ctx, "deposit: money arrived for a dismissed deposit", "deposit_id", d.ID, "subject", subject, "reason", item.reason)
			if err := s.raise(ctx, tx, alert.Params{Type: AlertPaymentAfterDismiss, Subject: subject,
				Detail: fmt.Sprintf("Deposit %s was dismissed, and then %s: %s. Nothing was credited; decide by hand (a ledger correction).",
					d.ID, what, item.reason)}); err != nil {
				return err
			}
		}
	case len(reviews) > 0:
		if err := s.toReview(ctx, tx, &d, reviews[0], rows, a); err != nil {
			return err
		}
	default:
		if err := s.advance(ctx, tx, &d, inv, rows, a); err != nil {
			return err
		}
	}
	return s.markPolled(ctx, tx, d.ID)
}

// advance applies the transitions that need no operator: confirming ->
// settled once every payment is credited, pending -> expired when the
// window closed with nothing received, and confirming -> review when every
// payment seen was invalidated and the window closed.
func (s *Service) advance(ctx context.Context, tx bun.Tx, d *Deposit, inv btcpay.Invoice, rows []Payment, a asset.Asset) error {
	valid, allCredited := 0, true
	for _, p := range rows {
		if p.ProcessorStatus == string(btcpay.PaymentInvalid) && !p.Credited {
			continue
		}
		valid++
		if !p.Credited && p.ReviewReason == nil {
			allCredited = false
		}
	}
	closed := inv.Status == btcpay.InvoiceExpired || inv.Status == btcpay.InvoiceInvalid
	switch {
	case d.Status == StatusConfirming && valid > 0 && allCredited && credited(rows) > 0:
		return s.transit(ctx, tx, d, PaymentConfirmed, func(d *Deposit) any {
			return event.DepositSettledData{DepositID: d.ID.String(), ExternalUserID: d.ExternalUserID, Asset: d.Asset,
				Status: string(d.Status), AmountCredited: money.Format(credited(rows), a.Decimals)}
		})
	case d.Status == StatusPending && valid == 0 && closed:
		// The processor may close the window early (expired by hand, or a
		// store setting): the deposit then shows when it really closed.
		if now := s.now(); inv.Status == btcpay.InvoiceExpired && d.ExpiresAt != nil && d.ExpiresAt.After(now) {
			if _, err := tx.NewUpdate().Model((*Deposit)(nil)).Set("expires_at = ?", now).Where("id = ?", d.ID).Exec(ctx); err != nil {
				return fmt.Errorf("deposit %s: record the early expiry: %w", d.ID, err)
			}
			d.ExpiresAt = &now
		}
		return s.transit(ctx, tx, d, WindowClosed, func(d *Deposit) any {
			return event.DepositExpiredData{DepositID: d.ID.String(), ExternalUserID: d.ExternalUserID, Asset: d.Asset,
				Status: string(d.Status)}
		})
	case d.Status == StatusConfirming && valid == 0 && closed:
		return s.toReview(ctx, tx, d, reviewItem{payment: -1, reason: ReasonAllInvalid, trigger: NeedsReview}, rows, a)
	}
	return nil
}

// toReview moves d to review for item, with its event.
func (s *Service) toReview(ctx context.Context, tx bun.Tx, d *Deposit, item reviewItem, rows []Payment, a asset.Asset) error {
	if _, err := tx.NewUpdate().Model((*Deposit)(nil)).Set("review_reason = ?", item.reason).Where("id = ?", d.ID).Exec(ctx); err != nil {
		return err
	}
	d.ReviewReason = &item.reason
	s.log().WarnContext(ctx, "deposit: needs an operator", "deposit_id", d.ID, "reason", item.reason)
	return s.transit(ctx, tx, d, item.trigger, func(d *Deposit) any {
		data := event.DepositReviewRequiredData{DepositID: d.ID.String(), ExternalUserID: d.ExternalUserID, Asset: d.Asset,
			Status: string(d.Status), AmountCredited: money.Format(credited(rows), a.Decimals), ReviewReason: item.reason}
		if item.payment >= 0 {
			p := rows[item.payment]
			pid, amt := p.PaymentID, displayAmount(p, a.Decimals)
			data.PaymentID, data.Amount = &pid, &amt
		}
		return data
	})
}

// classify turns a payment seen for the first time into its row, and says
// whether it needs an operator.
func (s *Service) classify(d Deposit, a asset.Asset, inv btcpay.Invoice, grace []holder, method string, pp btcpay.Payment, now time.Time) (Payment, reviewItem) {
	p := Payment{DepositID: d.ID, PaymentID: pp.ID, ProcessorStatus: string(pp.Status), ReceivedAt: pp.ReceivedDate.Time,
		CreatedAt: now, UpdatedAt: now}
	if p.ReceivedAt.IsZero() {
		p.ReceivedAt = now
	}
	switch p.ProcessorStatus {
	case string(btcpay.PaymentProcessing), string(btcpay.PaymentSettled), string(btcpay.PaymentInvalid):
	default:
		p.ProcessorStatus = string(btcpay.PaymentProcessing) // an unknown status is never taken as settled
	}
	if btcpay.SameMethod(method, btcpay.MethodBTCChain) || btcpay.SameMethod(method, btcpay.MethodUSDTTron) {
		if i := strings.LastIndexByte(pp.ID, '-'); i > 0 {
			txid := pp.ID[:i]
			p.Txid = &txid
		}
	}
	if exp := inv.ExpirationTime.Time; !exp.IsZero() {
		p.AfterExpiration = !p.ReceivedAt.Before(exp)
	}
	var reasons []string
	trigger := NeedsReview
	worth, err := pp.Value.Decimal().Sub(pp.Fee.Decimal())
	switch {
	case err != nil || worth.IsNeg():
		p.Amount = "0"
		reasons = append(reasons, fmt.Sprintf("the processor reports value %s and fee %s, which cannot be read as an amount", pp.Value, pp.Fee))
	default:
		p.Amount = worth.Trim(0).String()
		units, err := toUnits(p.Amount, a.Decimals)
		switch {
		case errors.Is(err, btcpay.ErrInexact):
			reasons = append(reasons, fmt.Sprintf("amount %s does not convert to whole smallest units (%d decimals); it is never rounded", p.Amount, a.Decimals))
		case err != nil:
			reasons = append(reasons, fmt.Sprintf("amount %s cannot be read: %v", p.Amount, err))
		default:
			p.Units = &units
			p.Amount = money.Format(units, a.Decimals)
			if units == 0 {
				reasons = append(reasons, "the payment is worth nothing after the processor's fee")
			} else if reason := s.outsideTolerance(d, a, units); reason != "" {
				reasons = append(reasons, reason)
			} else if pooled(d.Asset) && d.AmountExpected == nil {
				reasons = append(reasons, ReasonNoExpectedAmount)
			}
		}
	}
	// The most telling reason first.
	h, shared := inGrace(grace, p.ReceivedAt)
	switch {
	case d.AddressClash:
		reasons = append([]string{ReasonAddressClash}, reasons...)
	case shared:
		reasons = append([]string{fmt.Sprintf("arrived while the address was still reserved for deposit %s (%s), whose user may have paid late", h.ID, h.Status)}, reasons...)
	case p.AfterExpiration:
		reasons = append([]string{ReasonAfterExpiry}, reasons...)
	case d.ClosedAt != nil:
		reasons = append([]string{ReasonLaterPayment}, reasons...)
		trigger = LaterPayment
	}
	if len(reasons) == 0 {
		return p, reviewItem{payment: -1}
	}
	reason := strings.Join(reasons, "; ")
	p.ReviewReason = &reason
	if p.ProcessorStatus == string(btcpay.PaymentInvalid) {
		// Not money (yet): kept under review should it come back.
		return p, reviewItem{payment: -1}
	}
	return p, reviewItem{payment: -1, reason: reason, trigger: trigger}
}

// outsideTolerance checks a USDT payment against amount_expected: more than
// USDTTolerancePPM parts per million away goes to review. Other assets take
// amount_expected for display only.
func (s *Service) outsideTolerance(d Deposit, a asset.Asset, units int64) string {
	if !pooled(a.Code) || d.AmountExpected == nil {
		return ""
	}
	exp := *d.AmountExpected
	diff := new(big.Int).Sub(big.NewInt(units), big.NewInt(exp))
	diff.Abs(diff).Mul(diff, big.NewInt(1_000_000))
	limit := new(big.Int).Mul(big.NewInt(exp), big.NewInt(s.Config.USDTTolerancePPM))
	if diff.Cmp(limit) <= 0 {
		return ""
	}
	return fmt.Sprintf("USDT amount %s is more than %d ppm from amount_expected %s",
		money.Format(units, a.Decimals), s.Config.USDTTolerancePPM, money.Format(exp, a.Decimals))
}

// refresh records a known payment's new processor status. Processing ->
// Settled and -> Invalid move forward; a stale answer never moves a payment
// back. A credited payment that becomes invalid stays credited (a credit is
// never reversed) and is raised to the operator.
func (s *Service) refresh(ctx context.Context, tx bun.Tx, d Deposit, p *Payment, pp btcpay.Payment, now time.Time) error {
	to := string(pp.Status)
	switch {
	case to == p.ProcessorStatus, p.ProcessorStatus == markedStatus:
		return nil
	case to == string(btcpay.PaymentSettled) && p.ProcessorStatus == string(btcpay.PaymentProcessing):
	case to == string(btcpay.PaymentInvalid):
	case to == string(btcpay.PaymentProcessing) && p.ProcessorStatus == string(btcpay.PaymentInvalid):
		// A replaced transaction can come back (a reorg): it is visible again.
	default:
		return nil
	}
	if _, err := tx.NewUpdate().Model((*Payment)(nil)).Set("processor_status = ?, updated_at = ?", to, now).
		Where("id = ?", p.ID).Exec(ctx); err != nil {
		return fmt.Errorf("update payment %s: %w", p.PaymentID, err)
	}
	p.ProcessorStatus, p.UpdatedAt = to, now
	if to == string(btcpay.PaymentInvalid) && p.Credited {
		s.log().ErrorContext(ctx, "deposit: a credited payment became invalid at the processor", "deposit_id", d.ID, "payment_id", p.PaymentID)
		return s.raise(ctx, tx, alert.Params{Type: AlertCreditedInvalidation, Subject: p.PaymentID,
			Detail: fmt.Sprintf("Payment %s of deposit %s was credited and the processor now reports it invalid (replaced or double spent). The credit stands; correct the ledger by hand if the money is gone.", p.PaymentID, d.ID)})
	}
	return nil
}

// invoiceReview returns the invoice-level reason for review, if any: an
// invoice marked by hand (settled, or invalid while it had payments), one
// the processor settled without enough settled payments, or payments that
// never confirmed before monitoring ended.
func invoiceReview(inv btcpay.Invoice, methods []btcpay.InvoicePayMethod, rows []Payment) string {
	uncreditedValid := false
	for _, p := range rows {
		if !p.Credited && p.ProcessorStatus != string(btcpay.PaymentInvalid) {
			uncreditedValid = true
		}
	}
	marked := inv.AdditionalStatus == btcpay.AdditionalMarked
	switch {
	case inv.Status == btcpay.InvoiceSettled && marked:
		return ReasonMarkedSettled
	case inv.Status == btcpay.InvoiceInvalid && marked && uncreditedValid:
		return ReasonMarkedInvalid
	case inv.Status == btcpay.InvoiceSettled && !enoughSettled(inv, methods):
		return ReasonUnderSettled
	case inv.Status == btcpay.InvoiceInvalid && !marked && uncreditedValid:
		return ReasonNotConfirmed
	}
	return ""
}

// enoughSettled reports whether the settled payments cover the invoice
// (any settled payment covers a top-up invoice).
func enoughSettled(inv btcpay.Invoice, methods []btcpay.InvoicePayMethod) bool {
	sum := decimal.Zero
	for _, m := range methods {
		for _, pp := range m.Payments {
			if pp.Status != btcpay.PaymentSettled {
				continue
			}
			v, err := pp.Value.Decimal().Mul(m.Rate.Decimal())
			if err != nil {
				return false
			}
			if sum, err = sum.Add(v); err != nil {
				return false
			}
		}
	}
	if inv.Type == "TopUp" || inv.Amount.IsZero() {
		return sum.IsPos()
	}
	return sum.Cmp(inv.Amount.Decimal()) >= 0
}

// sourceRef names a payment in the ledger: (deposit_credit, source_ref)
// is unique, so a payment can be credited once.
func sourceRef(d Deposit, paymentID string) string {
	return "deposit:" + d.ID.String() + ":payment:" + paymentID
}

// credit posts units of payment p to the user's available balance and
// marks the payment credited by resolvedBy, in tx.
func (s *Service) credit(ctx context.Context, tx bun.Tx, d Deposit, p *Payment, units int64, decimals int, resolvedBy string, now time.Time) error {
	posted, err := ledger.CreditDeposit(ctx, tx, d.Asset, d.ExternalUserID, units, sourceRef(d, p.PaymentID),
		fmt.Sprintf("deposit %s payment %s", d.ID, p.PaymentID))
	if err != nil {
		return fmt.Errorf("credit payment %s of deposit %s: %w", p.PaymentID, d.ID, err)
	}
	if posted.Replayed {
		return fmt.Errorf("credit payment %s of deposit %s: the ledger already holds entry %d for it but the payment is not marked credited",
			p.PaymentID, d.ID, posted.ID)
	}
	res, err := tx.NewUpdate().Model((*Payment)(nil)).
		Set("credited = true, credited_at = ?, resolved_by = ?, ledger_entry_id = ?, units = ?, amount = ?, updated_at = ?",
			now, resolvedBy, posted.ID, units, money.Format(units, decimals), now).
		Where("id = ? AND NOT credited", p.ID).Exec(ctx)
	if err != nil {
		return fmt.Errorf("mark payment %s credited: %w", p.PaymentID, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("mark payment %s credited: it was credited meanwhile", p.PaymentID)
	}
	p.Credited, p.CreditedAt, p.ResolvedBy, p.LedgerEntryID, p.Units = true, &now, &resolvedBy, &posted.ID, &units
	p.Amount = money.Format(units, decimals)
	s.log().InfoContext(ctx, "deposit: payment credited", "deposit_id", d.ID, "payment_id", p.PaymentID, "units", units, "by", resolvedBy)
	return nil
}

// displayAmount is a payment's amount as the API shows it.
func displayAmount(p Payment, decimals int) string {
	if p.Units != nil {
		return money.Format(*p.Units, decimals)
	}
	return p.Amount
}

// toUnits converts a processor decimal to smallest units of scale exactly:
// btcpay.ErrInexact when it has more decimals than the asset (it is never
// rounded), another error when it is not a non-negative amount that fits.
func toUnits(s string, scale int) (int64, error) {
	a, err := btcpay.ParseAmount(s)
	if err != nil {
		return 0, err
	}
	if a.IsNeg() {
		return 0, fmt.Errorf("amount %s is negative", s)
	}
	return a.Units(scale)
}

package deposit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/modules/asset"
	"svc/modules/event"
	"svc/modules/ingress"
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
	// The first run starts from the deposit just read; a run the coalescer
	// adds reads it again.
	read := false
	folded, err := s.webhooks.do(d.ID, func() error {
		if read {
			return s.Reconcile(ctx, d.ID)
		}
		read = true
		return s.reconcile(ctx, d)
	})
	if folded {
		s.log().DebugContext(ctx, "deposit: webhook folded into the reconciliation in progress", "deposit_id", d.ID, "type", e.Type)
	}
	return err
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
	return s.reconcile(ctx, d)
}

// reconcile is Reconcile of d, just read without its lock (apply takes
// the lock and reads the row again): a webhook's handler has read it to
// find the deposit, and reading it twice was one statement in 13 of a
// settlement's.
func (s *Service) reconcile(ctx context.Context, d Deposit) error {
	id := d.ID
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
	d, a, err := lockWithAsset(ctx, tx, id)
	if err != nil {
		return err
	}
	if d.Status == StatusCreating || d.Status == StatusFailed || d.InvoiceID == nil || *d.InvoiceID != inv.ID {
		return nil
	}
	// What the deposit's row takes from this reconcile, its events and its
	// poll time, is written at the end in one statement.
	c := newChange(d)
	var reported []string
	for _, m := range methods {
		for _, pp := range m.Payments {
			reported = append(reported, pp.ID)
		}
	}
	rows, elsewhere, err := paymentsAndClashes(ctx, tx, d.ID, reported) // after the lock: see lockWithAsset
	if err != nil {
		return err
	}
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
		fresh   []int // indexes in rows of the payments credited as they were first seen
		reviews []reviewItem
	)
	// Once an operator has decided the deposit as a whole (dismissed it,
	// or credited the invoice's hand-marked value), a payment confirming
	// after that may be the very money the decision covered: it goes to
	// an operator instead of being credited (below).
	decided := d.Status == StatusDismissed || hasMarkedCredit(rows)
	var clashes []string
	clash := func(pp btcpay.Payment, other uuid.UUID) error {
		// Recorded under another deposit: never under two. This deposit
		// goes to review; its other payments carry on.
		clashes = append(clashes, fmt.Sprintf("payment %s is recorded under deposit %s", pp.ID, other))
		return s.raise(ctx, tx, alert.Params{Type: AlertPaymentClash, Subject: d.ID.String() + ":" + pp.ID,
			Detail: fmt.Sprintf("The processor reports payment %s of %s under invoice %s of deposit %s, but the service recorded it under deposit %s. "+
				"It is not credited twice; deposit %s is in review.", pp.ID, pp.Value, inv.ID, d.ID, other, d.ID)})
	}
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
			if other, ok := elsewhere[pp.ID]; ok {
				if err := clash(pp, other); err != nil {
					return err
				}
				continue
			}
			p, item := s.classify(d, a, inv, grace, m.PaymentMethodID, pp, now)
			if creditable(p) && !decided {
				// Recorded credited: its insert and its credited mark in
				// one statement (credit). Its clash was looked for above.
				if err := s.credit(ctx, tx, d, &p, *p.Units, a.Decimals, ResolvedAuto, now); err != nil {
					return err
				}
			} else {
				inserted, err := insertPayment(ctx, tx, &p)
				if err != nil {
					return err
				}
				if !inserted {
					// Recorded under another deposit since it was read.
					var other uuid.UUID
					if err := tx.Tx.QueryRowContext(ctx, "SELECT deposit_id FROM deposit_payments WHERE payment_id = $1", pp.ID).Scan(&other); err != nil {
						return fmt.Errorf("find the deposit of payment %s: %w", pp.ID, err)
					}
					if err := clash(pp, other); err != nil {
						return err
					}
					continue
				}
			}
			rows = append(rows, p)
			index[p.PaymentID] = len(rows) - 1
			if p.Credited {
				fresh = append(fresh, len(rows)-1)
			}
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
		// On the payments as recorded before this reconcile's credits, as
		// when every credit came after every insert: a payment credited as
		// it is first seen counts as not credited yet
		// (TestSettledPaymentFirstSeenOnAnInvoiceMarkedInvalid).
		recorded := rows
		if len(fresh) > 0 {
			recorded = slices.Clone(rows)
			for _, i := range fresh {
				recorded[i].Credited = false
			}
		}
		reason := invoiceReview(inv, methods, recorded)
		if len(clashes) > 0 {
			reason = ReasonPaymentClash + ": " + strings.Join(clashes, "; ")
		}
		if reason != "" {
			c.set["invoice_review"] = reason
			d.InvoiceReview = &reason
			reviews = append(reviews, reviewItem{payment: -1, reason: reason, trigger: NeedsReview})
		}
	}
	// Every confirmed payment that needs no operator is credited: each
	// payment stands on its own. Except once an operator has decided the
	// deposit as a whole (decided, above): it goes to an operator instead.
	for i := range rows {
		p := &rows[i]
		if creditable(*p) {
			if decided {
				reason := ReasonAfterDecision
				if _, err := db.Exec(ctx, tx, "UPDATE deposit_payments SET review_reason = $1, updated_at = $2 WHERE id = $3", reason, now, p.ID); err != nil {
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
		if err := s.step(&c, &d, PaymentSeen, func(d *Deposit) any {
			return event.DepositDetectedData{DepositID: d.ID.String(), ExternalUserID: optional(d.ExternalUserID), PlatformAccount: optional(d.PlatformAccount), Asset: d.Asset,
				Metadata: d.Metadata, ClientReference: d.ClientReference,
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
		if err := s.toReview(ctx, &c, &d, reviews[0], rows, a); err != nil {
			return err
		}
	default:
		if err := s.advance(ctx, &c, &d, inv, rows, a); err != nil {
			return err
		}
	}
	c.set["polled_at"] = s.now()
	c.settles = true
	return s.write(ctx, tx, &d, &c)
}

// advance applies the transitions that need no operator: confirming ->
// settled once every payment is credited, pending -> expired when the
// window closed with nothing received, and confirming -> review when every
// payment seen was invalidated and the window closed.
func (s *Service) advance(ctx context.Context, c *change, d *Deposit, inv btcpay.Invoice, rows []Payment, a asset.Asset) error {
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
		return s.step(c, d, PaymentConfirmed, func(d *Deposit) any {
			return event.DepositSettledData{DepositID: d.ID.String(), ExternalUserID: optional(d.ExternalUserID), PlatformAccount: optional(d.PlatformAccount), Asset: d.Asset,
				Metadata: d.Metadata, ClientReference: d.ClientReference,
				Status: string(d.Status), AmountCredited: money.Format(credited(rows), a.Decimals)}
		})
	case d.Status == StatusPending && valid == 0 && closed:
		// The processor may close the window early (expired by hand, or a
		// store setting): the deposit then shows when it really closed.
		if now := s.now(); inv.Status == btcpay.InvoiceExpired && d.ExpiresAt != nil && d.ExpiresAt.After(now) {
			c.set["expires_at"] = now
			d.ExpiresAt = &now
		}
		return s.step(c, d, WindowClosed, func(d *Deposit) any {
			return event.DepositExpiredData{DepositID: d.ID.String(), ExternalUserID: optional(d.ExternalUserID), PlatformAccount: optional(d.PlatformAccount), Asset: d.Asset,
				Metadata: d.Metadata, ClientReference: d.ClientReference,
				Status: string(d.Status)}
		})
	case d.Status == StatusConfirming && valid == 0 && closed:
		return s.toReview(ctx, c, d, reviewItem{payment: -1, reason: ReasonAllInvalid, trigger: NeedsReview}, rows, a)
	}
	return nil
}

// toReview moves d to review for item, with its event, in c.
func (s *Service) toReview(ctx context.Context, c *change, d *Deposit, item reviewItem, rows []Payment, a asset.Asset) error {
	c.set["review_reason"] = item.reason
	d.ReviewReason = &item.reason
	s.log().WarnContext(ctx, "deposit: needs an operator", "deposit_id", d.ID, "reason", item.reason)
	return s.step(c, d, item.trigger, func(d *Deposit) any {
		data := event.DepositReviewRequiredData{DepositID: d.ID.String(), ExternalUserID: optional(d.ExternalUserID), PlatformAccount: optional(d.PlatformAccount), Asset: d.Asset,
			Metadata: d.Metadata, ClientReference: d.ClientReference,
			Status: string(d.Status), AmountCredited: money.Format(credited(rows), a.Decimals), ReviewReason: item.reason}
		if item.payment >= 0 {
			p := rows[item.payment]
			pid, amt := p.PaymentID, displayAmount(p, a.Decimals)
			data.PaymentID, data.Amount = &pid, &amt
		}
		return data
	})
}

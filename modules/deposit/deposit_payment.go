package deposit

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/govalues/decimal"
	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/modules/asset"
	"svc/modules/ledger"
	"svc/platform/btcpay"
	"svc/platform/db"
	"svc/platform/money"
)

// assetAndPayments reads, in tx, the asset of d and d's payments.
func assetAndPayments(ctx context.Context, tx bun.Tx, d Deposit) (asset.Asset, []Payment, error) {
	a, err := (&asset.Store{DB: tx}).Get(ctx, d.Asset)
	if err != nil {
		return asset.Asset{}, nil, err
	}
	byDeposit, err := payments(ctx, tx, d.ID)
	if err != nil {
		return asset.Asset{}, nil, err
	}
	return a, byDeposit[d.ID], nil
}

// insertPayment records p, a payment seen for the first time, in tx and
// sets its id; false when its payment_id is recorded already (under this
// deposit or another: never under two), and nothing was written. Real
// parameters (db.Querier): every payment of every deposit is inserted
// once, and bun's statement, its values in the text, was parsed and
// planned anew each time.
func insertPayment(ctx context.Context, tx bun.Tx, p *Payment) (bool, error) {
	err := tx.Tx.QueryRowContext(ctx, `INSERT INTO deposit_payments (deposit_id, payment_id, txid, amount, units, processor_status,
    received_at, after_expiration, review_reason, credited, credited_at, resolved_by, ledger_entry_id, created_at, updated_at)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
  ON CONFLICT (payment_id) DO NOTHING RETURNING id`,
		p.DepositID, p.PaymentID, p.Txid, p.Amount, p.Units, p.ProcessorStatus, p.ReceivedAt, p.AfterExpiration, p.ReviewReason,
		p.Credited, p.CreditedAt, p.ResolvedBy, p.LedgerEntryID, p.CreatedAt, p.UpdatedAt).Scan(&p.ID)
	switch {
	case db.IsNoRows(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("record payment %s of deposit %s: %w", p.PaymentID, p.DepositID, err)
	}
	return true, nil
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
	if _, err := db.Exec(ctx, tx, "UPDATE deposit_payments SET processor_status = $1, updated_at = $2 WHERE id = $3", to, now, p.ID); err != nil {
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

// errRecordedMeanwhile: a payment about to be recorded credited was
// recorded under another deposit since the reconcile read its payments;
// the reconcile fails and nothing of it stays (a retry finds the clash).
var errRecordedMeanwhile = errors.New("the payment was recorded meanwhile under another deposit: nothing credited, the reconcile is retried")

// creditable reports whether the service credits p itself: confirmed,
// worth something, needing no operator, not credited or resolved yet (and
// the deposit not decided by an operator, which the caller checks).
func creditable(p Payment) bool {
	return p.ReviewReason == nil && !p.Credited && p.ResolvedBy == nil && p.ProcessorStatus == string(btcpay.PaymentSettled) &&
		p.Units != nil && *p.Units > 0
}

// credit posts units of payment p to the user's available balance and
// marks the payment credited by resolvedBy, in tx. A payment not recorded
// yet (ID zero: seen for the first time, credited at once) is inserted
// credited after its posting, one statement where its insert and its mark
// were two; its payment_id recorded meanwhile under another deposit fails
// the transaction, its posting with it (the caller looked for such a clash
// after the deposit's lock, so only a concurrent insert gets there).
func (s *Service) credit(ctx context.Context, tx bun.Tx, d Deposit, p *Payment, units int64, decimals int, resolvedBy string, now time.Time) error {
	posted, err := ledger.CreditDeposit(ctx, tx, d.Asset, d.holder(), units, sourceRef(d, p.PaymentID),
		fmt.Sprintf("deposit %s payment %s", d.ID, p.PaymentID))

	if err != nil {
		return fmt.Errorf("credit payment %s of deposit %s: %w", p.PaymentID, d.ID, err)
	}
	if posted.Replayed {
		return fmt.Errorf("credit payment %s of deposit %s: the ledger already holds entry %d for it but the payment is not marked credited",
			p.PaymentID, d.ID, posted.ID)
	}
	if p.ID == 0 {
		q := *p
		q.Credited, q.CreditedAt, q.ResolvedBy, q.LedgerEntryID, q.Units = true, &now, &resolvedBy, &posted.ID, &units
		q.Amount, q.UpdatedAt = money.Format(units, decimals), now
		inserted, err := insertPayment(ctx, tx, &q)
		if err != nil {
			return err
		}
		if !inserted {
			return fmt.Errorf("credit payment %s of deposit %s: %w", p.PaymentID, d.ID, errRecordedMeanwhile)
		}
		*p = q
		s.log().InfoContext(ctx, "deposit: payment credited", "deposit_id", d.ID, "payment_id", p.PaymentID, "units", units, "by", resolvedBy)
		return nil
	}
	res, err := db.Exec(ctx, tx, `UPDATE deposit_payments
   SET credited = true, credited_at = $1, resolved_by = $2, ledger_entry_id = $3, units = $4, amount = $5, updated_at = $1
 WHERE id = $6 AND NOT credited`, now, resolvedBy, posted.ID, units, money.Format(units, decimals), p.ID)
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

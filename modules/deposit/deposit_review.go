package deposit

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/event"
	"svc/modules/operator"
	"svc/platform/btcpay"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/httpapi"
	"svc/platform/idempotency"
	"svc/platform/money"
	"svc/platform/timefmt"
)

// Resolve actions.
const (
	ActionCredit  = "credit"
	ActionDismiss = "dismiss"
)

// ResolveParams describe an operator's decision on a deposit in review.
type ResolveParams struct {
	DepositID uuid.UUID
	Action    string  // ActionCredit or ActionDismiss
	PaymentID *string // for credit: which uncredited payment
	// Actor is who decides, unsigned (the admin API key): required
	// without a Signature.
	Actor audit.Actor
	// Signature is the enrolled operator's signed statement of the
	// decision (ResolveExpect); the operator is then who decides. Whoever
	// decides is the audit trail's actor and the payments' resolved_by.
	Signature *operator.Envelope
}

// ResolveExpect is what an approver signs to resolve deposit d in review:
// the action deposit.resolve on the deposit's id, and as facts the action
// (credit or dismiss), the asset, the deposit's external_user_id or
// platform_account, the payment_id when the request names one, and, for
// a credit, amount: what the resolution credits (credit, in smallest
// units of a), in display units as the answer's credited shows it.
func ResolveExpect(d Deposit, a asset.Asset, action string, paymentID *string, credit int64) operator.Expect {
	facts := holderFacts(d)
	facts["action"] = action
	if paymentID != nil {
		facts["payment_id"] = *paymentID
	}
	if action == ActionCredit {
		facts["amount"] = money.Format(credit, a.Decimals)
	}
	return operator.Expect{Action: audit.DepositResolve, Resource: d.ID.String(), Facts: facts, Role: operator.Approver}
}

// CreditAfterDismissalExpect is what an approver signs to credit payment
// p of dismissed deposit d: the action deposit.credit_after_dismissal on
// the deposit's id, and as facts the asset, the deposit's
// external_user_id or platform_account, the payment_id, the amount
// credited (the payment's exact amount in display units) and the reason.
func CreditAfterDismissalExpect(d Deposit, a asset.Asset, p Payment, reason string) operator.Expect {
	facts := holderFacts(d)
	facts["payment_id"] = p.PaymentID
	facts["reason"] = reason
	if p.Units != nil {
		facts["amount"] = money.Format(*p.Units, a.Decimals)
	}
	return operator.Expect{Action: audit.DepositCreditDismissed, Resource: d.ID.String(), Facts: facts, Role: operator.Approver}
}

// holderFacts are a deposit's asset and holder, as signed facts.
func holderFacts(d Deposit) map[string]string {
	facts := map[string]string{"asset": d.Asset}
	if d.ExternalUserID != "" {
		facts["external_user_id"] = d.ExternalUserID
	}
	if d.PlatformAccount != "" {
		facts["platform_account"] = d.PlatformAccount
	}
	return facts
}

// resolveDetail is what the audit trail keeps of a resolution: the
// request's parameters.
type resolveDetail struct {
	DepositID string  `json:"deposit_id"`
	Action    string  `json:"action"`
	PaymentID *string `json:"payment_id"`
}

// ResolveResult is the API's answer to a resolution.
type ResolveResult struct {
	Deposit  View   `json:"deposit"`
	Credited string `json:"credited"` // what this resolution credited, per the processor
}

// markedPrefix names the row that records an operator's credit of an
// invoice marked settled by hand.
const markedPrefix = "marked:"

// notInReview is the 409 of a resolution from any status but review.
func notInReview(d Deposit) error {
	return fault.Wrap(fault.Conflict, fmt.Sprintf("deposit %s is %s: only a deposit in review can be resolved", d.ID, d.Status), ErrIllegalTransition)
}

func cannotCredit(format string, a ...any) error {
	return fault.Wrap(fault.Invalid, fmt.Sprintf(format, a...), ErrCannotCredit)
}

// credit target: one payment, or the value of an invoice marked settled.
type target struct {
	payment *Payment
	marked  bool
}

// ResolvePreview is what a resolution would do, read before it: the
// deposit and its asset, and what a credit would credit (zero for a
// dismissal), in smallest units, as the processor says now, and the
// payment a credit would credit ("" for a dismissal or an invoice marked
// settled by hand).
type ResolvePreview struct {
	Deposit   Deposit
	Asset     asset.Asset
	Credit    int64
	PaymentID string
}

// resolution is a resolution prepared before its transaction.
type resolution struct {
	ResolvePreview
	target         target
	creditedBefore int64
}

// Preview reads what resolving p would do, changing nothing: what the
// operator signs (ResolveExpect of its deposit, asset and credit) before
// Resolve. It refuses what Resolve would refuse before its transaction (a
// deposit not in review, a payment to name, a processor that cannot say).
func (s *Service) Preview(ctx context.Context, p ResolveParams) (ResolvePreview, error) {
	r, err := s.prepare(ctx, p)
	return r.ResolvePreview, err
}

// prepare reads the deposit and, for a credit, chooses its target and asks
// the processor what it was worth.
func (s *Service) prepare(ctx context.Context, p ResolveParams) (resolution, error) {
	// The deposit and its payments from one snapshot, so that a concurrent
	// resolution is seen whole (409) and never half (a deposit still in
	// review whose payment was just credited).
	d, rows, err := s.snapshot(ctx, p.DepositID)
	if err != nil {
		return resolution{}, err
	}
	if d.Status != StatusReview {
		return resolution{}, notInReview(d)
	}
	a, err := s.assets().Get(ctx, d.Asset)
	if err != nil {
		return resolution{}, err
	}
	r := resolution{ResolvePreview: ResolvePreview{Deposit: d, Asset: a}}
	switch p.Action {
	case ActionDismiss:
		return r, nil
	case ActionCredit:
	default:
		return resolution{}, fault.Validation(fault.FieldError{Loc: []any{"body", "action"}, Type: "enum",
			Msg: "Input should be 'credit' or 'dismiss'", Input: p.Action})
	}
	if s.Processor == nil {
		return resolution{}, ErrNoProcessor
	}
	if r.target, err = chooseTarget(d, rows, p.PaymentID); err != nil {
		return resolution{}, err
	}
	if r.target.payment != nil {
		r.PaymentID = r.target.payment.PaymentID
	}
	// What the processor says, read before the transaction.
	r.creditedBefore = credited(rows)
	if r.Credit, err = s.worth(ctx, d, a, r.target, rows); err != nil {
		return resolution{}, err
	}
	return r, nil
}

// Resolve applies an operator's decision to a deposit in review: credit
// asks the processor what the payment (or an invoice marked settled by
// hand) was worth and credits exactly that; dismiss closes the review
// without crediting. In its transaction, with the deposit locked, the
// operator service authorizes the decision (ResolveExpect of the deposit
// as it is then, and of what the processor said): with p.Signature, the
// enrolled operator who signed it decides; without, p.Actor (refused when
// signatures are required). The answer's body is also stored as rec's
// response, and the decision recorded in the audit trail, in the same
// transaction.
func (s *Service) Resolve(ctx context.Context, p ResolveParams, rec Completer) (ResolveResult, []byte, error) {
	if p.Signature == nil && !p.Actor.Valid() {
		return ResolveResult{}, nil, fmt.Errorf("resolve %s: no audit actor", p.DepositID)
	}
	r, err := s.prepare(ctx, p)
	if err != nil {
		return ResolveResult{}, nil, err
	}
	a, units, t, before := r.Asset, r.Credit, r.target, r.creditedBefore
	if p.Action == ActionDismiss {
		return s.finish(ctx, p, a, 0, rec, func(ctx context.Context, tx bun.Tx, d *Deposit, rows []Payment, by string) (int64, error) {
			if _, err := tx.NewUpdate().Model((*Payment)(nil)).Set("resolved_by = ?, updated_at = ?", by, s.now()).
				Where("deposit_id = ? AND NOT credited AND resolved_by IS NULL AND review_reason IS NOT NULL", d.ID).Exec(ctx); err != nil {
				return 0, err
			}
			return 0, s.transit(ctx, tx, d, ResolveDismiss, nil)
		})
	}
	return s.finish(ctx, p, a, units, rec, func(ctx context.Context, tx bun.Tx, d *Deposit, rows []Payment, by string) (int64, error) {
		now := s.now()
		var row *Payment
		if t.marked {
			// units was computed from a snapshot read before the
			// transaction; a payment credited since (by a webhook's
			// reconcile) would be credited a second time inside it.
			if credited(rows) != before {
				return 0, fault.New(fault.Conflict, "the deposit was credited while this resolve ran; read it again and retry").WithRetryAfter(time.Second)
			}
			pid := markedPrefix + *d.InvoiceID
			for i := range rows {
				if rows[i].PaymentID == pid {
					return 0, fault.Wrap(fault.Conflict, "the invoice's marked value was credited already", ErrIllegalTransition)
				}
			}
			reason := ReasonMarkedSettled
			if d.InvoiceReview != nil {
				reason = *d.InvoiceReview
			}
			m := Payment{DepositID: d.ID, PaymentID: pid, Amount: money.Format(units, a.Decimals), Units: &units,
				ProcessorStatus: markedStatus, ReceivedAt: now, ReviewReason: &reason, CreatedAt: now, UpdatedAt: now}
			if _, err := tx.NewInsert().Model(&m).Exec(ctx); err != nil {
				return 0, fmt.Errorf("record the marked invoice's value: %w", err)
			}
			rows = append(rows, m)
			row = &rows[len(rows)-1]
		} else {
			for i := range rows {
				if rows[i].PaymentID == t.payment.PaymentID {
					row = &rows[i]
				}
			}
			if row == nil || row.Credited || row.ResolvedBy != nil {
				return 0, fault.Wrap(fault.Conflict, fmt.Sprintf("payment %s was resolved meanwhile", t.payment.PaymentID), ErrIllegalTransition)
			}
		}
		if err := s.credit(ctx, tx, *d, row, units, a.Decimals, by, now); err != nil {
			return 0, err
		}
		trigger := ResolveCredit
		for _, other := range rows {
			if other.openForReview() {
				trigger = ResolveCreditPartial
			}
		}
		return units, s.transit(ctx, tx, d, trigger, func(d *Deposit) any {
			return event.DepositSettledData{DepositID: d.ID.String(), ExternalUserID: optional(d.ExternalUserID), PlatformAccount: optional(d.PlatformAccount), Asset: d.Asset,
				Metadata: d.Metadata, ClientReference: d.ClientReference,
				Status: string(d.Status), AmountCredited: money.Format(credited(rows), a.Decimals)}
		})
	})
}

// snapshot reads a deposit and its payments in one read-only transaction.
func (s *Service) snapshot(ctx context.Context, id uuid.UUID) (Deposit, []Payment, error) {
	var (
		d    Deposit
		rows []Payment
	)
	err := s.DB.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}, func(ctx context.Context, tx bun.Tx) error {
		var err error
		if d, err = getDeposit(ctx, tx, id, false); err != nil {
			return err
		}
		byID, err := payments(ctx, tx, id)
		rows = byID[id]
		return err
	})
	return d, rows, err
}

// finish runs a resolution's change in one transaction with the deposit
// locked (a concurrent resolution waits and then finds it resolved: 409),
// after the operator service authorized it (ResolveExpect, with credit what
// a credit credits), records it in the audit trail as the authorized
// actor's and completes the idempotency key with the answer. change gets
// the actor's id, the payments' resolved_by.
func (s *Service) finish(ctx context.Context, p ResolveParams, a asset.Asset, credit int64, rec Completer,
	change func(ctx context.Context, tx bun.Tx, d *Deposit, rows []Payment, by string) (int64, error)) (ResolveResult, []byte, error) {
	var (
		out  ResolveResult
		body []byte
		who  audit.Actor
	)
	err := db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		d, err := lockDeposit(ctx, tx, p.DepositID)
		if err != nil {
			return err
		}
		if d.Status != StatusReview {
			return notInReview(d)
		}
		byID, err := payments(ctx, tx, d.ID)
		if err != nil {
			return err
		}
		if who, err = s.Operators.Authorize(ctx, tx, p.Actor, p.Signature, ResolveExpect(d, a, p.Action, p.PaymentID, credit)); err != nil {
			return err
		}
		units, err := change(ctx, tx, &d, byID[d.ID], who.ID)
		if err != nil {
			return err
		}
		if _, err := audit.Record(ctx, tx, s.now(), who, audit.DepositResolve, d.ID.String(),
			resolveDetail{DepositID: d.ID.String(), Action: p.Action, PaymentID: p.PaymentID}); err != nil {
			return err
		}
		v, err := s.ViewOf(ctx, tx, d)
		if err != nil {
			return err
		}
		out = ResolveResult{Deposit: v, Credited: money.Format(units, a.Decimals)}
		if body, err = json.Marshal(out); err != nil {
			return err
		}
		if rec == nil {
			return nil
		}
		return rec.CompleteTx(ctx, tx, http.StatusOK, "application/json", body)
	})
	if errors.Is(err, idempotency.ErrLost) {
		return ResolveResult{}, nil, ErrTakenOver
	}
	if err != nil {
		return ResolveResult{}, nil, err
	}
	idempotency.MarkCompleted(rec)
	s.log().InfoContext(ctx, "deposit: review resolved", "deposit_id", p.DepositID, "action", p.Action, "by", who.ID, "credited", out.Credited)
	return out, body, nil
}

// chooseTarget picks what a credit resolves: the named payment, the only
// uncredited payment, or the value of an invoice marked settled by hand
// when there is no uncredited payment.
func chooseTarget(d Deposit, rows []Payment, paymentID *string) (target, error) {
	var open []*Payment
	for i := range rows {
		p := &rows[i]
		if !p.Credited && p.ResolvedBy == nil && p.ProcessorStatus != string(btcpay.PaymentInvalid) && p.ProcessorStatus != markedStatus {
			open = append(open, p)
		}
	}
	if paymentID != nil {
		for i := range rows {
			p := &rows[i]
			if p.PaymentID != *paymentID {
				continue
			}
			if p.Credited || p.ResolvedBy != nil {
				return target{}, fault.Wrap(fault.Conflict, fmt.Sprintf("payment %s is already resolved", p.PaymentID), ErrIllegalTransition)
			}
			return target{payment: p}, nil
		}
		return target{}, fault.Validation(fault.FieldError{Loc: []any{"body", "payment_id"}, Type: "value_error", Input: *paymentID,
			Msg: fmt.Sprintf("not an uncredited payment of deposit %s", d.ID)})
	}
	switch {
	case len(open) == 1:
		return target{payment: open[0]}, nil
	case len(open) > 1:
		ids := make([]string, len(open))
		for i, p := range open {
			ids[i] = p.PaymentID
		}
		return target{}, fault.Validation(fault.FieldError{Loc: []any{"body", "payment_id"}, Type: "missing",
			Msg: "the deposit has several uncredited payments: name one of " + strings.Join(ids, ", ")})
	case d.InvoiceReview != nil && (*d.InvoiceReview == ReasonMarkedSettled || *d.InvoiceReview == ReasonUnderSettled):
		return target{marked: true}, nil
	}
	return target{}, fault.Wrap(fault.Invalid, fmt.Sprintf("deposit %s has no uncredited payment to credit; dismiss it instead", d.ID), ErrNothingToCredit)
}

// worth asks the processor what the target was worth, in smallest units:
// a payment's value minus its method fee (it must be settled and convert
// exactly), or an invoice marked settled: its amount less what was already
// credited.
func (s *Service) worth(ctx context.Context, d Deposit, a asset.Asset, t target, rows []Payment) (int64, error) {
	if d.InvoiceID == nil {
		return 0, fault.Wrap(fault.Invalid, "the deposit has no invoice", ErrNothingToCredit)
	}
	if t.marked {
		inv, err := s.Processor.GetInvoice(ctx, *d.InvoiceID)
		if err != nil {
			return 0, processorError(err)
		}
		if inv.Status != btcpay.InvoiceSettled {
			return 0, cannotCredit("the processor reports invoice %s as %s, not settled", inv.ID, inv.Status)
		}
		if want := currencies[btcpay.NormalizeMethodID(a.PaymentMethod)]; !strings.EqualFold(inv.Currency, want) {
			return 0, cannotCredit("invoice %s is in %s, not %s", inv.ID, inv.Currency, want)
		}
		units, err := toUnits(inv.Amount.String(), a.Decimals)
		if err != nil {
			return 0, cannotCredit("the invoice amount %s does not convert to whole smallest units: %v", inv.Amount, err)
		}
		left := units - credited(rows)
		if left <= 0 {
			return 0, fault.Wrap(fault.Invalid, fmt.Sprintf("invoice %s is worth %s and %s was credited already: nothing is left to credit",
				inv.ID, money.Format(units, a.Decimals), money.Format(credited(rows), a.Decimals)), ErrNothingToCredit)
		}
		return left, nil
	}
	invoices := []string{*d.InvoiceID}
	if t.payment.ReviewReason != nil && strings.HasPrefix(*t.payment.ReviewReason, ReasonOtherInvoice) {
		// Paid to another invoice carrying the deposit's orderId
		// (reconcileOther): the payment is looked up on those, not on the
		// deposit's own.
		invoices = invoices[:0]
		list, err := s.Processor.InvoicesByOrderID(ctx, d.ID.String())
		if err != nil {
			return 0, processorError(err)
		}
		for _, inv := range list {
			if inv.ID != *d.InvoiceID && inv.OrderID() == d.ID.String() {
				invoices = append(invoices, inv.ID)
			}
		}
	}
	for _, id := range invoices {
		units, found, err := s.paymentWorth(ctx, id, t.payment.PaymentID, a)
		if err != nil || found {
			return units, err
		}
	}
	if len(invoices) == 0 {
		return 0, cannotCredit("the processor lists no other invoice of deposit %s carrying payment %s", d.ID, t.payment.PaymentID)
	}
	return 0, cannotCredit("the processor does not list payment %s on invoice %s", t.payment.PaymentID, strings.Join(invoices, " or "))
}

// paymentWorth is what the processor says payment paymentID of invoice
// invoiceID is worth, in smallest units; found is false when the invoice
// does not list it.
func (s *Service) paymentWorth(ctx context.Context, invoiceID, paymentID string, a asset.Asset) (units int64, found bool, err error) {
	methods, err := s.Processor.InvoicePaymentMethods(ctx, invoiceID, false)
	if err != nil {
		return 0, false, processorError(err)
	}
	for _, m := range methods {
		for _, pp := range m.Payments {
			if pp.ID != paymentID {
				continue
			}
			if pp.Status != btcpay.PaymentSettled {
				return 0, true, cannotCredit("the processor reports payment %s as %s, not settled", pp.ID, pp.Status)
			}
			w, err := pp.Value.Decimal().Sub(pp.Fee.Decimal())
			if err != nil || !w.IsPos() {
				return 0, true, cannotCredit("the processor reports payment %s worth nothing (value %s, fee %s)", pp.ID, pp.Value, pp.Fee)
			}
			units, err := toUnits(w.String(), a.Decimals)
			if err != nil {
				return 0, true, cannotCredit("payment %s is worth %s, which does not convert to whole smallest units (%d decimals) and is never rounded: dismiss it and correct the ledger by hand",
					pp.ID, w.Trim(0), a.Decimals)
			}
			return units, true, nil
		}
	}
	return 0, false, nil
}

// processorError classifies a processor failure for an operator's request.
func processorError(err error) error {
	if errors.Is(err, btcpay.ErrRefused) {
		return fault.Wrap(fault.UpstreamRefused, "the payment processor refused the request", err)
	}
	return fault.Wrap(fault.Unavailable, ErrProcessorUnavailable.Message, err)
}

// ReviewDetail is a deposit in review as an operator sees it (the CLI):
// the API view plus why it is there.
type ReviewDetail struct {
	View
	ReviewReason  *string           `json:"review_reason"`
	InvoiceReview *string           `json:"invoice_review"`
	ReviewSince   *string           `json:"review_since"`
	Reasons       map[string]string `json:"payment_review_reasons"` // payment id -> reason, uncredited payments only
}

// ReviewDetails returns the review queue (oldest first) with the reasons.
func (s *Service) ReviewDetails(ctx context.Context, limit int) ([]ReviewDetail, error) {
	ds, err := s.ReviewQueue(ctx, limit)
	if err != nil {
		return nil, err
	}
	vs, err := s.Views(ctx, s.DB, ds)
	if err != nil {
		return nil, err
	}
	ids := make([]uuid.UUID, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	ps, err := payments(ctx, s.DB, ids...)
	if err != nil {
		return nil, err
	}
	out := make([]ReviewDetail, len(ds))
	for i, d := range ds {
		r := ReviewDetail{View: vs[i], ReviewReason: d.ReviewReason, InvoiceReview: d.InvoiceReview,
			ReviewSince: timefmt.Ptr(d.ReviewAt), Reasons: map[string]string{}}
		for _, p := range ps[d.ID] {
			if p.openForReview() {
				r.Reasons[p.PaymentID] = *p.ReviewReason
			}
		}
		out[i] = r
	}
	return out, nil
}

// CreditParams describe an operator's credit of a payment that confirmed
// after its deposit was dismissed.
type CreditParams struct {
	DepositID uuid.UUID
	PaymentID string
	Reason    string // why, for the audit trail: 10 to 2000 characters
	// Actor is who credits it, unsigned: required without a Signature.
	Actor audit.Actor
	// Signature is the enrolled operator's signed statement of the credit
	// (CreditAfterDismissalExpect); the operator is then who credits it.
	Signature *operator.Envelope
}

// Snapshot reads a deposit and its payments as one snapshot: what an
// operator sees of them before acting (CreditAfterDismissalExpect).
func (s *Service) Snapshot(ctx context.Context, id uuid.UUID) (Deposit, []Payment, error) {
	return s.snapshot(ctx, id)
}

// CreditAfterDismissal credits, on an operator's decision, a payment that
// confirmed after its deposit was dismissed (or after an operator credited
// the invoice's hand-marked value): the deposit stays dismissed, the
// payment is credited through the ledger as any deposit payment is (its
// deposit_credit entry under the payment's own source_ref, so it can never
// be credited twice), resolved_by names the operator, and the audit trail
// keeps the operator's reason. Only a payment the processor settled, with
// an exact amount, that is not credited yet. With the deposit locked, the
// operator service authorizes the credit (CreditAfterDismissalExpect):
// with p.Signature, the enrolled operator who signed it credits it;
// without, p.Actor (refused when signatures are required).
func (s *Service) CreditAfterDismissal(ctx context.Context, p CreditParams) (Payment, error) {
	if p.Signature == nil && !p.Actor.Valid() {
		return Payment{}, fault.New(fault.Unauthenticated, "the operator is not known")
	}
	depositID, paymentID, reason := p.DepositID, p.PaymentID, p.Reason
	if n := utf8.RuneCountInString(strings.TrimSpace(reason)); n < 10 || n > 2000 || !httpapi.IsStorable(reason) {
		return Payment{}, fault.New(fault.Invalid, "reason must say why, in 10 to 2000 characters")
	}
	var out Payment
	err := db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		d, err := lockDeposit(ctx, tx, depositID)
		if err != nil {
			return err
		}
		byDeposit, err := payments(ctx, tx, d.ID)
		if err != nil {
			return err
		}
		rows := byDeposit[d.ID]
		if d.Status == StatusReview || (d.Status != StatusDismissed && !hasMarkedCredit(rows)) {
			return fault.New(fault.Conflict, fmt.Sprintf("deposit %s is %s: resolve it through the review queue instead", d.ID, d.Status))
		}
		i := slices.IndexFunc(rows, func(p Payment) bool { return p.PaymentID == paymentID })
		if i < 0 {
			return fault.New(fault.NotFound, fmt.Sprintf("deposit %s has no payment %s", d.ID, paymentID))
		}
		pay := &rows[i]
		switch {
		case pay.Credited:
			return fault.New(fault.Conflict, fmt.Sprintf("payment %s is credited already", paymentID))
		case pay.ResolvedBy != nil:
			return fault.New(fault.Conflict, fmt.Sprintf("payment %s was dismissed by %s with its deposit; it is not credited after that", paymentID, *pay.ResolvedBy))
		case pay.ProcessorStatus != string(btcpay.PaymentSettled):
			return fault.New(fault.Conflict, fmt.Sprintf("payment %s is %s at the processor, not settled", paymentID, pay.ProcessorStatus))
		case pay.Units == nil || *pay.Units <= 0:
			return fault.New(fault.Conflict, fmt.Sprintf("payment %s has no exact amount in %s's smallest unit", paymentID, d.Asset))
		}
		a, err := (&asset.Store{DB: tx}).Get(ctx, d.Asset)
		if err != nil {
			return err
		}
		who, err := s.Operators.Authorize(ctx, tx, p.Actor, p.Signature, CreditAfterDismissalExpect(d, a, *pay, reason))
		if err != nil {
			return err
		}
		if err := s.credit(ctx, tx, d, pay, *pay.Units, a.Decimals, who.ID, s.now()); err != nil {
			return err
		}
		if _, err := audit.Record(ctx, tx, s.now(), who, audit.DepositCreditDismissed, d.ID.String(),
			map[string]any{"deposit_id": d.ID.String(), "payment_id": paymentID, "units": *pay.Units, "reason": reason}); err != nil {
			return err
		}
		out = *pay
		return nil
	})
	return out, err
}

package deposit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/platform/btcpay"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/idempotency"
	"svc/platform/metadata"
	"svc/platform/tracing"
)

// CreateParams describe a deposit request.
type CreateParams struct {
	// ExternalUserID or PlatformAccount: exactly one is set (the caller
	// checks it: ledger.OwnerOf).
	ExternalUserID  string
	PlatformAccount string
	Asset           string
	ExpectedAmount  *int64 // smallest units; nil when not given
	// Metadata and ClientReference are the platform's labels (checked by
	// the caller: metadata.Metadata.Check); a client reference another
	// deposit has is a 409 naming it.
	Metadata        metadata.Metadata
	ClientReference *string
	// IdempotencyKey is the request's key: a retry with it finds the deposit
	// it created. Empty for callers without one.
	IdempotencyKey string
}

// Completer stores a request's final response inside the transaction of
// its effect (*idempotency.Record).
type Completer interface {
	CompleteTx(ctx context.Context, tx bun.IDB, status int, contentType string, body []byte) error
}

// Create creates a deposit, or finishes the one an earlier attempt with the
// same Idempotency-Key started, and returns it with the 201 body (already
// stored as the key's response when rec is given). See the package doc for
// the order of the steps and the errors.
func (s *Service) Create(ctx context.Context, p CreateParams, rec Completer) (View, []byte, error) {
	if p.IdempotencyKey != "" {
		d, ok, err := depositByKey(ctx, s.DB, p.IdempotencyKey)
		if err != nil {
			return View{}, nil, err
		}
		if ok {
			if !sameRequest(d, p) {
				return View{}, nil, ErrKeyReused
			}
			return s.resume(ctx, d, rec)
		}
	}
	a, err := s.assets().Get(ctx, p.Asset)
	if err != nil {
		return View{}, nil, err // asset.ErrUnknown: 404
	}
	if !a.Enabled {
		return View{}, nil, fmt.Errorf("%s: %w", a.Code, asset.ErrDisabled)
	}
	if s.Processor == nil {
		return View{}, nil, ErrNoProcessor
	}
	id, err := uuid.NewV7()
	if err != nil {
		return View{}, nil, fmt.Errorf("new deposit id: %w", err)
	}
	now := s.now()
	intent := Deposit{ID: id, ExternalUserID: p.ExternalUserID, PlatformAccount: p.PlatformAccount, Asset: a.Code, Status: StatusCreating,
		AmountExpected: p.ExpectedAmount, Metadata: p.Metadata, ClientReference: p.ClientReference,
		CreatedAt: now, UpdatedAt: now}
	if intent.Metadata == nil {
		intent.Metadata = metadata.Metadata{}
	}
	if p.IdempotencyKey != "" {
		intent.IdempotencyKey = &p.IdempotencyKey
	}
	d := intent
	if pooled(d.Asset) {
		err = db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
			d = intent // the function may run again: start from the intent each time
			if err := s.holdPoolSlot(ctx, tx, &d, now); err != nil {
				return err
			}
			_, err := tx.NewInsert().Model(&d).Exec(ctx)
			return err
		})
	} else {
		// One statement: no transaction around it.
		_, err = s.DB.NewInsert().Model(&d).Exec(ctx)
	}
	if db.IsUniqueViolation(err, "deposits_idempotency_key_key") {
		// An attempt with the same key that was taken over committed its
		// intent meanwhile: continue that deposit.
		if prev, ok, rerr := depositByKey(ctx, s.DB, p.IdempotencyKey); rerr == nil && ok {
			return s.resume(ctx, prev, rec)
		}
	}
	if db.IsUniqueViolation(err, "deposits_client_reference_key") {
		return View{}, nil, s.clientReferenceTaken(ctx, *p.ClientReference, err)
	}
	if err != nil {
		return View{}, nil, fmt.Errorf("create deposit: %w", err)
	}
	return s.complete(ctx, d, a, rec, true)
}

// clientReferenceTaken answers a creation whose client reference another
// deposit has (the unique index refused the insert): 409 naming it.
func (s *Service) clientReferenceTaken(ctx context.Context, ref string, cause error) error {
	prev, ok, err := depositByClientReference(ctx, s.DB, ref)
	if err != nil {
		return err
	}
	if !ok { // the other deposit is gone again: cannot happen (no deletes)
		return fmt.Errorf("create deposit: %w", cause)
	}
	return clientReferenceUsed(ref, prev.ID)
}

func sameRequest(d Deposit, p CreateParams) bool {
	if d.ExternalUserID != p.ExternalUserID || d.PlatformAccount != p.PlatformAccount || d.Asset != p.Asset || !maps.Equal(d.Metadata, p.Metadata) ||
		(d.ClientReference == nil) != (p.ClientReference == nil) ||
		(d.ClientReference != nil && *d.ClientReference != *p.ClientReference) {
		return false
	}
	if (d.AmountExpected == nil) != (p.ExpectedAmount == nil) {
		return false
	}
	return d.AmountExpected == nil || *d.AmountExpected == *p.ExpectedAmount
}

// resume answers a retry with the deposit the key created: a creating one
// is completed (asking the processor first), a failed one answers 502
// again, any other is the 201 it already was.
func (s *Service) resume(ctx context.Context, d Deposit, rec Completer) (View, []byte, error) {
	switch d.Status {
	case StatusCreating:
		if s.Processor == nil {
			return View{}, nil, ErrNoProcessor
		}
		a, err := s.assets().Get(ctx, d.Asset)
		if err != nil {
			return View{}, nil, err
		}
		return s.complete(ctx, d, a, rec, false)
	case StatusFailed:
		return View{}, nil, refusedError(d, nil)
	}
	v, err := s.ViewOf(ctx, s.DB, d)
	if err != nil {
		return View{}, nil, err
	}
	body, err := json.Marshal(v)
	return v, body, err
}

func refusedError(d Deposit, cause error) error {
	reason := "refused"
	if d.FailureReason != nil {
		reason = *d.FailureReason
	}
	return fault.Wrap(fault.UpstreamRefused,
		fmt.Sprintf("the payment processor refused to create the invoice (%s); deposit %s is failed: start a new deposit with a new Idempotency-Key", reason, d.ID), cause)
}

// complete gets d's invoice (an existing one first unless this is the
// first attempt) and its address, and records the outcome.
func (s *Service) complete(ctx context.Context, d Deposit, a asset.Asset, rec Completer, fresh bool) (View, []byte, error) {
	var (
		inv   btcpay.Invoice
		found bool
	)
	if !fresh {
		list, err := s.Processor.InvoicesByOrderID(ctx, d.ID.String())
		if err != nil {
			return View{}, nil, fault.Wrap(fault.Unavailable, ErrProcessorUnavailable.Message, err)
		}
		inv, found = s.pickInvoice(d, list)
	}
	if !found {
		var err error
		params := s.invoiceParams(d, a)
		// BTCPay echoes the invoice's metadata in its webhooks: the
		// settlement they start continues this request's trace (ingress).
		tracing.InjectInto(ctx, params.Metadata)
		inv, err = s.Processor.CreateInvoice(ctx, params)
		switch {
		case err == nil:
		case errors.Is(err, btcpay.ErrUnreachable):
			return View{}, nil, fault.Wrap(fault.Unavailable, ErrProcessorUnavailable.Message, err)
		case pooled(d.Asset) && poolRefusal(err):
			// The processor's pool is full although ours was not: keep the
			// deposit creating (a retry with the same key completes it) and
			// give its place back.
			s.log().WarnContext(ctx, "deposit: the processor has no free USDT address", "deposit_id", d.ID, "error", err)
			if rerr := db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
				cur, err := lockDeposit(ctx, tx, d.ID)
				if err != nil {
					return err
				}
				return releaseReservation(ctx, tx, &cur, s.now())
			}); rerr != nil {
				return View{}, nil, rerr
			}
			return View{}, nil, ErrPoolExhausted.WithRetryAfter(minPoolRetry)
		case errors.Is(err, btcpay.ErrRefused):
			var re *btcpay.RefusedError
			reason := err.Error()
			if asRefused(err, &re) {
				reason = re.Reason()
			}
			return View{}, nil, s.fail(ctx, d.ID, reason, err)
		default:
			return View{}, nil, fmt.Errorf("create invoice for deposit %s: %w", d.ID, err)
		}
	}
	methods, err := s.Processor.InvoicePaymentMethods(ctx, inv.ID, true)
	if err != nil {
		return View{}, nil, fault.Wrap(fault.Unavailable, ErrProcessorUnavailable.Message, err)
	}
	pm, ok := methodOf(methods, a.PaymentMethod)
	if !ok || pm.Destination == "" {
		return View{}, nil, s.fail(ctx, d.ID, fmt.Sprintf("invoice %s offers no %s address", inv.ID, a.PaymentMethod), nil)
	}
	if v, body, ok, err := s.issueAtOnce(ctx, d, a, inv, pm.Destination, rec); ok || err != nil {
		return v, body, err
	}
	return s.issue(ctx, d.ID, inv, pm.Destination, rec)
}

// effectCompleter stores a request's final response in the statement of
// its effect (*idempotency.Record), and is told when that committed.
type effectCompleter interface {
	CompleteWithEffect(effect string, args []any, status int, contentType string, body []byte) (string, []any, bool)
	Completed()
}

// issueAtOnce is issue in one statement, for what nearly every creation
// is: a deposit of an asset without an address pool, still creating, with
// no payment recorded, and a request with an Idempotency-Key. Its 201 body
// is rendered from d as this request created it (nothing but issuing
// changes a creating deposit's view) and stored with the key in the
// statement that issues it, which applies only when the deposit is still
// creating and has no payment (CompleteWithEffect). ok is false, nothing
// changed, when any of that is not so: issue then does it in full.
func (s *Service) issueAtOnce(ctx context.Context, d Deposit, a asset.Asset, inv btcpay.Invoice, address string, rec Completer) (_ View, _ []byte, ok bool, _ error) {
	ec, is := rec.(effectCompleter)
	tr, err := Next(StatusCreating, AddressIssued)
	if !is || pooled(d.Asset) || d.Status != StatusCreating || err != nil || tr.Event != "" {
		// (A transition that reports itself needs its event written with
		// it: issue does that.)
		return View{}, nil, false, nil
	}
	s.recordInvoiceFields(&d, inv, address)
	d.Status = tr.To
	view := render(d, nil, a.Decimals)
	body, err := json.Marshal(view)
	if err != nil {
		return View{}, nil, false, err
	}
	q, args, is := ec.CompleteWithEffect(`UPDATE deposits
   SET invoice_id = $2, address = $3, checkout_link = $4, expires_at = $5, monitoring_until = $6, status = $7, updated_at = $8
 WHERE id = $1::uuid AND status = $9
   AND NOT EXISTS (SELECT 1 FROM deposit_payments WHERE deposit_id = $1::uuid)
RETURNING 1`, []any{d.ID, d.InvoiceID, d.Address, d.CheckoutLink, d.ExpiresAt, d.MonitoringUntil, string(tr.To), d.UpdatedAt, string(StatusCreating)},
		http.StatusCreated, "application/json", body)
	if !is {
		return View{}, nil, false, nil
	}
	sqldb, err := db.SQLOf(s.DB)
	if err != nil {
		return View{}, nil, false, err
	}
	var applied bool
	err = idempotency.CompleteError(sqldb.QueryRowContext(ctx, q, args...).Scan(&applied))
	switch {
	case errors.Is(err, idempotency.ErrLost):
		return View{}, nil, false, ErrTakenOver
	case err != nil:
		return View{}, nil, false, fmt.Errorf("issue deposit %s: %w", d.ID, err)
	case !applied:
		return View{}, nil, false, nil
	}
	ec.Completed()
	return view, body, true, nil
}

// pickInvoice returns the invoice of d among those the processor lists for
// its orderId. More than one means several attempts (or someone else)
// created invoices with our id: the oldest is taken, so that every attempt
// that finds the same list picks the same one. It is not necessarily the
// first attempt's (a timed-out request can still create its invoice after
// a retry's); that does not matter, as d shows no address before it is
// issued, and the others are reconciled as orphans (reconcileOther).
func (s *Service) pickInvoice(d Deposit, list []btcpay.Invoice) (btcpay.Invoice, bool) {
	var out btcpay.Invoice
	n := 0
	for _, inv := range list {
		if inv.OrderID() != d.ID.String() {
			continue
		}
		if n == 0 || inv.CreatedTime.Before(out.CreatedTime.Time) {
			out = inv
		}
		n++
	}
	if n > 1 {
		s.log().Error("deposit: several processor invoices carry this deposit's orderId; using the oldest",
			"deposit_id", d.ID, "invoice_id", out.ID, "count", n)
	}
	return out, n > 0
}

// currencies are the invoice currencies of the assets' payment methods.
var currencies = map[string]string{
	btcpay.MethodBTCChain: "BTC",
	btcpay.MethodBTCLN:    "BTC",
	btcpay.MethodUSDTTron: "USDt",
}

func (s *Service) invoiceParams(d Deposit, a asset.Asset) btcpay.CreateInvoiceParams {
	p := btcpay.CreateInvoiceParams{
		OrderID: d.ID.String(), Currency: currencies[btcpay.NormalizeMethodID(a.PaymentMethod)],
		PaymentMethod: a.PaymentMethod, ExpirationMinutes: s.Config.ExpirationMinutes,
		MonitoringMinutes: s.Config.MonitoringMinutes, SpeedPolicy: s.Config.SpeedPolicy,
		Metadata: map[string]any{"asset": a.Code},
	}
	if pooled(a.Code) {
		p.ExpirationMinutes = USDTExpirationMinutes
	}
	if d.AmountExpected != nil {
		amt := btcpay.AmountFromUnits(*d.AmountExpected, a.Decimals)
		p.Amount = &amt
	}
	return p
}

func methodOf(methods []btcpay.InvoicePayMethod, id string) (btcpay.InvoicePayMethod, bool) {
	for _, m := range methods {
		if btcpay.SameMethod(m.PaymentMethodID, id) {
			return m, true
		}
	}
	return btcpay.InvoicePayMethod{}, false
}

func asRefused(err error, re **btcpay.RefusedError) bool { return errors.As(err, re) }

// issue records that d's invoice exists with its address (creating ->
// pending) and completes the request's idempotency key in the same
// transaction. A deposit someone else issued meanwhile (the poller, or a
// concurrent retry) is answered as it is.
func (s *Service) issue(ctx context.Context, id uuid.UUID, inv btcpay.Invoice, address string, rec Completer) (View, []byte, error) {
	var (
		view View
		body []byte
	)
	err := db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		d, err := lockDeposit(ctx, tx, id)
		if err != nil {
			return err
		}
		switch d.Status {
		case StatusFailed:
			return refusedError(d, nil)
		case StatusCreating:
			if err := s.recordInvoice(ctx, tx, &d, inv, address); err != nil {
				return err
			}
			if err := s.transit(ctx, tx, &d, AddressIssued, nil); err != nil {
				return err
			}
		}
		if view, err = s.ViewOf(ctx, tx, d); err != nil {
			return err
		}
		if body, err = json.Marshal(view); err != nil {
			return err
		}
		if rec == nil {
			return nil
		}
		return rec.CompleteTx(ctx, tx, http.StatusCreated, "application/json", body)
	})
	if errors.Is(err, idempotency.ErrLost) {
		return View{}, nil, ErrTakenOver
	}
	if err != nil {
		return View{}, nil, err
	}
	idempotency.MarkCompleted(rec)
	return view, body, nil
}

// recordInvoiceFields sets the invoice's id, address, checkout link and
// times on d, and its update time.
func (s *Service) recordInvoiceFields(d *Deposit, inv btcpay.Invoice, address string) {
	now := s.now()
	exp := inv.ExpirationTime.Time
	if exp.IsZero() {
		exp = now.Add(time.Duration(s.Config.ExpirationMinutes) * time.Minute)
	}
	mon := inv.MonitoringExpiration.Time
	if mon.Before(exp) {
		mon = exp.Add(time.Duration(s.Config.MonitoringMinutes) * time.Minute)
	}
	d.InvoiceID, d.Address, d.ExpiresAt, d.MonitoringUntil = &inv.ID, &address, &exp, &mon
	if inv.CheckoutLink != "" {
		d.CheckoutLink = &inv.CheckoutLink
	}
	d.UpdatedAt = now
}

// recordInvoice stores the invoice's id, address, checkout link and times
// on d (locked), and for a pooled asset its reservation.
func (s *Service) recordInvoice(ctx context.Context, tx bun.Tx, d *Deposit, inv btcpay.Invoice, address string) error {
	s.recordInvoiceFields(d, inv, address)
	if pooled(d.Asset) {
		if err := s.recordPoolAddress(ctx, tx, d, address, *d.ExpiresAt, d.UpdatedAt); err != nil {
			return err
		}
	}
	_, err := tx.NewUpdate().Model(d).
		Column("invoice_id", "address", "checkout_link", "expires_at", "monitoring_until", "address_reserved_from",
			"address_reserved_until", "address_released_at", "address_clash", "updated_at").
		WherePK().Exec(ctx)
	if err != nil {
		return fmt.Errorf("record invoice %s of deposit %s: %w", inv.ID, d.ID, err)
	}
	return nil
}

// fail records a definitive refusal: the deposit is failed (its pool place
// returned) and the request answers 502.
func (s *Service) fail(ctx context.Context, id uuid.UUID, reason string, cause error) error {
	var out error
	err := db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		d, err := lockDeposit(ctx, tx, id)
		if err != nil {
			return err
		}
		if d.Status != StatusCreating {
			if d.Status == StatusFailed {
				out = refusedError(d, cause)
			}
			return nil
		}
		now := s.now()
		if err := releaseReservation(ctx, tx, &d, now); err != nil {
			return err
		}
		if _, err := tx.NewUpdate().Model((*Deposit)(nil)).Set("failure_reason = ?", reason).
			Where("id = ?", id).Exec(ctx); err != nil {
			return err
		}
		d.FailureReason = &reason
		if err := s.transit(ctx, tx, &d, ProcessorRefused, nil); err != nil {
			return err
		}
		out = refusedError(d, cause)
		return nil
	})
	if err != nil {
		return fmt.Errorf("record refusal of deposit %s: %w", id, err)
	}
	if out == nil {
		// Someone issued it meanwhile (the poller adopted an invoice):
		// a retry with the same key returns it.
		return fault.Wrap(fault.Unavailable, ErrProcessorUnavailable.Message, cause)
	}
	s.log().WarnContext(ctx, "deposit: the processor refused the invoice", "deposit_id", id, "reason", reason)
	return out
}

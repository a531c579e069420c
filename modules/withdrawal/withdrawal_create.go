package withdrawal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/modules/event"
	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/idempotency"
	"svc/platform/metadata"
)

// DustLimit is the SPEC's BTC dust limit: a net at or below it is refused.
const DustLimit = 546

// MaxAmount bounds a withdrawal's gross, in smallest units, whatever the
// asset: 10^15 is ten million BTC or a billion USDT, above any balance,
// and keeps the rolling 24-hour volume (a sum of grosses) far from
// overflowing even if reservations were never given back.
const MaxAmount = 1_000_000_000_000_000

// CreateParams describe a withdrawal request.
type CreateParams struct {
	// ExternalUserID or PlatformAccount: exactly one is set (the caller
	// checks it: ledger.OwnerOf). A platform account's withdrawal always waits
	// for an operator.
	ExternalUserID  string
	PlatformAccount string
	Asset           string
	Amount          int64 // gross, smallest units, > 0
	Destination     string
	// IdempotencyKey is the request's key; empty for callers without one.
	IdempotencyKey string
	// Metadata and ClientReference are the platform's labels (checked by
	// the caller: metadata.Metadata.Check); a client reference another
	// withdrawal has is a 409 naming it.
	Metadata        metadata.Metadata
	ClientReference *string
}

// Create checks a withdrawal request, then places the hold, evaluates the
// gates and writes the withdrawal in one transaction (see the package doc;
// one pipelined round trip when it is auto-approved: insertApproved).
// It returns the 201 body, already stored as the key's response when rec is
// given.
//
// A request whose Idempotency-Key already created a withdrawal (its record
// was pruned, or a taken-over attempt committed first) cannot create a
// second one: the key is unique on the row, so the transaction fails. Any
// failure with a key therefore looks the key up and, when it finds the
// withdrawal, answers it as it is now. The lookup runs only on failures, so
// the common path does not pay for it.
func (s *Service) Create(ctx context.Context, p CreateParams, rec Completer) (CreatedView, []byte, error) {
	v, body, err := s.create(ctx, p, rec)
	if err != nil && p.IdempotencyKey != "" && !errors.Is(err, ErrTakenOver) && !errors.Is(err, idempotency.ErrNotClaimed) {
		if w, ok, lerr := withdrawalByKey(ctx, s.DB, p.IdempotencyKey); lerr == nil && ok {
			return s.replay(ctx, w, p)
		}
	}
	if p.ClientReference != nil && db.IsUniqueViolation(err, "withdrawals_client_reference_key") {
		// Another withdrawal has the reference (the insert rolled back,
		// and with it the hold): 409 naming it.
		w, ok, lerr := withdrawalByClientReference(ctx, s.DB, *p.ClientReference)
		switch {
		case lerr != nil:
			return CreatedView{}, nil, lerr
		case ok:
			return CreatedView{}, nil, clientReferenceUsed(*p.ClientReference, w.ID)
		}
	}
	return v, body, err
}

func (s *Service) create(ctx context.Context, p CreateParams, rec Completer) (_ CreatedView, _ []byte, ret error) {
	// kept is set once the creation owns the volume reservation, which it
	// then gives back (or keeps) itself, as for a reservation of its own.
	var kept bool
	if p.Amount <= 0 || p.Amount > MaxAmount {
		return CreatedView{}, nil, fault.New(fault.Invalid, fmt.Sprintf("amount must be from 1 to %d smallest units", int64(MaxAmount)))
	}
	// The destination is parsed first (no database), so that the asset and
	// the lookup of the service's own deposit addresses are one statement;
	// the refusals still come in the SPEC's order: the asset, the amount,
	// then the destination.
	now := s.now()
	dest, destErr := s.parseDestination(p.Asset, p.Destination, now)
	var spellings []string
	if destErr == nil {
		spellings = dest.spellings(p.Destination)
		// The common case in one round trip, when the copy of the asset's
		// row says it is auto-approved; otherwise, or when the database
		// says otherwise, the ordinary way below.
		if v, body, handled, err := s.createAuto(ctx, p, rec, dest, spellings, now); handled {
			return v, body, err
		}
	}
	first, err := s.assetAndIssued(ctx, p.Asset, spellings, rec, p.Amount, destErr == nil, now)
	if err != nil {
		return CreatedView{}, nil, err // asset.ErrUnknown: 404; idempotency.ErrNotClaimed
	}
	a, issued := first.asset, first.issued
	s.assets.put(a)
	if first.reserved != nil {
		// Reserved with the claim: a refusal from here on gives it back.
		defer func() {
			if ret != nil && !kept {
				s.giveBack(ctx, Withdrawal{Asset: a.Code, AmountGross: p.Amount, VolumeMinute: now.Truncate(time.Minute)})
			}
		}()
	}
	if !a.Enabled {
		return CreatedView{}, nil, fmt.Errorf("%s: %w", a.Code, asset.ErrDisabled)
	}
	if p.Amount < a.WithdrawalMin {
		return CreatedView{}, nil, fault.New(fault.Invalid, fmt.Sprintf("amount %s %s is below the minimum withdrawal of %s %s",
			a.Format(p.Amount), a.Code, a.Format(a.WithdrawalMin), a.Code))
	}
	switch {
	case destErr != nil:
		return CreatedView{}, nil, destErr
	case issued:
		return CreatedView{}, nil, ErrOwnAddress
	}
	est, err := s.estimate(ctx, a, p.Amount)
	switch {
	case errors.Is(err, errFeeAboveAmount):
		return CreatedView{}, nil, fault.New(fault.Invalid, fmt.Sprintf("the fee of %s %s is not less than the amount %s %s: nothing would be sent",
			a.Format(est.Fee), a.Code, a.Format(p.Amount), a.Code))
	case err != nil:
		return CreatedView{}, nil, err
	}
	if a.Code == asset.BTC && est.Net <= DustLimit {
		return CreatedView{}, nil, fault.New(fault.Invalid, fmt.Sprintf(
			"the net amount of %d sat (amount %d sat minus the estimated fee of %d sat) is at or below the dust limit of %d sat",
			est.Net, p.Amount, est.Fee, DustLimit))
	}
	if dest.Invoice != nil {
		if err := dest.Invoice.CheckAmount(est.Net); err != nil {
			return CreatedView{}, nil, refused(err)
		}
	}

	intent, err := s.newIntent(p, a.Code, dest, est, now)
	if err != nil {
		return CreatedView{}, nil, err
	}
	// Gate (b) first, in a short transaction of its own: the asset's
	// rolling volume including this withdrawal. It is given back below if
	// the withdrawal does not commit.
	var total int64
	if first.reserved != nil {
		total, kept = *first.reserved, true // from here on, as below
	} else if total, err = windowReserve(ctx, s.DB, a.Code, p.Amount, now); err != nil {
		return CreatedView{}, nil, err
	}
	var (
		view CreatedView
		body []byte
		// undone is true when err came with nothing written for certain;
		// otherwise the commit's outcome is unknown.
		undone bool
	)
	// The gates known before the hold; the per-user cap needs the hold's
	// lock (below), so it is counted inside the transaction.
	reasons := ownerGates(p.PlatformAccount, gates(a, p.Amount, total, ""))
	pc, canPipeline := rec.(pipelineCompleter)
	if len(reasons) == 0 && a.WithdrawalUserDailyCap == nil && (rec == nil || canPipeline) {
		// Auto-approved, the common case: one round trip (insertApproved).
		view, body, err = s.insertApproved(ctx, intent, a, pc)
		undone = err != nil && rolledBack(err)
	} else {
		// finished is true when the last attempt's work succeeded, so that
		// an error after it came from COMMIT, whose outcome is unknown.
		var finished bool
		err = db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
			finished = false
			w := intent // the function may run again: start from the intent each time
			if _, err := ledger.PlaceHold(ctx, tx, w.Asset, w.holder(), w.AmountGross, w.ID.String(), "withdrawal hold"); err != nil {
				return holdError(a, w, err)
			}
			userCap := ""
			if a.WithdrawalUserDailyCap != nil && w.PlatformAccount == "" {
				// After the hold, which locks the user's available balance
				// until commit: the same user's requests are serialized here.
				sum, err := userTotal(ctx, tx, w.ExternalUserID, w.Asset, now)
				if err != nil {
					return err
				}
				if sum+w.AmountGross > *a.WithdrawalUserDailyCap {
					userCap = reasonUserCap(a, sum+w.AmountGross)
				}
			}
			s.decide(&w, ownerGates(w.PlatformAccount, gates(a, w.AmountGross, total, userCap)))
			if err := insertNew(ctx, tx, w); err != nil {
				return err
			}
			if w.Status == StatusPendingApproval {
				if err := s.emitPending(ctx, tx, w, a); err != nil {
					return err
				}
			}
			view = renderCreated(w, a.Decimals)
			var err error
			if body, err = json.Marshal(view); err != nil {
				return err
			}
			if rec != nil {
				if err := rec.CompleteTx(ctx, tx, http.StatusCreated, "application/json", body); err != nil {
					return err
				}
			}
			finished = true
			return nil
		})
		undone = err != nil && !finished
		if err == nil {
			idempotency.MarkCompleted(rec)
		}
	}
	switch {
	case err != nil && undone:
		// Rolled back for certain: the reservation is given back.
		s.giveBack(ctx, intent)
	case err != nil:
		s.reservationStays(ctx, intent, err)
	}
	if errors.Is(err, idempotency.ErrLost) {
		return CreatedView{}, nil, ErrTakenOver
	}
	if err != nil {
		return CreatedView{}, nil, err
	}
	if view.Status == StatusPendingApproval {
		s.log().InfoContext(ctx, "withdrawal: waiting for an operator", "withdrawal_id", view.WithdrawalID, "asset", view.Asset,
			"reason", *view.ApprovalReason)
	}
	return view, body, nil
}

// reservationStays logs a creation whose commit outcome is unknown: w may
// exist, and then the volume reservation is its own, so it stays (the cap
// errs on the operator's side) and counts until it leaves the window.
func (s *Service) reservationStays(ctx context.Context, w Withdrawal, err error) {
	s.log().WarnContext(ctx, "withdrawal: commit outcome unknown; its volume reservation stays", "withdrawal_id", w.ID, "error", err)
}

// giveBack returns the volume reserved for w, whose transaction rolled
// back. It tries twice; when it cannot, the reservation stays (the cap errs
// on the operator's side) and counts until it leaves the window.
func (s *Service) giveBack(ctx context.Context, w Withdrawal) {
	ctx = context.WithoutCancel(ctx)
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		if err = windowSub(ctx, s.DB, w.Asset, w.VolumeMinute, w.AmountGross); err == nil {
			return
		}
	}
	s.log().WarnContext(ctx, "withdrawal: a volume reservation could not be given back; the daily cap counts it for 24 hours",
		"withdrawal_id", w.ID, "asset", w.Asset, "error", err)
}

// pipelineCompleter is a Completer that can also store the response in
// the same round trip as the effect (*idempotency.Record).
type pipelineCompleter interface {
	QueueComplete(b *pgx.Batch, status int, contentType string, body []byte)
	ReadComplete(br pgx.BatchResults) error
}

// insertApproved writes an auto-approved withdrawal in one round trip to
// the database instead of five (BEGIN, the hold, the row, the key's
// response, COMMIT): the three statements are pipelined as one implicit
// transaction (db.Pipeline), so they commit together or not at all. The
// hold is strict (ledger.QueuePost): a short balance raises and rolls the
// row and the response back with it. On two cores under load, round trips
// and statements are what a creation costs (docs/performance.md).
//
// A key taken over by a newer attempt makes the response's statement raise
// (idempotency.Record.QueueComplete), which rolls back the hold and the row
// too: the newer attempt decides, as in the ordinary transaction.
func (s *Service) insertApproved(ctx context.Context, w Withdrawal, a asset.Asset, rec pipelineCompleter) (CreatedView, []byte, error) {
	var b pgx.Batch
	t, err := s.queueApproved(&b, w, a, rec)
	if err != nil {
		return CreatedView{}, nil, err
	}
	if err := db.Pipeline(ctx, s.DB, &b, t.read); err != nil {
		return CreatedView{}, nil, err
	}
	idempotency.MarkCompleted(rec)
	return t.view, t.body, nil
}

// completedMarker is a Completer told when the transaction that stored the
// response committed (*idempotency.Record): its middleware then stores
// nothing more.
type completedMarker interface{ Completed() }

// approvedTx is an auto-approved withdrawal's statements queued in a
// batch: the hold, the row and the key's response.
type approvedTx struct {
	w    Withdrawal
	a    asset.Asset
	rec  pipelineCompleter
	hold *ledger.QueuedPost
	// view and body are the 201 answer.
	view CreatedView
	body []byte
}

// queueApproved approves w and queues its statements in b.
func (s *Service) queueApproved(b *pgx.Batch, w Withdrawal, a asset.Asset, rec pipelineCompleter) (approvedTx, error) {
	s.decide(&w, nil)
	t := approvedTx{w: w, a: a, rec: rec, view: renderCreated(w, a.Decimals)}
	var err error
	if t.body, err = json.Marshal(t.view); err != nil {
		return approvedTx{}, err
	}
	e, err := ledger.HoldEntry(w.Asset, w.holder(), w.AmountGross, w.ID.String(), "withdrawal hold")
	if err != nil {
		return approvedTx{}, err
	}
	if t.hold, err = ledger.QueuePost(b, e); err != nil {
		return approvedTx{}, err
	}
	b.Queue(insertNewSQL, insertNewArgs(w)...)
	if rec != nil {
		rec.QueueComplete(b, http.StatusCreated, "application/json", t.body)
	}
	return t, nil
}

// read reads the results of the statements queueApproved queued, in order.
func (t approvedTx) read(br pgx.BatchResults) error {
	if _, err := t.hold.Read(br); err != nil {
		return holdError(t.a, t.w, err)
	}
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("insert withdrawal %s: %w", t.w.ID, err)
	}
	if t.rec != nil {
		return t.rec.ReadComplete(br)
	}
	return nil
}

// newIntent is the withdrawal p asks for, before the gates decide its
// status.
func (s *Service) newIntent(p CreateParams, code string, dest Destination, est Estimate, now time.Time) (Withdrawal, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Withdrawal{}, fmt.Errorf("new withdrawal id: %w", err)
	}
	w := Withdrawal{ID: id, ExternalUserID: p.ExternalUserID, PlatformAccount: p.PlatformAccount, Asset: code, Destination: dest.Canonical,
		AmountGross: p.Amount, FeeMode: string(s.Config.FeeMode), FeeEstimate: est.Fee,
		VolumeMinute: now.Truncate(time.Minute), Metadata: p.Metadata, ClientReference: p.ClientReference,
		CreatedAt: now, UpdatedAt: now}
	if w.Metadata == nil {
		w.Metadata = metadata.Metadata{}
	}
	if p.IdempotencyKey != "" {
		w.IdempotencyKey = &p.IdempotencyKey
	}
	if dest.Invoice != nil {
		w.PaymentHash, w.InvoiceExpiresAt = &dest.Invoice.PaymentHash, &dest.Invoice.ExpiresAt
	}
	return w, nil
}

// rolledBack reports an error of insertApproved that the database answered
// with a refusal, after which nothing of the pipeline committed: an ERROR
// from PostgreSQL (not a FATAL, which can end a session after its commit),
// or the ledger's reading of one (a strict hold that did not fit raises;
// see ledger.QueuePost). Anything else (the connection lost) leaves the
// outcome unknown.
func rolledBack(err error) bool {
	var (
		pe  *pgconn.PgError
		ife *ledger.InsufficientFundsError
	)
	if errors.As(err, &pe) {
		sev := pe.SeverityUnlocalized
		if sev == "" {
			sev = pe.Severity
		}
		return sev == "ERROR"
	}
	return errors.As(err, &ife) || errors.Is(err, ledger.ErrConcurrentPost)
}

// holdError is the answer to a hold that could not be placed.
func holdError(a asset.Asset, w Withdrawal, err error) error {
	if errors.Is(err, ledger.ErrInsufficientFunds) {
		return fault.Wrap(fault.InsufficientFunds, fmt.Sprintf(
			"insufficient available %s balance for a withdrawal of %s %s (money held by other withdrawals does not count)",
			a.Code, a.Format(w.AmountGross), a.Code), err)
	}
	return err
}

// decide sets the status from the gates that fired.
func (s *Service) decide(w *Withdrawal, reasons []string) {
	if len(reasons) == 0 {
		w.Status, w.ApprovalMode, w.ApprovalReason = StatusApproved, ptr(ModeAuto), nil
		return
	}
	r := strings.Join(reasons, "; ")
	w.Status, w.ApprovalMode, w.ApprovalReason = StatusPendingApproval, nil, &r
}

func (s *Service) emitPending(ctx context.Context, tx bun.Tx, w Withdrawal, a asset.Asset) error {
	if s.Events == nil {
		return nil
	}
	_, err := s.Events.Emit(ctx, tx, event.WithdrawalPendingApproval, event.WithdrawalPendingApprovalData{
		WithdrawalID: w.ID.String(), ExternalUserID: optional(w.ExternalUserID), PlatformAccount: optional(w.PlatformAccount),
		Asset: w.Asset, Status: string(w.Status),
		AmountGross: a.Format(w.AmountGross), ApprovalReason: *w.ApprovalReason,
		Metadata: w.Metadata, ClientReference: w.ClientReference,
	})
	if err != nil {
		return fmt.Errorf("withdrawal %s: emit %s: %w", w.ID, event.WithdrawalPendingApproval, err)
	}
	return nil
}

// replay answers a retry whose key already created a withdrawal (the
// idempotency record was pruned, or a takeover raced): the same
// withdrawal as it is now.
func (s *Service) replay(ctx context.Context, w Withdrawal, p CreateParams) (CreatedView, []byte, error) {
	if w.ExternalUserID != p.ExternalUserID || w.PlatformAccount != p.PlatformAccount || w.Asset != p.Asset || w.AmountGross != p.Amount ||
		w.Destination != s.canonical(w.Asset, p.Destination) || !maps.Equal(w.Metadata, p.Metadata) ||
		(w.ClientReference == nil) != (p.ClientReference == nil) ||
		(w.ClientReference != nil && *w.ClientReference != *p.ClientReference) {
		return CreatedView{}, nil, ErrKeyReused
	}
	dec, err := decimals(ctx, s.DB)
	if err != nil {
		return CreatedView{}, nil, err
	}
	v := renderCreated(w, dec[w.Asset])
	body, err := json.Marshal(v)
	return v, body, err
}

func ptr[T any](v T) *T { return &v }

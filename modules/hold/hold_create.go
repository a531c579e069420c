package hold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/idempotency"
	"svc/platform/metadata"
)

// CreateParams describe a hold request.
type CreateParams struct {
	From   ledger.Holder
	Asset  string
	Amount int64 // smallest units, > 0
	// ExpiresIn is the hold's life (zero: DefaultExpiresIn).
	ExpiresIn       time.Duration
	Description     *string
	Metadata        metadata.Metadata
	ClientReference *string
	// IdempotencyKey is the request's key; empty for callers without one.
	IdempotencyKey string
}

// Create places a hold: in one transaction it writes the hold, stores the
// 201 as the key's response when rec is given, and moves the amount from
// the payer's available balance to their escrow (ledger.PostEscrowHold). Refusals: an unknown asset (404), a disabled one (422), an
// amount or a life out of range (422), a client reference already used
// (409 naming the hold that has it), available short of the amount (402).
func (s *Service) Create(ctx context.Context, p CreateParams, rec Completer) (View, []byte, error) {
	if p.Amount <= 0 || p.Amount > MaxAmount {
		return View{}, nil, fault.New(fault.Invalid, fmt.Sprintf("amount must be from 1 to %d smallest units", int64(MaxAmount)))
	}
	if p.ExpiresIn == 0 {
		p.ExpiresIn = DefaultExpiresIn
	}
	if p.ExpiresIn < time.Second || p.ExpiresIn > MaxExpiresIn {
		return View{}, nil, fault.New(fault.Invalid, fmt.Sprintf("expires_in must be from 1 to %d seconds", int64(MaxExpiresIn/time.Second)))
	}
	a, err := (&asset.Store{DB: s.DB}).Get(ctx, p.Asset)
	if err != nil {
		return View{}, nil, err // asset.ErrUnknown: 404
	}
	if !a.Enabled {
		return View{}, nil, fault.New(fault.Invalid, fmt.Sprintf("asset %s is disabled: no hold can be placed in it", a.Code))
	}
	if p.ClientReference != nil {
		if err := s.referenceFree(ctx, *p.ClientReference); err != nil {
			return View{}, nil, err
		}
	}
	id, err := uuid.NewV7()
	if err != nil {
		return View{}, nil, fmt.Errorf("new hold id: %w", err)
	}
	now := s.now()
	h := Hold{ID: id, PayerPlatform: p.From.Platform, Payer: p.From.ID, Asset: a.Code, Status: StatusOpen, Amount: p.Amount,
		ExpiresAt: now.Add(p.ExpiresIn), Description: p.Description, Metadata: p.Metadata, ClientReference: p.ClientReference,
		CreatedAt: now, UpdatedAt: now}
	if h.Metadata == nil {
		h.Metadata = metadata.Metadata{}
	}
	if p.IdempotencyKey != "" {
		h.IdempotencyKey = &p.IdempotencyKey
	}
	view := render(h, nil, a.Decimals)
	body, err := json.Marshal(view)
	if err != nil {
		return View{}, nil, err
	}
	err = db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		if err := insertHold(ctx, tx, &h); err != nil {
			return err
		}
		if rec != nil {
			if err := rec.CompleteTx(ctx, tx, http.StatusCreated, "application/json", body); err != nil {
				return err
			}
		}
		// Last: the debit locks the payer's available balance until the
		// commit, and a platform account may pay many holds at once.
		if _, err := ledger.PostEscrowHold(ctx, tx, h.Asset, p.From, h.Amount, h.ID.String(), "escrow hold"); err != nil {
			if errors.Is(err, ledger.ErrInsufficientFunds) {
				return fault.Wrap(fault.InsufficientFunds, fmt.Sprintf(
					"insufficient available %s balance of %s for a hold of %s %s (money held or reserved does not count)",
					a.Code, p.From, a.Format(h.Amount), a.Code), err)
			}
			return err
		}
		return nil
	})
	switch {
	case errors.Is(err, idempotency.ErrLost):
		return View{}, nil, ErrTakenOver
	case db.IsUniqueViolation(err, "holds_client_reference_key"):
		// Another hold with the reference committed meanwhile: 409 naming
		// it (holds are never deleted, so it is found).
		if rerr := s.referenceFree(ctx, *p.ClientReference); rerr != nil {
			return View{}, nil, rerr
		}
		return View{}, nil, err
	case db.IsUniqueViolation(err, "holds_idempotency_key_key"):
		if other, ok, lerr := idOf(ctx, s.DB, "idempotency_key", p.IdempotencyKey); lerr == nil && ok {
			return View{}, nil, fault.Wrap(fault.Conflict, fmt.Sprintf("this Idempotency-Key already created hold %s", other), ErrKeyReused)
		}
		return View{}, nil, ErrKeyReused
	case err != nil:
		return View{}, nil, err
	}
	idempotency.MarkCompleted(rec)
	return view, body, nil
}

// referenceFree refuses a client reference another hold has (409 naming
// it).
func (s *Service) referenceFree(ctx context.Context, ref string) error {
	other, ok, err := idOf(ctx, s.DB, "client_reference", ref)
	switch {
	case err != nil:
		return err
	case ok:
		return fault.New(fault.Conflict, fmt.Sprintf("client_reference %q is already used by hold %s", ref, other))
	}
	return nil
}

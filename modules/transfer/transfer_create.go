package transfer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"

	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/modules/event"
	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/idempotency"
	"svc/platform/metadata"
	"svc/platform/money"
)

// LegParams is one leg of a request.
type LegParams struct {
	From, To ledger.Holder
	Asset    string
	Amount   int64 // smallest units, > 0
}

// CreateParams describe a transfer request.
type CreateParams struct {
	Legs            []LegParams
	Description     *string
	Metadata        metadata.Metadata
	ClientReference *string
	// IdempotencyKey is the request's key: a retry with it finds the
	// transfer it created. Empty for callers without one.
	IdempotencyKey string
}

// legError is a 422 field error at legs[i].field.
func legError(i int, field, typ, msg string, input any) error {
	loc := []any{"body", "legs", i}
	if field != "" {
		loc = append(loc, field)
	}
	return fault.Validation(fault.FieldError{Loc: loc, Type: typ, Msg: msg, Input: input})
}

// check refuses what the document cannot say: an account that is not
// exactly one of a user and a platform account, a platform account's name,
// from equal to to, an amount out of range.
func (p CreateParams) check() error {
	if n := len(p.Legs); n < 1 || n > MaxLegs {
		return fault.Validation(fault.FieldError{Loc: []any{"body", "legs"}, Type: "value_error",
			Msg: fmt.Sprintf("a transfer has 1 to %d legs", MaxLegs)})
	}
	var errs []error
	for i, l := range p.Legs {
		for _, side := range []struct {
			name string
			h    ledger.Holder
		}{{"from", l.From}, {"to", l.To}} {
			if side.h.ID == "" || (side.h.Platform && !ledger.ValidPlatformName(side.h.ID)) {
				errs = append(errs, legError(i, side.name, "value_error",
					"must be {\"external_user_id\": ...} or {\"platform_account\": name}, name 1 to 64 characters of [a-z0-9_.:-]", nil))
			}
		}
		if l.From == l.To {
			errs = append(errs, legError(i, "to", "value_error", "to must be another account than from", nil))
		}
		if l.Amount <= 0 || l.Amount > MaxAmount {
			errs = append(errs, legError(i, "amount", "value_error", fmt.Sprintf("amount must be from 1 to %d smallest units", int64(MaxAmount)), l.Amount))
		}
	}
	if p.Description != nil && len([]rune(*p.Description)) > MaxDescription {
		errs = append(errs, fault.Validation(fault.FieldError{Loc: []any{"body", "description"}, Type: "string_too_long",
			Msg: fmt.Sprintf("String should have at most %d characters", MaxDescription), Ctx: map[string]any{"max_length": MaxDescription}}))
	}
	if err := p.Metadata.Check("body", "metadata"); err != nil {
		errs = append(errs, err)
	}
	return fault.MergeValidation(errs...)
}

// assets reads the assets once, in one statement: every asset the legs
// name must exist (404) and be enabled (422), each refusal naming the
// first leg that uses it. It returns every asset's decimals, for the
// answer's amounts.
func assets(ctx context.Context, idb bun.IDB, legs []LegParams) (map[string]int, error) {
	all, err := (&asset.Store{DB: idb}).All(ctx)
	if err != nil {
		return nil, err
	}
	byCode := make(map[string]asset.Asset, len(all))
	dec := make(map[string]int, len(all))
	for _, a := range all {
		byCode[a.Code], dec[a.Code] = a, a.Decimals
	}
	for i, l := range legs {
		a, ok := byCode[l.Asset]
		if !ok {
			return nil, fault.Wrap(fault.NotFound, fmt.Sprintf("legs[%d]: unknown asset %s", i, l.Asset), asset.ErrUnknown)
		}
		if !a.Enabled {
			return nil, fault.Wrap(fault.Invalid, fmt.Sprintf("legs[%d]: asset %s is disabled", i, l.Asset), asset.ErrDisabled)
		}
	}
	return dec, nil
}

// Create makes a transfer: every leg moves, or none does. See the package
// doc for the transaction; it returns the transfer with its 201 body
// (stored as the key's response in the same transaction when rec is
// given). When rec's key is still to be claimed (idempotency.ClaimInHandler)
// it takes the fast way (transfer_fast.go), whose transaction claims it,
// and returns idempotency.ErrNotClaimed, having changed nothing, when that
// way cannot answer.
//
// Refusals: the legs' rules (422 field errors), an unknown asset (404), a
// disabled one (422), a client_reference another transfer has (409, naming
// it), a leg whose from is short (402, naming the leg).
func (s *Service) Create(ctx context.Context, p CreateParams, rec Completer) (View, []byte, error) {
	if err := p.check(); err != nil {
		return View{}, nil, err
	}
	if cc, ok := rec.(claimCompleter); ok {
		if _, unclaimed := cc.Unclaimed(); unclaimed {
			return s.createFast(ctx, p, cc)
		}
	}
	if p.IdempotencyKey != "" {
		t, ok, err := byKey(ctx, s.DB, p.IdempotencyKey)
		if err != nil {
			return View{}, nil, err
		}
		if ok {
			if !sameRequest(t, p) {
				return View{}, nil, ErrKeyReused
			}
			return s.answer(ctx, t)
		}
	}
	dec, err := assets(ctx, s.DB, p.Legs)
	if err != nil {
		return View{}, nil, err
	}
	s.copies.put(dec)
	if p.ClientReference != nil {
		if err := s.referenceFree(ctx, *p.ClientReference); err != nil {
			return View{}, nil, err
		}
	}
	t, err := s.newTransfer(p)
	if err != nil {
		return View{}, nil, err
	}
	v := render(t, dec)
	body, err := json.Marshal(v)
	if err != nil {
		return View{}, nil, err
	}
	err = db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		return s.commit(ctx, tx, t, v, dec, rec, body)
	})
	switch {
	case errors.Is(err, idempotency.ErrLost):
		return View{}, nil, ErrTakenOver
	case db.IsUniqueViolation(err, "transfers_client_reference_key"):
		// Another transfer with the reference committed meanwhile.
		if rerr := s.referenceFree(ctx, *p.ClientReference); rerr != nil {
			return View{}, nil, rerr
		}
		return View{}, nil, err
	case db.IsUniqueViolation(err, "transfers_idempotency_key_key"):
		// An attempt with the same key that was taken over committed
		// meanwhile: answer with its transfer.
		if prev, ok, rerr := byKey(ctx, s.DB, p.IdempotencyKey); rerr == nil && ok && sameRequest(prev, p) {
			return s.answer(ctx, prev)
		}
		return View{}, nil, ErrKeyReused
	case err != nil:
		return View{}, nil, err
	}
	idempotency.MarkCompleted(rec)
	return v, body, nil
}

// commit writes the transfer, its event and the key's answer, then locks
// the accounts and posts the legs, all in tx (see the package doc). The
// ledger's rows come last: the postings lock the legs' balances, and a
// busy account (a platform account every purchase pays, a payer with many
// transfers at once) is then locked only from its posting to the commit,
// not across the transfer's other writes. Those touch only new rows of
// their own tables, so a transaction waits for another's account rows
// only once it holds no row anyone else waits for, and
// ledger.LockAccounts, first among the ledger's statements, still orders
// every account lock of a transfer, one leg or many.
func (s *Service) commit(ctx context.Context, tx bun.Tx, t Transfer, v View, dec map[string]int, rec Completer, body []byte) error {
	if err := insert(ctx, tx, t); err != nil {
		return err
	}
	if _, err := s.Events.Emit(ctx, tx, event.TransferCompleted, eventData(v)); err != nil {
		return err
	}
	if rec != nil {
		if err := rec.CompleteTx(ctx, tx, http.StatusCreated, "application/json", body); err != nil {
			return err
		}
	}
	if err := ledger.LockAccounts(ctx, tx, lockRefs(t.Legs)); err != nil {
		return err
	}
	for i, l := range t.Legs {
		if _, err := ledger.PostTransferLeg(ctx, tx, l.Asset, l.From(), l.To(), l.Amount, SourceRef(t.ID, i), legMemo(i, len(t.Legs))); err != nil {
			var short *ledger.InsufficientFundsError
			if errors.As(err, &short) {
				return fault.Wrap(fault.InsufficientFunds, fmt.Sprintf("legs[%d]: insufficient available balance: %s has less than %s %s available; nothing was moved",
					i, l.From(), money.Format(l.Amount, dec[l.Asset]), l.Asset), err)
			}
			return fmt.Errorf("transfer %s leg %d: %w", t.ID, i, err)
		}
	}
	return nil
}

// legMemo is the memo of leg i of n's ledger entry.
func legMemo(i, n int) string { return fmt.Sprintf("transfer leg %d of %d", i+1, n) }

// lockRefs are the accounts every leg posts to, each once, for
// ledger.LockAccounts (which sorts them into its global order: asset,
// owner, kind): from's available account, and the account the leg credits
// (to's available account, or the platform account's shard the leg's
// source_ref chooses, ledger.Holder.CreditAccount).
func lockRefs(legs []Leg) []ledger.AccountRef {
	seen := map[ledger.AccountRef]bool{}
	var out []ledger.AccountRef
	for _, l := range legs {
		for _, a := range []ledger.Account{l.From().Available(), l.To().CreditAccount(SourceRef(l.TransferID, l.Index))} {
			r := ledger.AccountRef{Asset: l.Asset, Account: a}
			if !seen[r] {
				seen[r] = true
				out = append(out, r)
			}
		}
	}
	return out
}

// referenceFree is nil when no transfer has the client_reference, else the
// 409 naming the one that has it.
func (s *Service) referenceFree(ctx context.Context, ref string) error {
	t, ok, err := byClientReference(ctx, s.DB, ref)
	if err != nil {
		return err
	}
	if ok {
		return fault.New(fault.Conflict, fmt.Sprintf("client_reference is already used by transfer %s", t.ID))
	}
	return nil
}

// answer is the 201 of a transfer that exists.
func (s *Service) answer(ctx context.Context, t Transfer) (View, []byte, error) {
	vs, err := views(ctx, s.DB, []Transfer{t})
	if err != nil {
		return View{}, nil, err
	}
	body, err := json.Marshal(vs[0])
	return vs[0], body, err
}

// sameRequest reports a stored transfer that p describes.
func sameRequest(t Transfer, p CreateParams) bool {
	if len(t.Legs) != len(p.Legs) || !sameText(t.Description, p.Description) || !sameText(t.ClientReference, p.ClientReference) ||
		!maps.Equal(t.Metadata, p.Metadata) && (len(t.Metadata) > 0 || len(p.Metadata) > 0) {
		return false
	}
	for i, l := range t.Legs {
		q := p.Legs[i]
		if l.Asset != q.Asset || l.Amount != q.Amount || l.From() != q.From || l.To() != q.To {
			return false
		}
	}
	return true
}

func sameText(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

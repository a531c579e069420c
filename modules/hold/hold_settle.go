package hold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/event"
	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/idempotency"
)

// CaptureLeg is one account a capture pays.
type CaptureLeg struct {
	To     ledger.Holder
	Amount int64 // smallest units, > 0
}

// checkLegs refuses what the request's legs cannot be whatever the hold:
// none, more than MaxCaptureLegs, an account twice, an amount out of range.
func checkLegs(legs []CaptureLeg) error {
	if len(legs) == 0 || len(legs) > MaxCaptureLegs {
		return fault.Validation(fault.FieldError{Loc: []any{"body", "legs"}, Type: "value_error",
			Msg: fmt.Sprintf("a capture pays 1 to %d accounts", MaxCaptureLegs)})
	}
	seen := map[ledger.Holder]int{}
	for i, l := range legs {
		if l.Amount <= 0 || l.Amount > MaxAmount {
			return fault.Validation(fault.FieldError{Loc: []any{"body", "legs", i, "amount"}, Type: "value_error",
				Msg: fmt.Sprintf("amount must be from 1 to %d smallest units", int64(MaxAmount))})
		}
		if j, ok := seen[l.To]; ok {
			return fault.Validation(fault.FieldError{Loc: []any{"body", "legs", i, "to"}, Type: "value_error",
				Msg: fmt.Sprintf("%s is already paid by leg %d: each account appears once", l.To, j)})
		}
		seen[l.To] = i
	}
	return nil
}

// Capture pays the legs out of an open hold and returns the rest to the
// payer at once, in one transaction: escrow_capture (payer's escrow -> each
// leg's available) and, when the legs pay less than the amount,
// escrow_release of the rest. The hold ends captured, and hold.captured is
// emitted. Refusals: the legs (422: none or more than 15, an account
// twice, the payer itself, more than the held amount), a hold that is no
// longer open (409 naming its status).
func (s *Service) Capture(ctx context.Context, id uuid.UUID, legs []CaptureLeg, rec Completer) (View, []byte, error) {
	if err := checkLegs(legs); err != nil {
		return View{}, nil, err
	}
	return s.settle(ctx, id, Capture, rec, func(h Hold) (step, error) {
		payer := h.payer()
		var sum int64
		ls := make([]ledger.CaptureLeg, 0, len(legs))
		rows := make([]CaptureRow, 0, len(legs))
		for i, l := range legs {
			if l.To == payer {
				return step{}, fault.Validation(fault.FieldError{Loc: []any{"body", "legs", i, "to"}, Type: "value_error",
					Msg: fmt.Sprintf("%s is the hold's payer: a capture pays other accounts, and the rest returns to the payer by itself", payer)})
			}
			sum += l.Amount
			ls = append(ls, ledger.CaptureLeg{To: l.To, Amount: l.Amount})
			rows = append(rows, CaptureRow{HoldID: h.ID, Seq: i + 1, ToPlatform: l.To.Platform, ToID: l.To.ID, Amount: l.Amount})
		}
		if sum > h.Amount {
			return step{}, fault.Validation(fault.FieldError{Loc: []any{"body", "legs"}, Type: "value_error",
				Msg: fmt.Sprintf("the legs pay %d smallest units, more than the %d the hold holds", sum, h.Amount)})
		}
		rest := h.Amount - sum
		return step{set: map[string]any{"captured_amount": sum, "released_amount": rest}, captures: rows,
			post: func(ctx context.Context, tx bun.Tx) error {
				// Every existing account first, in the ledger's one order,
				// then the two entries: captures on the same accounts queue.
				// A recipient's first account is created after that, which
				// may deadlock once; RunInTx retries (ledger.CaptureEscrow).
				_, _, err := ledger.CaptureEscrow(ctx, tx, h.Asset, payer, ls, rest, h.ID.String(),
					"escrow hold captured", "escrow hold: the rest of a capture returned")
				return err
			}}, nil
	})
}

// Void returns an open hold's whole amount to the payer (escrow_release):
// voided, with hold.voided. A hold that is no longer open: 409 naming its
// status.
func (s *Service) Void(ctx context.Context, id uuid.UUID, rec Completer) (View, []byte, error) {
	return s.settle(ctx, id, Void, rec, release("escrow hold voided"))
}

// release is the step of a void or an expiry: everything back to the
// payer.
func release(memo string) func(h Hold) (step, error) {
	return func(h Hold) (step, error) {
		return step{set: map[string]any{"released_amount": h.Amount}, post: func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.PostEscrowRelease(ctx, tx, h.Asset, h.payer(), h.Amount, h.ID.String(), memo)
			return err
		}}, nil
	}
}

// step is what a capture, a void or an expiry does to an open hold: the
// columns it sets besides the status, the captures it records, and its
// ledger entries.
type step struct {
	set      map[string]any
	captures []CaptureRow
	post     func(ctx context.Context, tx bun.Tx) error
}

// events are the event of each step.
var events = map[Trigger]event.Type{Capture: event.HoldCaptured, Void: event.HoldVoided, Expire: event.HoldExpired}

// settle runs one step of an open hold in one transaction: it locks the
// hold (a concurrent step waits, then finds it moved on and is refused
// with its status), checks the table, asks prepare for the step (which may
// refuse it), moves the status, records the captures, emits the step's
// event, stores the answer (200) as the key's response, and posts the
// step's ledger entries last: they lock the accounts they move, and a
// platform account that every capture credits (a commission) is then held
// only from the postings to the commit.
func (s *Service) settle(ctx context.Context, id uuid.UUID, t Trigger, rec Completer, prepare func(h Hold) (step, error)) (View, []byte, error) {
	var (
		view View
		body []byte
	)
	err := db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		h, err := getHold(ctx, tx, id, true)
		if err != nil {
			return err
		}
		if _, err := Next(h.Status, t); err != nil {
			return err
		}
		st, err := prepare(h)
		if err != nil {
			return err
		}
		if err := s.transit(ctx, tx, &h, t, st.set); err != nil {
			return err
		}
		if err := insertCaptures(ctx, tx, st.captures); err != nil {
			return err
		}
		dec, err := s.decimals(ctx, tx, h.Asset)
		if err != nil {
			return err
		}
		view = render(h, st.captures, dec)
		if s.Events != nil {
			var data any
			switch d := eventData(view); t {
			case Capture:
				data = event.HoldCapturedData(d)
			case Void:
				data = event.HoldVoidedData(d)
			default:
				data = event.HoldExpiredData(d)
			}
			if _, err := s.Events.Emit(ctx, tx, events[t], data); err != nil {
				return fmt.Errorf("hold %s: emit %s: %w", h.ID, events[t], err)
			}
		}
		if body, err = json.Marshal(view); err != nil {
			return err
		}
		if rec != nil {
			if err := rec.CompleteTx(ctx, tx, http.StatusOK, "application/json", body); err != nil {
				return err
			}
		}
		return st.post(ctx, tx)
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

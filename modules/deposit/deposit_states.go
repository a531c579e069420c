package deposit

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"svc/modules/event"
	"svc/platform/fsm"
)

// Status is a deposit's state (SPEC "States and transitions").
type Status string

// The deposit states.
const (
	StatusCreating   Status = "creating"   // the invoice is being requested
	StatusPending    Status = "pending"    // address issued, nothing seen
	StatusConfirming Status = "confirming" // payment visible, not confirmed
	StatusSettled    Status = "settled"    // confirmed and credited (effectively terminal)
	StatusExpired    Status = "expired"    // window closed with nothing received (effectively terminal)
	StatusReview     Status = "review"     // money arrived needing an operator
	StatusDismissed  Status = "dismissed"  // closed by an operator without crediting (terminal)
	StatusFailed     Status = "failed"     // the processor refused to create the invoice (terminal)
)

// Statuses lists every state.
func Statuses() []Status {
	return []Status{StatusCreating, StatusPending, StatusConfirming, StatusSettled, StatusExpired,
		StatusReview, StatusDismissed, StatusFailed}
}

// Trigger is what moves a deposit.
type Trigger string

// The triggers of the transition table.
const (
	AddressIssued    Trigger = "address issued"
	ProcessorRefused Trigger = "processor refuses definitively"
	PaymentSeen      Trigger = "payment seen"
	PaymentConfirmed Trigger = "payment confirmed"
	WindowClosed     Trigger = "window closes with nothing received"
	// LaterPayment: a payment first seen after the deposit settled or
	// expired.
	LaterPayment Trigger = "a later payment to the same address"
	// NeedsReview: a payment after expiry, an invoice marked by hand, an
	// amount the service refuses to round, a USDT amount outside the
	// tolerance, a clashed pool address, payments that failed to confirm.
	NeedsReview   Trigger = "needs an operator"
	ResolveCredit Trigger = "resolve with action credit"
	// ResolveCreditPartial: a credit that leaves other payments of the
	// deposit waiting for an operator; the deposit stays in review.
	ResolveCreditPartial Trigger = "resolve with action credit, other payments still in review"
	ResolveDismiss       Trigger = "resolve with action dismiss"
)

// Transition is one row of the table; its Event is "" when the row emits
// no event.
type Transition = fsm.Transition[Status, Trigger, event.Type]

// machine holds the SPEC's deposit table, the only place that says which
// status may follow which. "any" of the SPEC's review row means every
// state that has an invoice and is not terminal; review itself stays in
// review without a second event.
var machine = &fsm.Machine[Status, Trigger, event.Type]{
	Table: "deposits",
	Noun:  "deposit",
	Rows: []Transition{
		{From: []Status{StatusCreating}, Trigger: AddressIssued, To: StatusPending},
		{From: []Status{StatusCreating}, Trigger: ProcessorRefused, To: StatusFailed},
		{From: []Status{StatusPending}, Trigger: PaymentSeen, To: StatusConfirming, Event: event.DepositDetected},
		{From: []Status{StatusConfirming}, Trigger: PaymentConfirmed, To: StatusSettled, Event: event.DepositSettled},
		{From: []Status{StatusPending}, Trigger: WindowClosed, To: StatusExpired, Event: event.DepositExpired},
		{From: []Status{StatusSettled, StatusExpired}, Trigger: LaterPayment, To: StatusReview, Event: event.DepositReviewRequired},
		{From: []Status{StatusPending, StatusConfirming, StatusSettled, StatusExpired}, Trigger: NeedsReview, To: StatusReview, Event: event.DepositReviewRequired},
		{From: []Status{StatusReview}, Trigger: NeedsReview, To: StatusReview},
		{From: []Status{StatusReview}, Trigger: LaterPayment, To: StatusReview},
		{From: []Status{StatusReview}, Trigger: ResolveCredit, To: StatusSettled, Event: event.DepositSettled},
		{From: []Status{StatusReview}, Trigger: ResolveCreditPartial, To: StatusReview},
		{From: []Status{StatusReview}, Trigger: ResolveDismiss, To: StatusDismissed},
	},
	Refuse: func(from Status, t Trigger) error {
		return fmt.Errorf("%w: %q from %s", ErrIllegalTransition, t, from)
	},
	MovedOn: func(msg string) error { return fmt.Errorf("%w: %s", ErrIllegalTransition, msg) },
}

// Transitions returns a copy of the table (for documentation and tests).
func Transitions() []Transition { return machine.Transitions() }

// Next returns the row that trigger t fires from status from, or an error
// matching ErrIllegalTransition.
func Next(from Status, t Trigger) (Transition, error) { return machine.Next(from, t) }

// transit moves d (locked by the caller's transaction) along the table and
// emits the row's event, built by data from the deposit's new state. The
// update is guarded on the status the caller read, so a concurrent change
// that slipped past the lock fails loudly instead of being overwritten.
func (s *Service) transit(ctx context.Context, tx bun.Tx, d *Deposit, t Trigger, data func(d *Deposit) any) error {
	tr, err := Next(d.Status, t)
	if err != nil {
		return err
	}
	now := s.now()
	from := d.Status
	if tr.To != from {
		// Real parameters (db.Exec): every step of every deposit.
		var set []string
		switch tr.To {
		case StatusSettled, StatusExpired:
			set = []string{"closed_at = COALESCE(closed_at, $2)"}
		case StatusReview:
			set = []string{"review_at = $2"}
		}
		if err := machine.Apply(ctx, tx, fsm.Step[Status]{ID: d.ID, From: from, To: tr.To, At: now, Exprs: set}); err != nil {
			return err
		}
		d.Status, d.UpdatedAt = tr.To, now
		switch tr.To {
		case StatusSettled, StatusExpired:
			if d.ClosedAt == nil {
				d.ClosedAt = &now
			}
		case StatusReview:
			d.ReviewAt = &now
		}
	}
	if tr.Event == "" || s.Events == nil {
		return nil
	}
	if _, err := s.Events.Emit(ctx, tx, tr.Event, data(d)); err != nil {
		return fmt.Errorf("deposit %s: emit %s: %w", d.ID, tr.Event, err)
	}
	return nil
}

package deposit

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/uptrace/bun"

	"svc/modules/event"
	"svc/modules/ingress"
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
// emits the row's event, built by data from the deposit's new state, in
// one statement (see change).
func (s *Service) transit(ctx context.Context, tx bun.Tx, d *Deposit, t Trigger, data func(d *Deposit) any) error {
	c := newChange(*d)
	if err := s.step(&c, d, t, data); err != nil {
		return err
	}
	return s.write(ctx, tx, d, &c)
}

// change is what one transaction does to a deposit's row (locked by it):
// its steps along the table, other columns it sets, and the events the
// steps emit, written by write in one statement with real parameters. A
// reconcile that finds an invoice paid and confirmed moves the deposit
// pending -> confirming -> settled, records when it was polled, and writes
// deposit.detected and deposit.settled: one UPDATE whose WITH queries
// insert the events' rows, where it was three UPDATEs and two INSERTs
// (docs/performance.md, "Deposits settled end to end"). The update is
// guarded on the status the transaction read, so a concurrent change that
// slipped past the lock fails loudly instead of being overwritten.
type change struct {
	from   Status
	at     time.Time         // the last step's time: updated_at, and $2 of exprs
	exprs  map[string]string // column -> assignment that may use $2
	set    map[string]any
	events []event.Event
	// settles: the change is a reconcile's (apply), the transaction that
	// records what the processor says of the invoice; only it writes the
	// processed mark of the webhook being handled (ingress.ProcessedWith).
	// An adoption or an issue on the way there (transit) does not: the
	// webhook's effect is the reconcile's, and a reconcile that fails
	// after them leaves the webhook to be retried.
	settles bool
}

func newChange(d Deposit) change {
	return change{from: d.Status, exprs: map[string]string{}, set: map[string]any{}}
}

// step moves d along the table by t in memory, and adds the row's change
// and its event to c.
func (s *Service) step(c *change, d *Deposit, t Trigger, data func(d *Deposit) any) error {
	tr, err := Next(d.Status, t)
	if err != nil {
		return err
	}
	now := s.now()
	if tr.To != d.Status {
		switch tr.To {
		case StatusSettled, StatusExpired:
			c.exprs["closed_at"] = "closed_at = COALESCE(closed_at, $2)"
			if d.ClosedAt == nil {
				d.ClosedAt = &now
			}
		case StatusReview:
			c.exprs["review_at"] = "review_at = $2"
			d.ReviewAt = &now
		}
		d.Status, d.UpdatedAt, c.at = tr.To, now, now
	}
	if tr.Event == "" || s.Events == nil {
		return nil
	}
	e, err := s.Events.Prepare(tr.Event, data(d))
	if err != nil {
		return fmt.Errorf("deposit %s: emit %s: %w", d.ID, tr.Event, err)
	}
	c.events = append(c.events, e)
	return nil
}

// write writes c, whose steps d has taken, in tx: one statement (nothing
// when c changes nothing), and queues the events' deliveries.
func (s *Service) write(ctx context.Context, tx bun.Tx, d *Deposit, c *change) error {
	var with []fsm.With
	for _, e := range c.events {
		with = append(with, e.RowInsert)
	}
	// A webhook's deliveries are marked processed by the statement that
	// writes their effect, in its commit.
	if c.settles {
		if mark, ok := ingress.ProcessedWith(ctx); ok {
			with = append(with, mark)
		}
	}
	var exprs []string
	if d.Status != c.from {
		for _, col := range slices.Sorted(maps.Keys(c.exprs)) {
			exprs = append(exprs, c.exprs[col])
		}
	}
	st := fsm.Step[Status]{ID: d.ID, From: c.from, To: d.Status, At: c.at, Exprs: exprs, Set: c.set, With: with, Stays: d.Status == c.from}
	if err := machine.Apply(ctx, tx, st); err != nil {
		return err
	}
	for _, e := range c.events {
		if err := s.Events.QueueDelivery(ctx, tx.Tx, e); err != nil {
			return fmt.Errorf("deposit %s: %w", d.ID, err)
		}
	}
	return nil
}

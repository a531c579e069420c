package hold

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"svc/platform/fault"
	"svc/platform/fsm"
)

// Status is a hold's state.
type Status string

// The hold states.
const (
	StatusOpen     Status = "open"     // the amount is in the payer's escrow (reserved)
	StatusCaptured Status = "captured" // paid to the capture's accounts, the rest returned (terminal)
	StatusVoided   Status = "voided"   // returned to the payer on request (terminal)
	StatusExpired  Status = "expired"  // returned to the payer by the expiry pass (terminal)
)

// Statuses lists every state.
func Statuses() []Status { return []Status{StatusOpen, StatusCaptured, StatusVoided, StatusExpired} }

// Valid reports one of the states.
func (s Status) Valid() bool {
	for _, x := range Statuses() {
		if s == x {
			return true
		}
	}
	return false
}

// Trigger is what moves a hold.
type Trigger string

// The triggers.
const (
	Capture Trigger = "capture"
	Void    Trigger = "void"
	Expire  Trigger = "expire"
)

// Transition is one row of the table (its rows emit no event: each step
// emits its own).
type Transition = fsm.Transition[Status, Trigger, fsm.NoEvent]

// machine is the hold's table: every step leaves open, and nothing leaves
// a terminal state. Creation (new -> open) is not a transition of a stored
// row. The database refuses any other step (holds_guard, migration 0041).
var machine = &fsm.Machine[Status, Trigger, fsm.NoEvent]{
	Table: "holds",
	Noun:  "hold",
	Rows: []Transition{
		{From: []Status{StatusOpen}, Trigger: Capture, To: StatusCaptured},
		{From: []Status{StatusOpen}, Trigger: Void, To: StatusVoided},
		{From: []Status{StatusOpen}, Trigger: Expire, To: StatusExpired},
	},
	Refuse:  refuse,
	MovedOn: func(msg string) error { return fault.Wrap(fault.Conflict, msg, ErrIllegalTransition) },
}

// Transitions returns a copy of the table (for documentation and tests).
func Transitions() []Transition { return machine.Transitions() }

// Next returns the row that trigger t fires from status from, or an error
// matching ErrIllegalTransition that names the current status.
func Next(from Status, t Trigger) (Transition, error) { return machine.Next(from, t) }

func refuse(from Status, t Trigger) error {
	return fault.Wrap(fault.Conflict, fmt.Sprintf("cannot %s a hold that is %s: only an open hold can be captured, voided or expired", t, from),
		ErrIllegalTransition)
}

// transit moves h (locked by the caller's transaction) along the table,
// setting the columns of set too, guarded on the status read, and reads the
// row it wrote back into h.
func (s *Service) transit(ctx context.Context, tx bun.Tx, h *Hold, t Trigger, set map[string]any) error {
	tr, err := Next(h.Status, t)
	if err != nil {
		return err
	}
	return machine.Apply(ctx, tx, fsm.Step[Status]{ID: h.ID, From: h.Status, To: tr.To, At: s.now(), Set: set, Into: h})
}

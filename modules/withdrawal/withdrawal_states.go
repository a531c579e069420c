package withdrawal

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"svc/platform/fault"
	"svc/platform/fsm"
)

// Status is a withdrawal's state (SPEC "States and transitions").
type Status string

// The withdrawal states.
const (
	StatusRequested       Status = "requested"        // transient: never stored by this service
	StatusPendingApproval Status = "pending_approval" // waiting for an operator; held
	StatusApproved        Status = "approved"         // cleared, waiting for the submitter; held
	StatusRejected        Status = "rejected"         // not used: a rejection reads refunded
	StatusSubmitting      Status = "submitting"       // being handed to the processor; held
	StatusSubmitted       Status = "submitted"        // the processor accepted the payout; held
	StatusBroadcast       Status = "broadcast"        // on chain, txid set; held
	StatusConfirmed       Status = "confirmed"        // done, debited (terminal)
	StatusFailed          Status = "failed"           // will not proceed; still held until released
	StatusRefunded        Status = "refunded"         // hold returned (terminal)
)

// Statuses lists every state.
func Statuses() []Status {
	return []Status{StatusRequested, StatusPendingApproval, StatusApproved, StatusRejected, StatusSubmitting,
		StatusSubmitted, StatusBroadcast, StatusConfirmed, StatusFailed, StatusRefunded}
}

// Valid reports one of the states.
func (s Status) Valid() bool {
	for _, x := range Statuses() {
		if s == x {
			return true
		}
	}
	return false
}

// Held reports a state in which the gross is still held.
func (s Status) Held() bool {
	switch s {
	case StatusRefunded, StatusConfirmed, StatusRejected:
		return false
	}
	return true
}

// Trigger is what moves a withdrawal.
type Trigger string

// The triggers of the transition table that this module fires.
const (
	Approve Trigger = "approve"
	Reject  Trigger = "reject"
	Release Trigger = "release"
	// MarkBroadcast: an operator reports the USDT_TRC20 transfer they sent,
	// verified on chain.
	MarkBroadcast Trigger = "mark-broadcast"
	// Confirm: the payout is final (for USDT_TRC20, its block solidified).
	Confirm Trigger = "confirm"
	// Claim: a submitter takes the withdrawal to hand its payout to the
	// processor (or takes over a crashed submitter's expired claim).
	Claim Trigger = "claim"
	// Retry: a submission that failed ambiguously stays submitting until
	// its next attempt.
	Retry Trigger = "retry"
	// Requeue: the processor refused the payout for now (another payout to
	// the same destination is open); the withdrawal waits for its turn.
	Requeue Trigger = "requeue"
	// Accept: the processor has the payout (backend_ref set).
	Accept Trigger = "accept"
	// Broadcast: the processor's payout is on chain (or, on Lightning,
	// paid), with its txid or payment hash.
	Broadcast Trigger = "broadcast"
	// Fail: the payout will not proceed (refused, cancelled, fee above the
	// amount, Lightning deadline); the money stays held.
	Fail Trigger = "fail"
	// Expire: a Lightning withdrawal whose invoice expired without being
	// paid returns its hold automatically.
	Expire Trigger = "expire"
)

// Transition is one row of the table (its rows emit no event).
type Transition = fsm.Transition[Status, Trigger, fsm.NoEvent]

// machine holds the SPEC's withdrawal table with the steps it leaves to
// the service (claim, retry, requeue, accept, broadcast, fail, expire: the
// payout work of withdrawal_payout.go). Creation (new -> pending_approval
// or approved) is not a transition of a stored row. Reject goes straight
// to refunded because the hold is returned in the same transaction.
// Release is refused from pending_approval (reject it instead) and from
// the terminal states; from submitting it is allowed only once the
// submitter's claim has lapsed (Service.Release checks that, and asks the
// processor).
var machine = &fsm.Machine[Status, Trigger, fsm.NoEvent]{
	Table: "withdrawals",
	Noun:  "withdrawal",
	Rows: []Transition{
		{From: []Status{StatusPendingApproval}, Trigger: Approve, To: StatusApproved},
		{From: []Status{StatusPendingApproval}, Trigger: Reject, To: StatusRefunded},
		{From: []Status{StatusApproved, StatusSubmitting, StatusSubmitted, StatusBroadcast, StatusFailed}, Trigger: Release, To: StatusRefunded},
		{From: []Status{StatusApproved}, Trigger: MarkBroadcast, To: StatusBroadcast},
		{From: []Status{StatusBroadcast}, Trigger: Confirm, To: StatusConfirmed},
		{From: []Status{StatusApproved, StatusSubmitting}, Trigger: Claim, To: StatusSubmitting},
		{From: []Status{StatusSubmitting}, Trigger: Retry, To: StatusSubmitting},
		{From: []Status{StatusSubmitting}, Trigger: Requeue, To: StatusApproved},
		{From: []Status{StatusSubmitting}, Trigger: Accept, To: StatusSubmitted},
		// From failed too: a payout the processor had given up on can still
		// confirm, and is then settled, never refunded.
		{From: []Status{StatusSubmitted, StatusFailed}, Trigger: Broadcast, To: StatusBroadcast},
		{From: []Status{StatusApproved, StatusSubmitting, StatusSubmitted, StatusBroadcast}, Trigger: Fail, To: StatusFailed},
		{From: []Status{StatusSubmitted, StatusFailed}, Trigger: Expire, To: StatusRefunded},
	},
	Refuse:  refuse,
	MovedOn: func(msg string) error { return fault.Wrap(fault.Conflict, msg, ErrIllegalTransition) },
}

// Transitions returns a copy of the table (for documentation and tests).
func Transitions() []Transition { return machine.Transitions() }

// Next returns the row that trigger t fires from status from, or an error
// matching ErrIllegalTransition that says why.
func Next(from Status, t Trigger) (Transition, error) { return machine.Next(from, t) }

// refuse is the error of a trigger that no row fires from status from,
// saying why.
func refuse(from Status, t Trigger) error {
	why := ""
	switch {
	case t == Release && from == StatusPendingApproval:
		why = ": no payout can exist yet; reject it instead"
	case from == StatusConfirmed:
		why = ": the payout is confirmed and the money has left"
	case from == StatusRefunded:
		why = ": the hold was already returned"
	case t == Approve || t == Reject:
		why = ": only a withdrawal pending approval can be " + map[Trigger]string{Approve: "approved", Reject: "rejected"}[t]
	case t == MarkBroadcast:
		why = ": only an approved USDT_TRC20 withdrawal awaits an off-service send"
	}
	return fault.Wrap(fault.Conflict, fmt.Sprintf("cannot %s a withdrawal that is %s%s", t, from, why), ErrIllegalTransition)
}

// transit moves w (locked by the caller's transaction) along the table,
// setting the columns of set as well, and reads the row it wrote back into
// w. The update is guarded on the status the caller read.
func (s *Service) transit(ctx context.Context, tx bun.Tx, w *Withdrawal, t Trigger, set map[string]any) error {
	return s.transitIf(ctx, tx, w, t, set, "", nil)
}

// transitAsRead is transit in one statement on any handle, without a
// lock: the update applies only while the row still holds, besides its
// status, the values unchanged names as w has them, and every condition
// of conds; else ErrIllegalTransition.
func (s *Service) transitAsRead(ctx context.Context, idb bun.IDB, w *Withdrawal, t Trigger, set, unchanged map[string]any, conds ...string) error {
	tr, err := Next(w.Status, t)
	if err != nil {
		return err
	}
	return machine.Apply(ctx, idb, fsm.Step[Status]{ID: w.ID, From: w.Status, To: tr.To, At: s.now(),
		Set: set, Unchanged: unchanged, Conds: conds, Into: w})
}

// transitThrough moves w along several rows of the table at once, each
// trigger of ts fired from the status the one before it reached, in one
// statement guarded as transitIf's: the steps a state change takes in one
// transaction are one write of the row, not one per step.
func (s *Service) transitThrough(ctx context.Context, idb bun.IDB, w *Withdrawal, set map[string]any, guard string, value any, ts ...Trigger) error {
	to := w.Status
	for _, t := range ts {
		tr, err := Next(to, t)
		if err != nil {
			return err
		}
		to = tr.To
	}
	return machine.Apply(ctx, idb, fsm.Step[Status]{ID: w.ID, From: w.Status, To: to, At: s.now(),
		Set: set, Guard: guard, GuardValue: value, Into: w})
}

// transitIf is transit in one statement on any handle (no lock needed),
// guarded as well on column guard holding value when guard is not empty:
// the update applies only while both hold, else ErrIllegalTransition.
func (s *Service) transitIf(ctx context.Context, idb bun.IDB, w *Withdrawal, t Trigger, set map[string]any, guard string, value any) error {
	tr, err := Next(w.Status, t)
	if err != nil {
		return err
	}
	// Real parameters (db.QueryModel), the columns in a fixed order: one
	// statement text per set of columns, prepared once per connection.
	return machine.Apply(ctx, idb, fsm.Step[Status]{ID: w.ID, From: w.Status, To: tr.To, At: s.now(),
		Set: set, Guard: guard, GuardValue: value, Into: w})
}

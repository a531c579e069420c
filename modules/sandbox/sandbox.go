// Package sandbox serves the test helpers (/v1/test_helpers/...,
// docs/sandbox.md): on a test-mode deployment whose payment processor is
// the simulator, an integrator moves its own deposits and withdrawals
// through their states with its readwrite key, instead of waiting for a
// payer, a block or a payout processor.
//
// A helper makes the change at the simulator (its control API), then has
// the service apply the processor's new state through the very code the
// processor's webhooks and the pollers run (deposit.Service.Reconcile,
// withdrawal.Service.Track, withdrawal.Service.Submit), and answers the
// resource as re-read after it. No rule of the deposit or withdrawal
// lifecycle lives here: events, ledger postings and reviews are what real
// operation makes, and the simulator's own webhooks, arriving later, find
// nothing left to do.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/modules/deposit"
	"svc/modules/withdrawal"
	"svc/platform/fault"
	"svc/platform/money"
)

// Service runs the helpers.
type Service struct {
	DB          bun.IDB
	Deposits    *deposit.Service
	Withdrawals *withdrawal.Service
	// Sim is the simulator's control API; nil: every helper answers 404.
	Sim *Simulator
}

// ErrOff answers every helper where they are off: the body of an unknown
// route (httpapi.NotFound).
var ErrOff = fault.New(fault.NotFound, "not found")

// PayParams is a deposit payment at the simulator.
type PayParams struct {
	// Amounts are the payments in the asset's smallest units, one
	// payment each; none pays what is still due of the deposit's
	// amount_expected.
	Amounts []int64
	// Confirmed confirms the payments at once.
	Confirmed bool
}

// ErrNoExpectedAmount: pay without amounts on a deposit that expects none.
var ErrNoExpectedAmount = fault.Validation(fault.FieldError{Loc: []any{"body", "amounts"}, Type: "missing",
	Msg: "the deposit has no amount_expected: give the amounts to pay"})

// depositInvoice reads deposit id and the processor invoice it has; a
// deposit without one (creating, failed) is a 409.
func (s *Service) depositInvoice(ctx context.Context, id uuid.UUID) (deposit.Deposit, string, error) {
	d, err := s.Deposits.Get(ctx, id)
	if err != nil {
		return d, "", err
	}
	if d.InvoiceID == nil {
		return d, "", conflict("deposit", d.Status, "it has no invoice at the processor")
	}
	return d, *d.InvoiceID, nil
}

// PayDeposit pays deposit id's invoice at the simulator, then reconciles
// the deposit.
func (s *Service) PayDeposit(ctx context.Context, id uuid.UUID, p PayParams) (deposit.View, error) {
	d, inv, err := s.depositInvoice(ctx, id)
	if err != nil {
		return deposit.View{}, err
	}
	if len(p.Amounts) == 0 && d.AmountExpected == nil {
		return deposit.View{}, ErrNoExpectedAmount
	}
	a, err := (&asset.Store{DB: s.DB}).Get(ctx, d.Asset)
	if err != nil {
		return deposit.View{}, err
	}
	body := struct {
		Amounts []string `json:"amounts,omitempty"`
		Settled bool     `json:"settled"`
	}{Settled: p.Confirmed}
	for _, u := range p.Amounts {
		body.Amounts = append(body.Amounts, money.Format(u, a.Decimals))
	}
	if err := s.Sim.Invoice(ctx, inv, "pay", body); err != nil {
		if r, ok := asRefusal(err); ok && r.Status == http.StatusBadRequest && len(p.Amounts) == 0 {
			return deposit.View{}, conflict("deposit", s.depositStatus(ctx, d), "nothing is due on its invoice: give the amounts to pay")
		}
		return deposit.View{}, refused(err, "deposit", s.depositStatus(ctx, d))
	}
	return s.reconciled(ctx, id)
}

// ConfirmDeposit confirms every payment of deposit id at the simulator,
// then reconciles the deposit.
func (s *Service) ConfirmDeposit(ctx context.Context, id uuid.UUID) (deposit.View, error) {
	d, inv, err := s.depositInvoice(ctx, id)
	if err != nil {
		return deposit.View{}, err
	}
	if err := s.Sim.Invoice(ctx, inv, "confirm", struct{}{}); err != nil {
		return deposit.View{}, refused(err, "deposit", s.depositStatus(ctx, d))
	}
	return s.reconciled(ctx, id)
}

// ExpireDeposit ends deposit id's invoice window now at the simulator,
// then reconciles the deposit.
func (s *Service) ExpireDeposit(ctx context.Context, id uuid.UUID) (deposit.View, error) {
	d, inv, err := s.depositInvoice(ctx, id)
	if err != nil {
		return deposit.View{}, err
	}
	if err := s.Sim.Invoice(ctx, inv, "expire", struct{}{}); err != nil {
		return deposit.View{}, refused(err, "deposit", s.depositStatus(ctx, d))
	}
	return s.reconciled(ctx, id)
}

// depositStatus is deposit d's status once reconciled with the processor,
// for a refusal to name: the processor may have moved it (an invoice
// that expired on its own) before the service heard of it. A reconcile
// that fails leaves the status as read.
func (s *Service) depositStatus(ctx context.Context, d deposit.Deposit) deposit.Status {
	if s.Deposits.Reconcile(ctx, d.ID) == nil {
		if cur, err := s.Deposits.Get(ctx, d.ID); err == nil {
			return cur.Status
		}
	}
	return d.Status
}

// reconciled applies the processor's state of deposit id through the
// reconcile its webhooks and the poller run, and renders it as re-read.
func (s *Service) reconciled(ctx context.Context, id uuid.UUID) (deposit.View, error) {
	if err := s.Deposits.Reconcile(ctx, id); err != nil {
		return deposit.View{}, err
	}
	d, err := s.Deposits.Get(ctx, id)
	if err != nil {
		return deposit.View{}, err
	}
	return s.Deposits.ViewOf(ctx, s.DB, d)
}

// Payout actions at the simulator, by helper.
const (
	PayoutBroadcast = "broadcast"
	PayoutConfirm   = "complete"
	PayoutFail      = "fail"
	PayoutStall     = "stall"
)

// processorAssets are the assets whose withdrawals are processor payouts.
var processorAssets = []string{asset.BTC, asset.BTCLN}

// Payout moves withdrawal id's payout at the simulator (action: one of
// the Payout constants; txid only for a broadcast), then tracks the
// withdrawal. An approved withdrawal not submitted yet is submitted first,
// by the submitter's own Submit; one that still has no payout is a 409.
func (s *Service) Payout(ctx context.Context, id uuid.UUID, action, txid string) (withdrawal.View, error) {
	w, err := s.Withdrawals.Get(ctx, id)
	if err != nil {
		return withdrawal.View{}, err
	}
	if !slices.Contains(processorAssets, w.Asset) {
		return withdrawal.View{}, conflict("withdrawal", w.Status,
			fmt.Sprintf("a %s withdrawal is sent by an operator, not by the processor: see POST /v1/test_helpers/tron/transfers", w.Asset))
	}
	if w.BackendRef == nil && (w.Status == withdrawal.StatusApproved || w.Status == withdrawal.StatusSubmitting) {
		if err := s.Withdrawals.Submit(ctx, id); err != nil {
			return withdrawal.View{}, err
		}
		if w, err = s.Withdrawals.Get(ctx, id); err != nil {
			return withdrawal.View{}, err
		}
	}
	if w.BackendRef == nil {
		return withdrawal.View{}, conflict("withdrawal", w.Status, "it has no payout at the processor")
	}
	var body any = struct{}{}
	if txid != "" {
		body = map[string]string{"txid": txid}
	}
	if err := s.Sim.Payout(ctx, *w.BackendRef, action, body); err != nil {
		// Named as tracked: the payout may have moved on its own.
		if s.Withdrawals.Track(ctx, id) == nil {
			if cur, err := s.Withdrawals.Get(ctx, id); err == nil {
				w = cur
			}
		}
		return withdrawal.View{}, refused(err, "withdrawal", w.Status)
	}
	if err := s.Withdrawals.Track(ctx, id); err != nil {
		return withdrawal.View{}, err
	}
	if w, err = s.Withdrawals.Get(ctx, id); err != nil {
		return withdrawal.View{}, err
	}
	vs, err := s.Withdrawals.Views(ctx, []withdrawal.Withdrawal{w})
	if err != nil {
		return withdrawal.View{}, err
	}
	return vs[0], nil
}

// SetFeeRate sets the processor's fee-rate estimate (sat/vB) and has this
// process forget the rate it reuses (BTC_FEE_RATE_TTL), so that its next
// estimate reads the new one.
func (s *Service) SetFeeRate(ctx context.Context, rate string) error {
	if err := s.Sim.SetFeeRate(ctx, rate); err != nil {
		return refused(err, "", "")
	}
	s.Withdrawals.ForgetFeeRate()
	return nil
}

// TronTransfer adds a confirmed USDT transfer to the TRON node simulator.
func (s *Service) TronTransfer(ctx context.Context, from, to string, amount int64, txid string) (string, error) {
	id, err := s.Sim.TronTransfer(ctx, from, to, amount, txid)
	if err != nil {
		return "", refused(err, "", "")
	}
	return id, nil
}

// conflict is the 409 of a helper that the resource's state does not
// allow, naming that state.
func conflict[S ~string](what string, status S, why string) error {
	return fault.New(fault.Conflict, fmt.Sprintf("the %s is %s: %s", what, status, why))
}

// refused turns the simulator's refusal of a control call into the
// helper's answer: a state that does not allow it (409, naming the
// resource's status when there is one), an id the simulator does not know
// (409: the resource's processor object is not at this simulator), a bad
// request (422).
func refused[S ~string](err error, what string, status S) error {
	r, ok := asRefusal(err)
	if !ok {
		return err
	}
	switch r.Status {
	case http.StatusConflict, http.StatusNotFound:
		if what == "" {
			return fault.New(fault.Conflict, "the processor simulator refused: "+r.Message)
		}
		return conflict(what, status, "the processor simulator refused: "+r.Message)
	case http.StatusBadRequest:
		return fault.New(fault.Invalid, "the processor simulator refused: "+r.Message)
	}
	return fault.Wrap(fault.Unavailable, errSimUnreachable.Message, errors.New(r.Error()))
}

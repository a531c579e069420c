package btcpaysim

import (
	"fmt"
	"time"

	"svc/platform/btcpay"
)

func canMarkSettled(inv *invoice) bool {
	switch inv.status {
	case stNew, stProcessing, stExpired, stInvalid:
		return true
	}
	return inv.additional == addMarked && inv.status != stSettled
}

func canMarkInvalid(inv *invoice) bool {
	switch inv.status {
	case stNew, stProcessing, stExpired:
		return true
	}
	return inv.additional == addMarked && inv.status != stInvalid
}

func (s *Sim) markLocked(inv *invoice, to string) error {
	if (to == stSettled && !canMarkSettled(inv)) || (to == stInvalid && !canMarkInvalid(inv)) {
		return ErrInvalidState
	}
	inv.status, inv.additional = to, addMarked
	if to == stSettled {
		s.emitInvoice(inv, btcpay.EventInvoiceSettled, field{"manuallyMarked", true}, field{"overPaid", false})
	} else {
		s.emitInvoice(inv, btcpay.EventInvoiceInvalid, field{"manuallyMarked", true})
	}
	return nil
}

// confirmationsFor is what a speed policy waits for on chain.
func confirmationsFor(speed string) int64 {
	switch speed {
	case btcpay.SpeedHigh:
		return 0
	case btcpay.SpeedLowMedium:
		return 2
	case btcpay.SpeedLow:
		return 6
	}
	return 1
}

// update applies time and payments to inv's status, as BTCPay's invoice
// watcher does, and emits the webhooks. Called with s.mu held.
func (s *Sim) update(inv *invoice, now time.Time) {
	if inv.additional == addMarked {
		return // a human decided; payments no longer move it
	}
	if inv.status == stNew && !now.Before(inv.expiration) {
		s.expireLocked(inv)
	}
	full, over := inv.paidState()
	switch inv.status {
	case stNew:
		switch {
		case full:
			inv.status, inv.additional = stProcessing, addNone
			if over {
				inv.additional = addPaidOver
			}
			s.emitInvoice(inv, btcpay.EventInvoiceProcessing, field{"overPaid", over})
		case inv.hasPayments():
			inv.additional = addPaidPartial
		default:
			inv.additional = addNone
		}
	case stExpired:
		if full && inv.additional != addPaidLate {
			inv.additional = addPaidLate
			s.emitInvoice(inv, btcpay.EventInvoicePaidAfterExpiration)
		} else if !full && inv.hasPayments() {
			inv.additional = addPaidPartial
		}
	case stProcessing:
		switch {
		case !full: // a payment was replaced or double spent
			inv.status, inv.additional = stNew, addNone
			if inv.hasPayments() {
				inv.additional = addPaidPartial
			}
		case over:
			inv.additional = addPaidOver
		}
	case stSettled:
		if over {
			inv.additional = addPaidOver
		}
	}
	if inv.status == stProcessing && inv.allSettled() {
		inv.status = stSettled
		s.emitInvoice(inv, btcpay.EventInvoiceSettled, field{"manuallyMarked", false}, field{"overPaid", over})
	}
	if inv.status == stProcessing && !now.Before(inv.monitoring) {
		inv.status = stInvalid
		s.emitInvoice(inv, btcpay.EventInvoiceInvalid, field{"manuallyMarked", false})
	}
}

func (s *Sim) expireLocked(inv *invoice) {
	inv.status = stExpired
	partial := inv.additional == addPaidPartial
	s.emitInvoice(inv, btcpay.EventInvoiceExpired, field{"partiallyPaid", partial})
	if partial {
		s.emitInvoice(inv, btcpay.EventInvoiceExpiredPaidPartial)
	}
}

// Tick applies expiries and monitoring deadlines now (it also runs every
// TickEvery, and before an API request when the simulator's clock moved
// by requestTickEvery since the last pass).
func (s *Sim) Tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tickLocked(s.now())
}

// requestTickEvery: an API request applies the deadlines first unless a
// pass ran less than this ago on the simulator's clock. A pass reads every
// open invoice; once per request it took most of the simulator's CPU at
// hundreds of requests a second over thousands of invoices. A test that
// moves the clock by more than this sees its deadlines applied at its next
// request, as before.
const requestTickEvery = 100 * time.Millisecond

// tickBeforeRequest is Tick, for an API request about to be served.
func (s *Sim) tickBeforeRequest() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if d := now.Sub(s.lastTick); !s.lastTick.IsZero() && d >= 0 && d < requestTickEvery {
		return
	}
	s.tickLocked(now)
}

// tickLocked applies the deadlines at now. Only New invoices (expiry) and
// Processing ones (end of monitoring) have deadlines; every other change
// of an invoice comes with an update of that invoice. Called with s.mu
// held.
func (s *Sim) tickLocked(now time.Time) {
	s.lastTick = now
	for _, id := range s.invOrder {
		if inv := s.invoices[id]; inv.status == stNew || inv.status == stProcessing {
			s.update(inv, now)
		}
	}
}

func (s *Sim) invoiceLocked(id string) (*invoice, error) {
	inv := s.invoices[id]
	if inv == nil {
		return nil, fmt.Errorf("%w: %s", ErrUnknownInvoice, id)
	}
	s.update(inv, s.now())
	return inv, nil
}

// onInvoice runs fn on invoice id, brought up to date, with s.mu held.
func (s *Sim) onInvoice(id string, fn func(inv *invoice) error) error {
	return locked(s, id, s.invoiceLocked, fn)
}

// locked runs fn on what find finds of id, with s.mu held; find's error
// (an unknown id) is returned as it is.
func locked[T any](s *Sim, id string, find func(id string) (T, error), fn func(T) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	x, err := find(id)
	if err != nil {
		return err
	}
	return fn(x)
}

// Expire ends a New invoice's payment window now (InvoiceExpired).
// Monitoring continues for the invoice's monitoring minutes from now.
func (s *Sim) Expire(invoiceID string) error {
	return s.onInvoice(invoiceID, func(inv *invoice) error {
		if inv.status != stNew {
			return fmt.Errorf("%w: invoice is %s", ErrInvalidState, inv.status)
		}
		now := s.now()
		inv.expiration = now
		inv.monitoring = now.Add(time.Duration(inv.checkout.MonitoringMinutes) * time.Minute)
		s.expireLocked(inv)
		return nil
	})
}

// MarkSettled marks the invoice settled by hand, as an operator can in
// BTCPay, whether or not anything was paid (InvoiceSettled with
// manuallyMarked).
func (s *Sim) MarkSettled(invoiceID string) error { return s.mark(invoiceID, stSettled) }

// MarkInvalid marks the invoice invalid by hand.
func (s *Sim) MarkInvalid(invoiceID string) error { return s.mark(invoiceID, stInvalid) }

func (s *Sim) mark(invoiceID, to string) error {
	return s.onInvoice(invoiceID, func(inv *invoice) error { return s.markLocked(inv, to) })
}

package btcpaysim

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/govalues/decimal"

	"svc/platform/btcpay"
)

// Pay records payments to an invoice as BTCPay would see them, and sends
// the webhooks that follow.
func (s *Sim) Pay(invoiceID string, p PayParams) ([]PaymentInfo, error) {
	var transfers []USDTTransfer
	defer func() {
		if s.o.OnUSDTPayment != nil {
			for _, t := range transfers {
				s.o.OnUSDTPayment(t)
			}
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	inv, err := s.invoiceLocked(invoiceID)
	if err != nil {
		return nil, err
	}
	pr := inv.prompts[0]
	if p.Method != "" {
		pr = nil
		for _, x := range inv.prompts {
			if btcpay.SameMethod(x.method, p.Method) {
				pr = x
			}
		}
		if pr == nil {
			return nil, fmt.Errorf("btcpaysim: invoice %s has no payment method %s", invoiceID, p.Method)
		}
	}
	now := s.now()
	if err := s.watched(inv, pr, now); err != nil {
		return nil, err
	}
	var amounts []decimal.Decimal
	for _, a := range p.Amounts {
		d, err := decimal.Parse(a)
		if err != nil || !d.IsPos() || d.Trim(0).Scale() > pr.divisibility {
			return nil, fmt.Errorf("btcpaysim: amount %q is not a positive %s amount with at most %d decimals", a, pr.currency, pr.divisibility)
		}
		amounts = append(amounts, d)
	}
	if len(amounts) == 0 {
		left, _ := pr.due.Sub(inv.paid())
		if inv.amount == nil || !left.IsPos() {
			return nil, fmt.Errorf("btcpaysim: nothing is due on invoice %s; give amounts", invoiceID)
		}
		amounts = []decimal.Decimal{left}
	}
	if pr.method == btcpay.MethodBTCLN {
		if len(amounts) != 1 {
			return nil, errors.New("btcpaysim: a BOLT11 invoice is paid in one payment")
		}
		if inv.amount != nil && amounts[0].Cmp(pr.due) != 0 {
			return nil, fmt.Errorf("btcpaysim: the BOLT11 invoice asks for exactly %s BTC", pr.due)
		}
	}
	if pr.method == btcpay.MethodBTCChain && !now.Before(inv.monitoring) && inv.status != stSettled {
		for _, a := range amounts {
			s.wallet.receive(randHex(32), a, 0, now, "")
		}
		return nil, fmt.Errorf("%w: monitoring ended at %s; recorded as a wallet receive matching no invoice",
			ErrNotWatched, inv.monitoring.Format(time.RFC3339))
	}
	var out []PaymentInfo
	for _, amt := range amounts {
		pm := &payment{method: pr.method, div: pr.divisibility, value: amt, status: payProcessing, received: now,
			destination: pr.destination, afterExpiration: inv.status == stExpired || inv.status == stInvalid}
		switch pr.method {
		case btcpay.MethodBTCChain:
			pm.txid = randHex(32)
			pm.id = pm.txid + "-" + strconv.Itoa(len(pr.payments)%2)
			if p.Settled || confirmationsFor(inv.checkout.SpeedPolicy) == 0 {
				pm.status = paySettled
			}
			confs := int64(0)
			if pm.status == paySettled {
				confs = confirmationsFor(inv.checkout.SpeedPolicy)
			}
			s.wallet.receive(pm.txid, amt, confs, now, inv.id)
		case btcpay.MethodBTCLN:
			pm.id, pm.txid, pm.status = pr.lnHash, pr.lnHash, paySettled
			msat, _ := units(amt, 11)
			s.wallet.lnLocalMsat += msat
		case btcpay.MethodUSDTTron:
			pm.txid = randHex(32)
			pm.id = pm.txid + "-" + strconv.Itoa(len(pr.payments))
			if p.Settled {
				pm.status = paySettled
			}
			transfers = append(transfers, USDTTransfer{TxID: pm.txid, To: pr.destination, Amount: fmtDec(amt, 6), Invoice: inv.id})
		}
		pr.payments = append(pr.payments, pm)
		s.emitPayment(inv, btcpay.EventInvoiceReceivedPayment, pm)
		if pm.status == paySettled {
			s.emitPayment(inv, btcpay.EventInvoicePaymentSettled, pm)
		}
		s.update(inv, now)
		out = append(out, paymentInfo(inv, pm))
	}
	return out, nil
}

// watched refuses payments BTCPay would not record whatever their amount.
// Called with s.mu held.
func (s *Sim) watched(inv *invoice, pr *prompt, now time.Time) error {
	switch pr.method {
	case btcpay.MethodBTCLN:
		if len(pr.payments) > 0 {
			return fmt.Errorf("%w: the BOLT11 invoice was already paid", ErrNotWatched)
		}
		if !now.Before(inv.expiration) || inv.status == stExpired {
			return fmt.Errorf("%w: the BOLT11 invoice has expired", ErrNotWatched)
		}
	case btcpay.MethodUSDTTron:
		if inv.status != stNew && inv.status != stProcessing {
			return fmt.Errorf("%w: the USDT plugin does not watch an invoice that is %s", ErrNotWatched, inv.status)
		}
	}
	return nil
}

func paymentInfo(inv *invoice, pm *payment) PaymentInfo {
	return PaymentInfo{ID: pm.id, InvoiceID: inv.id, Method: pm.method, Amount: fmtDec(pm.value, pm.div), Status: pm.status,
		TxID: pm.txid, Destination: pm.destination, AfterExpiration: pm.afterExpiration}
}

// PayAmount pays amount (in the method's currency) to the invoice's first
// payment method in one payment.
func (s *Sim) PayAmount(invoiceID, amount string) (PaymentInfo, error) {
	out, err := s.Pay(invoiceID, PayParams{Amounts: []string{amount}})
	if err != nil {
		return PaymentInfo{}, err
	}
	return out[0], nil
}

func (s *Sim) findPayment(inv *invoice, paymentID string) (*prompt, *payment) {
	for _, p := range inv.prompts {
		for _, pm := range p.payments {
			if pm.id == paymentID {
				return p, pm
			}
		}
	}
	return nil, nil
}

// ConfirmPayment gives a payment the confirmations its invoice's speed
// policy asks for: it becomes Settled (InvoicePaymentSettled), and the
// invoice with it when every payment is (InvoiceSettled).
func (s *Sim) ConfirmPayment(invoiceID, paymentID string) error {
	return s.onPayment(invoiceID, paymentID, s.confirmLocked)
}

// Confirm confirms every payment of the invoice still Processing.
func (s *Sim) Confirm(invoiceID string) error {
	return s.onInvoice(invoiceID, func(inv *invoice) error {
		for _, p := range inv.prompts {
			for _, pm := range p.payments {
				s.confirmLocked(inv, pm)
			}
		}
		return nil
	})
}

func (s *Sim) confirmLocked(inv *invoice, pm *payment) {
	if pm.status != payProcessing {
		return
	}
	pm.status = paySettled
	if pm.method == btcpay.MethodBTCChain {
		s.wallet.confirm(pm.txid, max(confirmationsFor(inv.checkout.SpeedPolicy), 1))
	}
	s.emitPayment(inv, btcpay.EventInvoicePaymentSettled, pm)
	s.update(inv, s.now())
}

// InvalidatePayment makes a payment unaccounted, as a replaced or
// double-spent transaction is: a Processing invoice falls back to New.
func (s *Sim) InvalidatePayment(invoiceID, paymentID string) error {
	return s.onPayment(invoiceID, paymentID, func(inv *invoice, pm *payment) {
		pm.status = payInvalid
		if pm.method == btcpay.MethodBTCChain {
			s.wallet.drop(pm.txid)
		}
		s.update(inv, s.now())
	})
}

// onPayment runs fn on payment paymentID of invoice invoiceID (see
// onInvoice).
func (s *Sim) onPayment(invoiceID, paymentID string, fn func(inv *invoice, pm *payment)) error {
	return s.onInvoice(invoiceID, func(inv *invoice) error {
		_, pm := s.findPayment(inv, paymentID)
		if pm == nil {
			return fmt.Errorf("%w: %s", ErrUnknownPayment, paymentID)
		}
		fn(inv, pm)
		return nil
	})
}

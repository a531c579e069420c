package btcpaysim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/govalues/decimal"

	"svc/platform/btcpay"
)

type invoiceJSON struct {
	Metadata                          json.RawMessage `json:"metadata"`
	Checkout                          checkoutOpts    `json:"checkout"`
	Receipt                           map[string]bool `json:"receipt"`
	ID                                string          `json:"id"`
	StoreID                           string          `json:"storeId"`
	Amount                            string          `json:"amount"`
	PaidAmount                        string          `json:"paidAmount"`
	Currency                          string          `json:"currency"`
	Type                              string          `json:"type"`
	CheckoutLink                      string          `json:"checkoutLink"`
	CreatedTime                       int64           `json:"createdTime"`
	ExpirationTime                    int64           `json:"expirationTime"`
	MonitoringExpiration              int64           `json:"monitoringExpiration"`
	Status                            string          `json:"status"`
	AdditionalStatus                  string          `json:"additionalStatus"`
	AvailableStatusesForManualMarking []string        `json:"availableStatusesForManualMarking"`
	Archived                          bool            `json:"archived"`
	PaymentMethods                    []payMethodJSON `json:"paymentMethods,omitempty"`
}

type payMethodJSON struct {
	PaymentMethodID   string         `json:"paymentMethodId"`
	Currency          string         `json:"currency"`
	Destination       string         `json:"destination"`
	PaymentLink       string         `json:"paymentLink"`
	Rate              string         `json:"rate"`
	PaymentMethodPaid string         `json:"paymentMethodPaid"`
	TotalPaid         string         `json:"totalPaid"`
	Due               string         `json:"due"`
	Amount            string         `json:"amount"`
	PaymentMethodFee  string         `json:"paymentMethodFee"`
	Payments          []paymentJSON  `json:"payments"`
	Activated         bool           `json:"activated"`
	AdditionalData    map[string]any `json:"additionalData"`
}

type paymentJSON struct {
	ID           string `json:"id"`
	ReceivedDate int64  `json:"receivedDate"`
	Value        string `json:"value"`
	Fee          string `json:"fee"`
	Status       string `json:"status"`
	Destination  string `json:"destination"`
}

func fmtDec(d decimal.Decimal, div int) string { return d.Pad(div).String() }

func paymentView(pm *payment) paymentJSON {
	return paymentJSON{ID: pm.id, ReceivedDate: pm.received.Unix(), Value: fmtDec(pm.value, pm.div), Fee: "0",
		Status: pm.status, Destination: pm.destination}
}

// invoiceView renders InvoiceData. Called with s.mu held.
func (s *Sim) invoiceView(inv *invoice, withMethods bool) invoiceJSON {
	div := currencyDivisibility(inv.currency)
	paidInv := decimal.Zero
	for _, p := range inv.prompts {
		for _, pm := range p.accounted() {
			v, _ := pm.value.Mul(p.rate)
			paidInv, _ = paidInv.Add(v)
		}
	}
	amount, typ := "0", "TopUp"
	if inv.amount != nil {
		amount, typ = inv.amount.String(), "Standard"
	} else if inv.status == stProcessing || inv.status == stSettled {
		// A paid top-up invoice takes the paid amount (zero if paid late).
		amount = paidInv.Round(div).String()
	}
	v := invoiceJSON{
		Metadata: inv.metadata, Checkout: inv.checkout, Receipt: map[string]bool{"enabled": true},
		ID: inv.id, StoreID: s.o.StoreID, Amount: amount, PaidAmount: paidInv.Round(div).Pad(div).String(),
		Currency: inv.currency, Type: typ, CheckoutLink: s.url + "/i/" + inv.id,
		CreatedTime: inv.created.Unix(), ExpirationTime: inv.expiration.Unix(), MonitoringExpiration: inv.monitoring.Unix(),
		Status: inv.status, AdditionalStatus: inv.additional, AvailableStatusesForManualMarking: []string{},
		Archived: inv.archived,
	}
	if canMarkSettled(inv) {
		v.AvailableStatusesForManualMarking = append(v.AvailableStatusesForManualMarking, stSettled)
	}
	if canMarkInvalid(inv) {
		v.AvailableStatusesForManualMarking = append(v.AvailableStatusesForManualMarking, stInvalid)
	}
	if withMethods {
		v.PaymentMethods = s.payMethodsView(inv, true)
	}
	return v
}

func (s *Sim) payMethodsView(inv *invoice, onlyAccounted bool) []payMethodJSON {
	total := inv.paid() // in the first method's currency
	out := []payMethodJSON{}
	for _, p := range inv.prompts {
		mine := decimal.Zero
		payments := []paymentJSON{}
		for _, pm := range p.payments {
			if pm.status != payInvalid {
				mine, _ = mine.Add(pm.value)
			} else if onlyAccounted {
				continue
			}
			payments = append(payments, paymentView(pm))
		}
		totalHere := total
		if ref := inv.prompts[0]; p != ref {
			inInvoice, _ := total.Mul(ref.rate)
			totalHere, _ = inInvoice.Quo(p.rate)
		}
		amount, due := p.due, decimal.Zero
		if inv.amount == nil {
			amount = totalHere
		} else {
			due, _ = p.due.Sub(totalHere)
		}
		extra := map[string]any{}
		if p.method == btcpay.MethodBTCChain {
			rate := s.feeRate.String()
			extra = map[string]any{"keyPath": p.keyPath, "payjoinEnabled": false, "recommendedFeeRate": rate,
				"paymentMethodFeeRate": "0"}
		}
		out = append(out, payMethodJSON{
			PaymentMethodID: p.method, Currency: p.currency, Destination: p.destination, PaymentLink: p.link,
			Rate: p.rate.String(), PaymentMethodPaid: fmtDec(mine, p.divisibility), TotalPaid: fmtDec(totalHere.Round(p.divisibility), p.divisibility),
			Due: fmtDec(due.Round(p.divisibility), p.divisibility), Amount: fmtDec(amount.Round(p.divisibility), p.divisibility),
			PaymentMethodFee: fmtDec(decimal.Zero, p.divisibility), Payments: payments, Activated: true, AdditionalData: extra,
		})
	}
	return out
}

func (s *Sim) lookupInvoice(w http.ResponseWriter, r *http.Request) *invoice {
	inv := s.invoices[r.PathValue("invoiceId")]
	if inv == nil {
		problem(w, http.StatusNotFound, "invoice-not-found", "The invoice was not found")
	}
	return inv
}

func (s *Sim) getInvoice(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inv := s.lookupInvoice(w, r); inv != nil {
		writeJSON(w, http.StatusOK, s.invoiceView(inv, r.URL.Query().Get("includePaymentMethods") == "true"))
	}
}

func (s *Sim) listInvoices(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	skip, _ := strconv.Atoi(q.Get("skip"))
	take, err := strconv.Atoi(q.Get("take"))
	if err != nil || take <= 0 {
		take = 1 << 30
	}
	withMethods := q.Get("includePaymentMethods") == "true"
	archived := q.Get("includeArchived") == "true"
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []invoiceJSON{}
	for i := len(s.invOrder) - 1; i >= 0; i-- { // newest first
		inv := s.invoices[s.invOrder[i]]
		if (inv.archived && !archived) ||
			(len(q["orderId"]) > 0 && !slices.Contains(q["orderId"], inv.orderID())) ||
			(len(q["status"]) > 0 && !slices.Contains(q["status"], inv.status)) {
			continue
		}
		if skip > 0 {
			skip--
			continue
		}
		if len(out) == take {
			break
		}
		out = append(out, s.invoiceView(inv, withMethods))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Sim) invoicePayMethods(w http.ResponseWriter, r *http.Request) {
	onlyAccounted := r.URL.Query().Get("onlyAccountedPayments") != "false"
	s.mu.Lock()
	defer s.mu.Unlock()
	if inv := s.lookupInvoice(w, r); inv != nil {
		writeJSON(w, http.StatusOK, s.payMethodsView(inv, onlyAccounted))
	}
}

func (s *Sim) markInvoice(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Status string `json:"status"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		invalid(w, "status", "Invalid status")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	inv := s.lookupInvoice(w, r)
	if inv == nil {
		return
	}
	var err error
	switch body.Status {
	case stSettled:
		err = s.markLocked(inv, stSettled)
	case stInvalid:
		err = s.markLocked(inv, stInvalid)
	default:
		err = ErrInvalidState
	}
	if err != nil {
		invalid(w, "status", "Status can only be marked to invalid or settled within certain conditions.")
		return
	}
	writeJSON(w, http.StatusOK, s.invoiceView(inv, false))
}

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
	s.mu.Lock()
	defer s.mu.Unlock()
	inv, err := s.invoiceLocked(invoiceID)
	if err != nil {
		return err
	}
	_, pm := s.findPayment(inv, paymentID)
	if pm == nil {
		return fmt.Errorf("%w: %s", ErrUnknownPayment, paymentID)
	}
	s.confirmLocked(inv, pm)
	return nil
}

// Confirm confirms every payment of the invoice still Processing.
func (s *Sim) Confirm(invoiceID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	inv, err := s.invoiceLocked(invoiceID)
	if err != nil {
		return err
	}
	for _, p := range inv.prompts {
		for _, pm := range p.payments {
			s.confirmLocked(inv, pm)
		}
	}
	return nil
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
	s.mu.Lock()
	defer s.mu.Unlock()
	inv, err := s.invoiceLocked(invoiceID)
	if err != nil {
		return err
	}
	_, pm := s.findPayment(inv, paymentID)
	if pm == nil {
		return fmt.Errorf("%w: %s", ErrUnknownPayment, paymentID)
	}
	pm.status = payInvalid
	if pm.method == btcpay.MethodBTCChain {
		s.wallet.drop(pm.txid)
	}
	s.update(inv, s.now())
	return nil
}

// Expire ends a New invoice's payment window now (InvoiceExpired).
// Monitoring continues for the invoice's monitoring minutes from now.
func (s *Sim) Expire(invoiceID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	inv, err := s.invoiceLocked(invoiceID)
	if err != nil {
		return err
	}
	if inv.status != stNew {
		return fmt.Errorf("%w: invoice is %s", ErrInvalidState, inv.status)
	}
	now := s.now()
	inv.expiration = now
	inv.monitoring = now.Add(time.Duration(inv.checkout.MonitoringMinutes) * time.Minute)
	s.expireLocked(inv)
	return nil
}

// MarkSettled marks the invoice settled by hand, as an operator can in
// BTCPay, whether or not anything was paid (InvoiceSettled with
// manuallyMarked).
func (s *Sim) MarkSettled(invoiceID string) error { return s.mark(invoiceID, stSettled) }

// MarkInvalid marks the invoice invalid by hand.
func (s *Sim) MarkInvalid(invoiceID string) error { return s.mark(invoiceID, stInvalid) }

func (s *Sim) mark(invoiceID, to string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	inv, err := s.invoiceLocked(invoiceID)
	if err != nil {
		return err
	}
	return s.markLocked(inv, to)
}

// Invoice returns a snapshot of an invoice.
func (s *Sim) Invoice(id string) (InvoiceInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inv := s.invoices[id]
	if inv == nil {
		return InvoiceInfo{}, false
	}
	s.update(inv, s.now())
	return s.info(inv), true
}

// InvoiceByOrderID returns the newest invoice whose metadata.orderId is
// orderID.
func (s *Sim) InvoiceByOrderID(orderID string) (InvoiceInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.invOrder) - 1; i >= 0; i-- {
		if inv := s.invoices[s.invOrder[i]]; inv.orderID() == orderID {
			s.update(inv, s.now())
			return s.info(inv), true
		}
	}
	return InvoiceInfo{}, false
}

// InvoicesByOrderID returns every invoice whose metadata.orderId is
// orderID, oldest first: a creation retried while the processor was slow
// can leave more than one.
func (s *Sim) InvoicesByOrderID(orderID string) []InvoiceInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []InvoiceInfo
	for _, id := range s.invOrder {
		if inv := s.invoices[id]; inv.orderID() == orderID {
			s.update(inv, s.now())
			out = append(out, s.info(inv))
		}
	}
	return out
}

// Invoices returns snapshots of every invoice, oldest first.
func (s *Sim) Invoices() []InvoiceInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]InvoiceInfo, 0, len(s.invOrder))
	for _, id := range s.invOrder {
		out = append(out, s.info(s.invoices[id]))
	}
	return out
}

func (s *Sim) info(inv *invoice) InvoiceInfo {
	pr := inv.prompts[0]
	amount := "0"
	if inv.amount != nil {
		amount = inv.amount.String()
	}
	left, _ := pr.due.Sub(inv.paid())
	if inv.amount == nil {
		left = decimal.Zero
	}
	out := InvoiceInfo{ID: inv.id, OrderID: inv.orderID(), Status: inv.status, AdditionalStatus: inv.additional,
		Currency: inv.currency, Amount: amount, Method: pr.method, Destination: pr.destination,
		Due: fmtDec(left, pr.divisibility), Expiration: inv.expiration, MonitoringExpiration: inv.monitoring}
	for _, p := range inv.prompts {
		for _, pm := range p.payments {
			out.Payments = append(out.Payments, paymentInfo(inv, pm))
		}
	}
	return out
}

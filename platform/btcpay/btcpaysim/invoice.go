package btcpaysim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/govalues/decimal"

	"svc/platform/btcpay"
)

// Errors of the control methods.
var (
	ErrUnknownInvoice = errors.New("btcpaysim: no such invoice")
	ErrUnknownPayment = errors.New("btcpaysim: no such payment")
	ErrInvalidState   = errors.New("btcpaysim: not allowed in the invoice's current state")
	// ErrNotWatched means BTCPay would not see the payment: the invoice's
	// monitoring window is over, a USDT-TRON invoice is no longer open (the
	// plugin stops watching at expiry), or a BOLT11 has expired or was
	// already paid. An on-chain payment past monitoring still reaches the
	// wallet, as a receive that matches no invoice.
	ErrNotWatched = errors.New("btcpaysim: BTCPay would not record this payment")
)

// Invoice and payment statuses as BTCPay writes them.
const (
	stNew        = "New"
	stProcessing = "Processing"
	stExpired    = "Expired"
	stInvalid    = "Invalid"
	stSettled    = "Settled"

	addNone        = "None"
	addPaidLate    = "PaidLate"
	addPaidPartial = "PaidPartial"
	addMarked      = "Marked"
	addPaidOver    = "PaidOver"

	payInvalid    = "Invalid"
	payProcessing = "Processing"
	paySettled    = "Settled"
)

type invoice struct {
	id         string
	amount     *decimal.Decimal // nil: a top-up invoice
	currency   string
	metadata   json.RawMessage
	order      string // metadata.orderId, read once (the metadata never changes)
	checkout   checkoutOpts
	created    time.Time
	expiration time.Time
	monitoring time.Time
	status     string
	additional string
	archived   bool
	prompts    []*prompt
}

type checkoutOpts struct {
	SpeedPolicy           string   `json:"speedPolicy"`
	PaymentMethods        []string `json:"paymentMethods"`
	LazyPaymentMethods    bool     `json:"lazyPaymentMethods"`
	ExpirationMinutes     int      `json:"expirationMinutes"`
	MonitoringMinutes     int      `json:"monitoringMinutes"`
	PaymentTolerance      float64  `json:"paymentTolerance"`
	RedirectAutomatically bool     `json:"redirectAutomatically"`
}

// prompt is one payment method of an invoice.
type prompt struct {
	method       string
	currency     string
	divisibility int
	rate         decimal.Decimal // one unit of the method's currency in the invoice's currency
	due          decimal.Decimal // the invoice amount in the method's currency
	destination  string
	link         string
	keyPath      string
	lnHash       string
	lnPreimage   string
	payments     []*payment
}

type payment struct {
	id              string
	method          string
	div             int // decimals of the method's currency
	value           decimal.Decimal
	status          string
	received        time.Time
	destination     string
	afterExpiration bool
	txid            string
}

// PayParams describes payments to an invoice.
type PayParams struct {
	// Method is the payment method paid (default: the invoice's first).
	Method string
	// Amounts are the payments, in the method's currency ("0.001" BTC);
	// empty pays what is due in one payment.
	Amounts []string
	// Settled records the payments as already confirmed.
	Settled bool
}

// PaymentInfo describes a recorded payment.
type PaymentInfo struct {
	ID              string
	InvoiceID       string
	Method          string
	Amount          string
	Status          string
	TxID            string
	Destination     string
	AfterExpiration bool
}

// InvoiceInfo is a snapshot of an invoice for tests.
type InvoiceInfo struct {
	ID, OrderID, Status, AdditionalStatus string
	Currency, Amount                      string
	Method, Destination, Due              string // of the first payment method
	Expiration, MonitoringExpiration      time.Time
	Payments                              []PaymentInfo
}

func (p *prompt) accounted() []*payment {
	var out []*payment
	for _, pm := range p.payments {
		if pm.status != payInvalid {
			out = append(out, pm)
		}
	}
	return out
}

// paid sums the accounted payments of every method in the first method's
// currency.
func (inv *invoice) paid() decimal.Decimal {
	ref := inv.prompts[0]
	total := decimal.Zero
	for _, p := range inv.prompts {
		for _, pm := range p.accounted() {
			v := pm.value
			if p != ref {
				inInvoice, _ := pm.value.Mul(p.rate)
				v, _ = inInvoice.Quo(ref.rate)
			}
			total, _ = total.Add(v)
		}
	}
	return total
}

func (inv *invoice) hasPayments() bool {
	for _, p := range inv.prompts {
		if len(p.accounted()) > 0 {
			return true
		}
	}
	return false
}

func (inv *invoice) allSettled() bool {
	for _, p := range inv.prompts {
		for _, pm := range p.accounted() {
			if pm.status != paySettled {
				return false
			}
		}
	}
	return true
}

// paidState reports whether the invoice is paid in full and overpaid.
func (inv *invoice) paidState() (full, over bool) {
	paid := inv.paid()
	if inv.amount == nil {
		return paid.IsPos(), false
	}
	c := paid.Cmp(inv.prompts[0].due)
	return c >= 0, c > 0
}

func (inv *invoice) orderID() string { return inv.order }

// metadataOrderID is the orderId of an invoice's metadata, if any.
func metadataOrderID(meta json.RawMessage) string {
	var m map[string]any
	_ = json.Unmarshal(meta, &m)
	s, _ := m["orderId"].(string)
	return s
}

func currencyDivisibility(cur string) int {
	switch strings.ToUpper(cur) {
	case "BTC":
		return 8
	case "SATS":
		return 0
	case "USDT":
		return 6
	}
	return 2
}

// rate returns how much one unit of from is worth in to.
func (s *Sim) rate(from, to string) (decimal.Decimal, error) {
	f, t := strings.ToUpper(from), strings.ToUpper(to)
	switch {
	case f == t:
		return decimal.One, nil
	case f == "BTC" && t == "SATS":
		return decimal.MustNew(100_000_000, 0), nil
	case f == "SATS" && t == "BTC":
		return decimal.MustNew(1, 8), nil
	}
	if r, ok := s.rates[f+"_"+t]; ok {
		return r, nil
	}
	if r, ok := s.rates[t+"_"+f]; ok {
		return decimal.One.Quo(r)
	}
	fu, ok1 := s.rates[f+"_USD"]
	tu, ok2 := s.rates[t+"_USD"]
	if ok1 && ok2 {
		return fu.Quo(tu)
	}
	return decimal.Decimal{}, fmt.Errorf("no rate for %s_%s", f, t)
}

type createInvoiceBody struct {
	Amount   json.RawMessage `json:"amount"`
	Currency *string         `json:"currency"`
	Metadata json.RawMessage `json:"metadata"`
	Checkout *struct {
		SpeedPolicy       *string         `json:"speedPolicy"`
		PaymentMethods    []string        `json:"paymentMethods"`
		ExpirationMinutes json.RawMessage `json:"expirationMinutes"`
		MonitoringMinutes json.RawMessage `json:"monitoringMinutes"`
	} `json:"checkout"`
}

// minutes reads a TimeSpan in minutes: a JSON integer (BTCPay refuses a
// fractional number).
func minutes(raw json.RawMessage, def int) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return def, nil
	}
	n, err := strconv.Atoi(string(raw))
	if err != nil || n < 1 {
		return 0, errors.New("must be a positive whole number of minutes")
	}
	return n, nil
}

func (s *Sim) createInvoice(w http.ResponseWriter, r *http.Request) {
	var body createInvoiceBody
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		invalid(w, "", "Invalid JSON: "+err.Error())
		return
	}
	var amount *decimal.Decimal
	if raw := bytes.TrimSpace(body.Amount); len(raw) > 0 && string(raw) != "null" {
		str := strings.Trim(string(raw), `"`)
		d, err := decimal.Parse(str)
		if err != nil {
			invalid(w, "amount", "Invalid amount")
			return
		}
		if d.IsNeg() {
			invalid(w, "amount", "The amount should be 0 or more.")
			return
		}
		if d.IsPos() {
			amount = &d
		}
	}
	currency := "BTC" // the store's default currency
	if body.Currency != nil && *body.Currency != "" {
		currency = *body.Currency
	}
	meta := json.RawMessage(`{}`)
	if raw := bytes.TrimSpace(body.Metadata); len(raw) > 0 && string(raw) != "null" {
		if raw[0] != '{' {
			invalid(w, "metadata", "Metadata should be a JSON object")
			return
		}
		meta = append(json.RawMessage(nil), raw...)
	}
	co := checkoutOpts{SpeedPolicy: btcpay.SpeedMedium, ExpirationMinutes: 15, MonitoringMinutes: 1440}
	var methods []string
	if body.Checkout != nil {
		if p := body.Checkout.SpeedPolicy; p != nil && *p != "" {
			if !slices.Contains([]string{btcpay.SpeedHigh, btcpay.SpeedMedium, btcpay.SpeedLowMedium, btcpay.SpeedLow}, *p) {
				invalid(w, "checkout.speedPolicy", "Invalid speed policy")
				return
			}
			co.SpeedPolicy = *p
		}
		var err error
		if co.ExpirationMinutes, err = minutes(body.Checkout.ExpirationMinutes, 15); err != nil {
			invalid(w, "checkout.expirationMinutes", err.Error())
			return
		}
		if co.MonitoringMinutes, err = minutes(body.Checkout.MonitoringMinutes, 1440); err != nil {
			invalid(w, "checkout.monitoringMinutes", err.Error())
			return
		}
		for _, m := range body.Checkout.PaymentMethods {
			id := btcpay.NormalizeMethodID(m)
			if !slices.Contains([]string{btcpay.MethodBTCChain, btcpay.MethodBTCLN, btcpay.MethodBTCLNURL, btcpay.MethodUSDTTron}, id) {
				invalid(w, "checkout.paymentMethods", "Invalid PaymentMethodId")
				return
			}
			methods = append(methods, id)
		}
	}

	s.mu.Lock()
	if len(methods) == 0 {
		methods = append(methods, s.methods...)
	}
	now := s.now()
	inv := &invoice{id: newID(16), amount: amount, currency: currency, metadata: meta, order: metadataOrderID(meta), created: now,
		expiration: now.Add(time.Duration(co.ExpirationMinutes) * time.Minute), status: stNew, additional: addNone}
	inv.monitoring = inv.expiration.Add(time.Duration(co.MonitoringMinutes) * time.Minute)
	var reasons []string
	for _, m := range methods {
		if !s.hasMethod(m) {
			continue // BTCPay offers only what the store has enabled
		}
		p, err := s.newPrompt(inv, m)
		if err != nil {
			reasons = append(reasons, err.Error())
			continue
		}
		inv.prompts = append(inv.prompts, p)
		co.PaymentMethods = append(co.PaymentMethods, m)
	}
	if len(inv.prompts) == 0 {
		s.mu.Unlock()
		msg := "No payment method available for this store"
		if len(reasons) > 0 {
			msg += ": " + strings.Join(reasons, "; ")
		}
		problem(w, http.StatusBadRequest, "invoice-creation-failed", msg)
		return
	}
	inv.checkout = co
	s.invoices[inv.id] = inv
	s.invOrder = append(s.invOrder, inv.id)
	view := s.invoiceView(inv, false)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, view)
}

// OfferMethod adds payment method m to an invoice's checkout, as a store
// whose invoices offer every enabled method would: the payer may then pay
// through a method the invoice was not created for.
func (s *Sim) OfferMethod(invoiceID, m string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	inv, err := s.invoiceLocked(invoiceID)
	if err != nil {
		return err
	}
	m = btcpay.NormalizeMethodID(m)
	for _, p := range inv.prompts {
		if p.method == m {
			return nil
		}
	}
	p, err := s.newPrompt(inv, m)
	if err != nil {
		return err
	}
	inv.prompts = append(inv.prompts, p)
	inv.checkout.PaymentMethods = append(inv.checkout.PaymentMethods, m)
	return nil
}

// newPrompt activates payment method m for inv: an address, a BOLT11 or a
// pool address. Called with s.mu held.
func (s *Sim) newPrompt(inv *invoice, m string) (*prompt, error) {
	p := &prompt{method: m, currency: "BTC", divisibility: 8}
	switch m {
	case btcpay.MethodBTCLN:
		p.divisibility = 11
	case btcpay.MethodUSDTTron:
		p.currency, p.divisibility = "USDt", 6
	case btcpay.MethodBTCLNURL:
		return nil, errors.New("LNURL is not simulated")
	}
	rate, err := s.rate(strings.ToUpper(p.currency), inv.currency)
	if err != nil {
		return nil, err
	}
	p.rate = rate
	p.due = decimal.Zero
	if inv.amount != nil {
		q, err := inv.amount.Quo(rate)
		if err != nil {
			return nil, err
		}
		p.due = q.Ceil(p.divisibility).Pad(p.divisibility)
	}
	switch m {
	case btcpay.MethodBTCChain:
		p.destination = newAddress(s.net)
		p.keyPath = fmt.Sprintf("0/%d", len(s.invOrder))
		p.link = "bitcoin:" + p.destination
		if inv.amount != nil {
			p.link += "?amount=" + p.due.Trim(0).String()
		}
	case btcpay.MethodBTCLN:
		var msat int64
		if inv.amount != nil {
			var err error
			if msat, err = units(p.due, 11); err != nil {
				return nil, fmt.Errorf("lightning amount: %w", err)
			}
		}
		bolt, hash, pre, err := s.ln.invoice(msat, inv.created, inv.expiration, "btcpaysim invoice "+inv.id)
		if err != nil {
			return nil, err
		}
		p.destination, p.lnHash, p.lnPreimage = bolt, hash, pre
		p.link = "lightning:" + bolt
	case btcpay.MethodUSDTTron:
		addr := s.freePoolAddress()
		if addr == "" {
			//lint:ignore ST1005 the USDT plugin's own words, as the service sees them
			return nil, errors.New("All your TRON addresses are currently waiting payment")
		}
		p.destination = addr
		p.link = "tron:" + addr
		if inv.amount != nil {
			p.link += "?amount=" + p.due.Trim(0).String()
		}
	}
	return p, nil
}

// freePoolAddress returns the first pool address no New or Processing
// invoice holds, as the plugin does. Called with s.mu held.
func (s *Sim) freePoolAddress() string {
	busy := map[string]bool{}
	for _, inv := range s.invoices {
		if inv.status != stNew && inv.status != stProcessing {
			continue
		}
		for _, p := range inv.prompts {
			if p.method == btcpay.MethodUSDTTron {
				busy[p.destination] = true
			}
		}
	}
	for _, a := range s.o.TronPool {
		if !busy[a] {
			return a
		}
	}
	return ""
}

// units converts d to smallest units of scale, exactly.
func units(d decimal.Decimal, scale int) (int64, error) {
	a, err := btcpay.ParseAmount(d.String())
	if err != nil {
		return 0, err
	}
	return a.Units(scale)
}

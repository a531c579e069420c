package btcpaysim

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"

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
	return lookup(w, r, s.invoices, "invoiceId", "invoice-not-found", "The invoice was not found")
}

// lookup returns the entry of m that the request's path value param
// names, or nil after answering 404 with code and message.
func lookup[T any](w http.ResponseWriter, r *http.Request, m map[string]*T, param, code, message string) *T {
	x := m[r.PathValue(param)]
	if x == nil {
		problem(w, http.StatusNotFound, code, message)
	}
	return x
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

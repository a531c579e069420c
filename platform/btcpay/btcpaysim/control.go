package btcpaysim

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/pprof"
	"time"
)

// controlHandler serves the control API under /_sim/ (no key: it is for
// local runs and tests only). Every route answers JSON; errors are
// {"error": "..."} with 404 for an unknown id, 409 for a state that does
// not allow the action, and 400 otherwise.
func (s *Sim) controlHandler() http.Handler {
	m := http.NewServeMux()
	// The simulator's own CPU and heap profiles, for benchmarks that run
	// it beside the service.
	m.HandleFunc("GET /_sim/debug/pprof/profile", pprof.Profile)
	m.Handle("GET /_sim/debug/pprof/heap", pprof.Handler("heap"))
	action(m, "GET /_sim/{$}", func(*http.Request) (any, error) {
		s.mu.Lock()
		hook := s.hooks.url
		s.mu.Unlock()
		return map[string]any{"url": s.url, "apiKey": s.o.APIKey, "storeId": s.o.StoreID,
			"network": s.o.Network, "paymentMethods": s.PaymentMethods(), "tronPool": s.o.TronPool, "webhookUrl": hook,
			"pendingWebhooks": s.PendingWebhooks(), "webhookFailures": s.WebhookFailures()}, nil
	})
	action(m, "GET /_sim/invoices", func(*http.Request) (any, error) { return s.Invoices(), nil })
	action(m, "GET /_sim/invoices/{id}", func(r *http.Request) (any, error) {
		if inv, ok := s.Invoice(r.PathValue("id")); ok {
			return inv, nil
		}
		return nil, ErrUnknownInvoice
	})
	actionWith(m, "POST /_sim/invoices/{id}/pay", func(r *http.Request, b struct {
		Method  string   `json:"method"`
		Amount  string   `json:"amount"`
		Amounts []string `json:"amounts"`
		Settled bool     `json:"settled"`
	}) (any, error) {
		if b.Amount != "" {
			b.Amounts = append(b.Amounts, b.Amount)
		}
		return s.Pay(r.PathValue("id"), PayParams{Method: b.Method, Amounts: b.Amounts, Settled: b.Settled})
	})
	actionWith(m, "POST /_sim/invoices/{id}/confirm", func(r *http.Request, b struct {
		PaymentID string `json:"paymentId"`
	}) (any, error) {
		id := r.PathValue("id")
		if b.PaymentID != "" {
			return s.invoiceAfter(id, s.ConfirmPayment(id, b.PaymentID))
		}
		return s.invoiceAfter(id, s.Confirm(id))
	})
	action(m, "POST /_sim/invoices/{id}/payments/{paymentId}/invalidate", func(r *http.Request) (any, error) {
		id := r.PathValue("id")
		return s.invoiceAfter(id, s.InvalidatePayment(id, r.PathValue("paymentId")))
	})
	for name, fn := range map[string]func(string) error{"expire": s.Expire, "mark-settled": s.MarkSettled, "mark-invalid": s.MarkInvalid} {
		action(m, "POST /_sim/invoices/{id}/"+name, func(r *http.Request) (any, error) {
			id := r.PathValue("id")
			return s.invoiceAfter(id, fn(id))
		})
	}
	action(m, "GET /_sim/payouts", func(*http.Request) (any, error) { return s.Payouts(), nil })
	payoutActions := map[string]func(id, txid string) error{
		"approve":   func(id, _ string) error { return s.ApprovePayout(id) },
		"broadcast": func(id, txid string) error { _, err := s.BroadcastPayout(id, txid); return err },
		"complete":  func(id, txid string) error { _, err := s.CompletePayout(id, txid); return err },
		"fail":      func(id, _ string) error { return s.FailPayout(id) },
		"bounce":    func(id, _ string) error { return s.BouncePayout(id) },
		"stall":     func(id, _ string) error { return s.StallPayout(id) },
		"unmark":    func(id, _ string) error { return s.UnmarkPayout(id) },
		"cancel":    func(id, _ string) error { return s.CancelPayout(id) },
		"confirm-cancelled": func(id, txid string) error {
			_, err := s.ConfirmCancelledPayout(id, txid)
			return err
		},
	}
	for name, fn := range payoutActions {
		actionWith(m, "POST /_sim/payouts/{id}/"+name, func(r *http.Request, b struct {
			TxID string `json:"txid"`
		}) (any, error) {
			id := r.PathValue("id")
			if err := fn(id, b.TxID); err != nil {
				return nil, err
			}
			po, _ := s.Payout(id)
			return po, nil
		})
	}
	actionWith(m, "POST /_sim/wallet", func(_ *http.Request, b struct {
		Confirmed   string `json:"confirmed"`
		Unconfirmed string `json:"unconfirmed"`
	}) (any, error) {
		if b.Unconfirmed == "" {
			b.Unconfirmed = "0"
		}
		if err := s.SetWalletBalance(b.Confirmed, b.Unconfirmed); err != nil {
			return nil, err
		}
		c, u := s.WalletBalance()
		return map[string]string{"confirmed": c, "unconfirmed": u}, nil
	})
	actionWith(m, "POST /_sim/wallet/receive", func(_ *http.Request, b struct {
		Amount        string `json:"amount"`
		Confirmations int64  `json:"confirmations"`
	}) (any, error) {
		txid, addr, err := s.ReceiveUnmatched(b.Amount, b.Confirmations)
		return map[string]string{"txid": txid, "address": addr}, err
	})
	actionWith(m, "POST /_sim/wallet/transactions/{txid}/confirm", func(r *http.Request, b struct {
		Confirmations int64 `json:"confirmations"`
	}) (any, error) {
		return map[string]string{"txid": r.PathValue("txid")}, s.ConfirmTransaction(r.PathValue("txid"), max(b.Confirmations, 1))
	})
	for name, fn := range map[string]func(string) error{"replace": s.ReplaceTransaction, "unlink": s.UnlinkTransaction} {
		action(m, "POST /_sim/wallet/transactions/{txid}/"+name, func(r *http.Request) (any, error) {
			return map[string]string{"txid": r.PathValue("txid")}, fn(r.PathValue("txid"))
		})
	}
	actionWith(m, "POST /_sim/lightning", func(_ *http.Request, b struct {
		LocalMsat int64 `json:"localMsat"`
	}) (any, error) {
		s.SetLightningBalance(b.LocalMsat)
		return b, nil
	})
	actionWith(m, "POST /_sim/feerate", func(_ *http.Request, b struct {
		FeeRate json.Number `json:"feeRate"`
	}) (any, error) {
		return b, s.SetFeeRate(b.FeeRate.String())
	})
	actionWith(m, "POST /_sim/methods", func(_ *http.Request, b struct {
		PaymentMethods []string `json:"paymentMethods"`
	}) (any, error) {
		s.SetPaymentMethods(b.PaymentMethods...)
		return map[string]any{"paymentMethods": s.PaymentMethods()}, nil
	})
	actionWith(m, "POST /_sim/down", func(_ *http.Request, b struct {
		Mode  DownMode `json:"mode"`
		Count int      `json:"count"`
	}) (any, error) {
		switch b.Mode {
		case DownError, DownDrop, DownHang, DownDropAfter:
		default:
			return nil, errors.New("mode must be error, drop, hang or drop-after")
		}
		if b.Count > 0 {
			s.FailNext(b.Count, b.Mode)
		} else {
			s.GoDown(b.Mode)
		}
		return b, nil
	})
	actionWith(m, "POST /_sim/slow", func(_ *http.Request, b struct {
		Delay string `json:"delay"`
	}) (any, error) {
		d, err := time.ParseDuration(b.Delay)
		if err != nil || d <= 0 {
			return nil, errors.New("delay must be a positive duration such as \"2s\"")
		}
		s.GoSlow(d)
		return b, nil
	})
	action(m, "POST /_sim/up", func(*http.Request) (any, error) {
		s.Up()
		return map[string]string{"mode": ""}, nil
	})
	action(m, "POST /_sim/tick", func(*http.Request) (any, error) {
		s.Tick()
		return map[string]string{"now": s.now().Format(time.RFC3339)}, nil
	})
	action(m, "GET /_sim/webhooks", func(*http.Request) (any, error) {
		type view struct {
			Delivery
			Body string
		}
		out := []view{}
		for _, d := range s.Deliveries() {
			out = append(out, view{Delivery: d, Body: string(d.Body)})
		}
		return out, nil
	})
	actionWith(m, "POST /_sim/webhooks", func(_ *http.Request, b struct {
		URL    string `json:"url"`
		Secret string `json:"secret"`
	}) (any, error) {
		s.SetWebhook(b.URL, b.Secret)
		return map[string]string{"url": b.URL}, nil
	})
	action(m, "POST /_sim/webhooks/hold", func(*http.Request) (any, error) {
		s.HoldWebhooks()
		return map[string]bool{"held": true}, nil
	})
	actionWith(m, "POST /_sim/webhooks/release", func(_ *http.Request, b struct {
		Reverse bool `json:"reverse"`
	}) (any, error) {
		s.ReleaseWebhooks(b.Reverse)
		return map[string]bool{"held": false}, nil
	})
	actionWith(m, "POST /_sim/webhooks/duplicate", func(_ *http.Request, b struct {
		On bool `json:"on"`
	}) (any, error) {
		s.DuplicateWebhooks(b.On)
		return b, nil
	})
	actionWith(m, "POST /_sim/webhooks/redeliver", func(_ *http.Request, b struct {
		DeliveryID string `json:"deliveryId"`
	}) (any, error) {
		id, err := s.Redeliver(b.DeliveryID)
		return map[string]string{"deliveryId": id}, err
	})
	m.HandleFunc("/_sim/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such control route; see docs/simulator.md"})
	})
	return m
}

// decode reads an optional JSON body.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if r.ContentLength == 0 {
		return true
	}
	if err := json.NewDecoder(r.Body).Decode(v); err != nil && !errors.Is(err, io.EOF) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body: " + err.Error()})
		return false
	}
	return true
}

// action serves a control route whose answer is what do returns: its
// value as JSON, or its error (ctlError).
func action(m *http.ServeMux, pattern string, do func(r *http.Request) (any, error)) {
	m.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		v, err := do(r)
		reply(w, v, err)
	})
}

// actionWith is action for a route that reads a JSON body into a B (an
// optional one: none is B's zero value).
func actionWith[B any](m *http.ServeMux, pattern string, do func(r *http.Request, b B) (any, error)) {
	m.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		var b B
		if !decode(w, r, &b) {
			return
		}
		v, err := do(r, b)
		reply(w, v, err)
	})
}

func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		ctlError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// invoiceAfter is the answer to an action on invoice id: the invoice as
// it is now, or the action's error.
func (s *Sim) invoiceAfter(id string, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	inv, _ := s.Invoice(id)
	return inv, nil
}

func ctlError(w http.ResponseWriter, err error) {
	status := http.StatusBadRequest
	switch {
	case errors.Is(err, ErrUnknownInvoice), errors.Is(err, ErrUnknownPayment), errors.Is(err, ErrUnknownPayout):
		status = http.StatusNotFound
	case errors.Is(err, ErrInvalidState), errors.Is(err, ErrNotWatched):
		status = http.StatusConflict
	}
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

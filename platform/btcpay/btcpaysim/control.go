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
	m.HandleFunc("GET /_sim/{$}", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		hook := s.hooks.url
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"url": s.url, "apiKey": s.o.APIKey, "storeId": s.o.StoreID,
			"network": s.o.Network, "paymentMethods": s.PaymentMethods(), "tronPool": s.o.TronPool, "webhookUrl": hook,
			"pendingWebhooks": s.PendingWebhooks(), "webhookFailures": s.WebhookFailures()})
	})
	m.HandleFunc("GET /_sim/invoices", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.Invoices())
	})
	m.HandleFunc("GET /_sim/invoices/{id}", func(w http.ResponseWriter, r *http.Request) {
		if inv, ok := s.Invoice(r.PathValue("id")); ok {
			writeJSON(w, http.StatusOK, inv)
			return
		}
		ctlError(w, ErrUnknownInvoice)
	})
	m.HandleFunc("POST /_sim/invoices/{id}/pay", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Method  string   `json:"method"`
			Amount  string   `json:"amount"`
			Amounts []string `json:"amounts"`
			Settled bool     `json:"settled"`
		}
		if !decode(w, r, &b) {
			return
		}
		if b.Amount != "" {
			b.Amounts = append(b.Amounts, b.Amount)
		}
		out, err := s.Pay(r.PathValue("id"), PayParams{Method: b.Method, Amounts: b.Amounts, Settled: b.Settled})
		reply(w, out, err)
	})
	m.HandleFunc("POST /_sim/invoices/{id}/confirm", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			PaymentID string `json:"paymentId"`
		}
		if !decode(w, r, &b) {
			return
		}
		id := r.PathValue("id")
		if b.PaymentID != "" {
			replyInvoice(w, s, id, s.ConfirmPayment(id, b.PaymentID))
			return
		}
		replyInvoice(w, s, id, s.Confirm(id))
	})
	m.HandleFunc("POST /_sim/invoices/{id}/payments/{paymentId}/invalidate", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		replyInvoice(w, s, id, s.InvalidatePayment(id, r.PathValue("paymentId")))
	})
	for action, fn := range map[string]func(string) error{"expire": s.Expire, "mark-settled": s.MarkSettled, "mark-invalid": s.MarkInvalid} {
		m.HandleFunc("POST /_sim/invoices/{id}/"+action, func(w http.ResponseWriter, r *http.Request) {
			id := r.PathValue("id")
			replyInvoice(w, s, id, fn(id))
		})
	}
	m.HandleFunc("GET /_sim/payouts", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.Payouts())
	})
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
	for action, fn := range payoutActions {
		m.HandleFunc("POST /_sim/payouts/{id}/"+action, func(w http.ResponseWriter, r *http.Request) {
			var b struct {
				TxID string `json:"txid"`
			}
			if !decode(w, r, &b) {
				return
			}
			id := r.PathValue("id")
			if err := fn(id, b.TxID); err != nil {
				ctlError(w, err)
				return
			}
			po, _ := s.Payout(id)
			writeJSON(w, http.StatusOK, po)
		})
	}
	m.HandleFunc("POST /_sim/wallet", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Confirmed   string `json:"confirmed"`
			Unconfirmed string `json:"unconfirmed"`
		}
		if !decode(w, r, &b) {
			return
		}
		if b.Unconfirmed == "" {
			b.Unconfirmed = "0"
		}
		if err := s.SetWalletBalance(b.Confirmed, b.Unconfirmed); err != nil {
			ctlError(w, err)
			return
		}
		c, u := s.WalletBalance()
		writeJSON(w, http.StatusOK, map[string]string{"confirmed": c, "unconfirmed": u})
	})
	m.HandleFunc("POST /_sim/wallet/receive", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Amount        string `json:"amount"`
			Confirmations int64  `json:"confirmations"`
		}
		if !decode(w, r, &b) {
			return
		}
		txid, addr, err := s.ReceiveUnmatched(b.Amount, b.Confirmations)
		reply(w, map[string]string{"txid": txid, "address": addr}, err)
	})
	m.HandleFunc("POST /_sim/wallet/transactions/{txid}/confirm", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Confirmations int64 `json:"confirmations"`
		}
		if !decode(w, r, &b) {
			return
		}
		reply(w, map[string]string{"txid": r.PathValue("txid")}, s.ConfirmTransaction(r.PathValue("txid"), max(b.Confirmations, 1)))
	})
	m.HandleFunc("POST /_sim/wallet/transactions/{txid}/replace", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"txid": r.PathValue("txid")}, s.ReplaceTransaction(r.PathValue("txid")))
	})
	m.HandleFunc("POST /_sim/wallet/transactions/{txid}/unlink", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"txid": r.PathValue("txid")}, s.UnlinkTransaction(r.PathValue("txid")))
	})
	m.HandleFunc("POST /_sim/lightning", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			LocalMsat int64 `json:"localMsat"`
		}
		if !decode(w, r, &b) {
			return
		}
		s.SetLightningBalance(b.LocalMsat)
		writeJSON(w, http.StatusOK, b)
	})
	m.HandleFunc("POST /_sim/feerate", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			FeeRate json.Number `json:"feeRate"`
		}
		if !decode(w, r, &b) {
			return
		}
		reply(w, b, s.SetFeeRate(b.FeeRate.String()))
	})
	m.HandleFunc("POST /_sim/methods", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			PaymentMethods []string `json:"paymentMethods"`
		}
		if !decode(w, r, &b) {
			return
		}
		s.SetPaymentMethods(b.PaymentMethods...)
		writeJSON(w, http.StatusOK, map[string]any{"paymentMethods": s.PaymentMethods()})
	})
	m.HandleFunc("POST /_sim/down", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Mode  DownMode `json:"mode"`
			Count int      `json:"count"`
		}
		if !decode(w, r, &b) {
			return
		}
		switch b.Mode {
		case DownError, DownDrop, DownHang, DownDropAfter:
		default:
			ctlError(w, errors.New("mode must be error, drop, hang or drop-after"))
			return
		}
		if b.Count > 0 {
			s.FailNext(b.Count, b.Mode)
		} else {
			s.GoDown(b.Mode)
		}
		writeJSON(w, http.StatusOK, b)
	})
	m.HandleFunc("POST /_sim/slow", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Delay string `json:"delay"`
		}
		if !decode(w, r, &b) {
			return
		}
		d, err := time.ParseDuration(b.Delay)
		if err != nil || d <= 0 {
			ctlError(w, errors.New("delay must be a positive duration such as \"2s\""))
			return
		}
		s.GoSlow(d)
		writeJSON(w, http.StatusOK, b)
	})
	m.HandleFunc("POST /_sim/up", func(w http.ResponseWriter, _ *http.Request) {
		s.Up()
		writeJSON(w, http.StatusOK, map[string]string{"mode": ""})
	})
	m.HandleFunc("POST /_sim/tick", func(w http.ResponseWriter, _ *http.Request) {
		s.Tick()
		writeJSON(w, http.StatusOK, map[string]string{"now": s.now().Format(time.RFC3339)})
	})
	m.HandleFunc("GET /_sim/webhooks", func(w http.ResponseWriter, _ *http.Request) {
		type view struct {
			Delivery
			Body string
		}
		out := []view{}
		for _, d := range s.Deliveries() {
			out = append(out, view{Delivery: d, Body: string(d.Body)})
		}
		writeJSON(w, http.StatusOK, out)
	})
	m.HandleFunc("POST /_sim/webhooks", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			URL    string `json:"url"`
			Secret string `json:"secret"`
		}
		if !decode(w, r, &b) {
			return
		}
		s.SetWebhook(b.URL, b.Secret)
		writeJSON(w, http.StatusOK, map[string]string{"url": b.URL})
	})
	m.HandleFunc("POST /_sim/webhooks/hold", func(w http.ResponseWriter, _ *http.Request) {
		s.HoldWebhooks()
		writeJSON(w, http.StatusOK, map[string]bool{"held": true})
	})
	m.HandleFunc("POST /_sim/webhooks/release", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Reverse bool `json:"reverse"`
		}
		if !decode(w, r, &b) {
			return
		}
		s.ReleaseWebhooks(b.Reverse)
		writeJSON(w, http.StatusOK, map[string]bool{"held": false})
	})
	m.HandleFunc("POST /_sim/webhooks/duplicate", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			On bool `json:"on"`
		}
		if !decode(w, r, &b) {
			return
		}
		s.DuplicateWebhooks(b.On)
		writeJSON(w, http.StatusOK, b)
	})
	m.HandleFunc("POST /_sim/webhooks/redeliver", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			DeliveryID string `json:"deliveryId"`
		}
		if !decode(w, r, &b) {
			return
		}
		id, err := s.Redeliver(b.DeliveryID)
		reply(w, map[string]string{"deliveryId": id}, err)
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

func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		ctlError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func replyInvoice(w http.ResponseWriter, s *Sim, id string, err error) {
	if err != nil {
		ctlError(w, err)
		return
	}
	inv, _ := s.Invoice(id)
	writeJSON(w, http.StatusOK, inv)
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

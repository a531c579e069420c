package btcpaysim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"svc/platform/btcpay"
)

// Delivery is one webhook request the simulator sent (or tried to).
type Delivery struct {
	ID           string // deliveryId
	OriginalID   string // originalDeliveryId ("" on a first delivery)
	Type         string
	Body         []byte // exactly as sent (pretty-printed, signed)
	Signature    string // the BTCPay-Sig header
	Status       int    // HTTP status; 0 when no response arrived
	Err          string
	At           time.Time
	IsRedelivery bool
}

// field is one member of a webhook body, in order.
type field struct {
	k string
	v any
}

type hookEvent struct {
	typ    string
	fields []field // after the common ones
}

type pendingDelivery struct {
	ev         *hookEvent
	id         string
	originalID string
}

type hookState struct {
	url, secret string
	webhookID   string
	queue       []*pendingDelivery
	held        bool
	heldQ       []*pendingDelivery
	// sending is the delivery on its way to the receiver (popped from
	// queue, not yet recorded in sent): still pending, so that a caller
	// who waits for PendingWebhooks to reach 0 sees it delivered.
	sending   int
	duplicate bool
	sent      []Delivery
	byID      map[string]*pendingDelivery
	wake      chan struct{}
}

// SetWebhook points deliveries at url, signed with secret.
func (s *Sim) SetWebhook(url, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks.url, s.hooks.secret = url, secret
}

// HoldWebhooks keeps deliveries back until ReleaseWebhooks: the new ones
// and those queued and not yet sent (a delivery being sent, or waiting for
// its retry, goes on).
func (s *Sim) HoldWebhooks() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks.held = true
	s.hooks.heldQ = append(s.hooks.heldQ, s.hooks.queue...)
	s.hooks.queue = nil
}

// ReleaseWebhooks sends the held deliveries, in reverse order when asked
// (to test a receiver against reordering).
func (s *Sim) ReleaseWebhooks(reverse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.hooks.heldQ
	if reverse {
		for i, j := 0, len(q)-1; i < j; i, j = i+1, j-1 {
			q[i], q[j] = q[j], q[i]
		}
	}
	s.hooks.queue = append(s.hooks.queue, q...)
	s.hooks.heldQ, s.hooks.held = nil, false
	s.wakeSender()
}

// DuplicateWebhooks makes every delivery be sent twice, byte for byte.
func (s *Sim) DuplicateWebhooks(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks.duplicate = on
}

// Redeliver sends an earlier delivery again as BTCPay's redeliver does: a
// new deliveryId, isRedelivery true, originalDeliveryId the first one's.
func (s *Sim) Redeliver(deliveryID string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.hooks.byID[deliveryID]
	if !ok {
		return "", fmt.Errorf("btcpaysim: no delivery %q", deliveryID)
	}
	orig := d.originalID
	if orig == "" {
		orig = d.id
	}
	nd := &pendingDelivery{ev: d.ev, id: newID(16), originalID: orig}
	s.enqueue(nd)
	return nd.id, nil
}

// Deliveries returns every delivery attempted so far, oldest first.
func (s *Sim) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.hooks.sent...)
}

// WebhookFailures counts the deliveries that got no answer or an answer
// BTCPay retries (5xx, 408, 429): each holds back the deliveries after it
// until its retry.
func (s *Sim) WebhookFailures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, d := range s.hooks.sent {
		if retried(d.Status) {
			n++
		}
	}
	return n
}

// retried says whether BTCPay retries a delivery that got status (0: no
// answer): no answer, 5xx, 408 or 429 (2.3.4 and later).
func retried(status int) bool {
	return status == 0 || status >= 500 || status == http.StatusRequestTimeout || status == http.StatusTooManyRequests
}

// PendingWebhooks is the number of deliveries queued, held, or on their
// way to the receiver (a retry waiting for its delay is not counted).
func (s *Sim) PendingWebhooks() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.hooks.queue) + len(s.hooks.heldQ) + s.hooks.sending
}

// emit queues an event for delivery. Called with s.mu held.
func (s *Sim) emit(typ string, fields ...field) {
	if s.hooks.url == "" {
		return
	}
	s.enqueue(&pendingDelivery{ev: &hookEvent{typ: typ, fields: fields}, id: newID(16)})
}

func (s *Sim) enqueue(d *pendingDelivery) {
	if s.hooks.byID == nil {
		s.hooks.byID = map[string]*pendingDelivery{}
	}
	s.hooks.byID[d.id] = d
	if s.hooks.held {
		s.hooks.heldQ = append(s.hooks.heldQ, d)
		return
	}
	s.hooks.queue = append(s.hooks.queue, d)
	s.wakeSender()
}

func (s *Sim) wakeSender() {
	select {
	case s.hooks.wake <- struct{}{}:
	default:
	}
}

func (s *Sim) emitInvoice(inv *invoice, typ string, extra ...field) {
	f := []field{{"storeId", s.o.StoreID}, {"invoiceId", inv.id}, {"metadata", inv.metadata}}
	s.emit(typ, append(f, extra...)...)
}

func (s *Sim) emitPayment(inv *invoice, typ string, pm *payment) {
	s.emitInvoice(inv, typ, field{"afterExpiration", pm.afterExpiration}, field{"paymentMethodId", pm.method},
		field{"payment", paymentView(pm)})
}

func (s *Sim) emitPayout(po *payout, typ string) {
	s.emit(typ, field{"storeId", s.o.StoreID}, field{"payoutId", po.id}, field{"pullPaymentId", nil},
		field{"payoutState", po.state})
}

// body renders a delivery as BTCPay does: indented JSON (Newtonsoft's
// Formatting.Indented, two spaces), nulls included.
func (d *pendingDelivery) body(webhookID string, at time.Time) ([]byte, error) {
	var orig any
	if d.originalID != "" {
		orig = d.originalID
	}
	fields := append([]field{{"deliveryId", d.id}, {"webhookId", webhookID}, {"originalDeliveryId", orig},
		{"isRedelivery", d.originalID != ""}, {"type", d.ev.typ}, {"timestamp", at.Unix()}}, d.ev.fields...)
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(f.k)
		v, err := json.Marshal(f.v)
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, buf.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// sendLoop delivers queued webhooks one at a time, in order; a delivery
// being retried holds back the ones after it, as in BTCPay.
func (s *Sim) sendLoop() {
	hc := &http.Client{Timeout: s.o.WebhookTimeout}
	for {
		s.mu.Lock()
		var d *pendingDelivery
		if len(s.hooks.queue) > 0 {
			d, s.hooks.queue = s.hooks.queue[0], s.hooks.queue[1:]
			s.hooks.sending++
		}
		s.mu.Unlock()
		if d == nil {
			select {
			case <-s.ctx.Done():
				return
			case <-s.hooks.wake:
				continue
			}
		}
		for attempt := 0; ; attempt++ {
			retry := s.deliver(hc, d)
			s.mu.Lock()
			s.hooks.sending--
			s.mu.Unlock()
			if !retry || attempt >= len(s.o.WebhookRetryDelays) {
				break
			}
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(s.o.WebhookRetryDelays[attempt]):
			}
			orig := d.originalID
			if orig == "" {
				orig = d.id
			}
			d = &pendingDelivery{ev: d.ev, id: newID(16), originalID: orig}
			s.mu.Lock()
			s.hooks.byID[d.id] = d
			s.hooks.sending++
			s.mu.Unlock()
		}
	}
}

// deliver sends d (twice when duplicating) and reports whether BTCPay
// would retry it: no response, 5xx, 408 or 429 (2.3.4 and later).
func (s *Sim) deliver(hc *http.Client, d *pendingDelivery) bool {
	s.mu.Lock()
	url, secret, dup, hookID := s.hooks.url, s.hooks.secret, s.hooks.duplicate, s.hooks.webhookID
	at := s.now()
	s.mu.Unlock()
	body, err := d.body(hookID, at)
	if err != nil {
		s.log.Error("btcpaysim: webhook body", "error", err)
		return false
	}
	sig := btcpay.Sign(secret, body)
	retry, copies := false, 1
	if dup {
		copies = 2
	}
	for range copies {
		rec := Delivery{ID: d.id, OriginalID: d.originalID, Type: d.ev.typ, Body: body, Signature: sig, At: at,
			IsRedelivery: d.originalID != ""}
		req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, url, bytes.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(btcpay.SignatureHeader, sig)
			req.Header.Set("User-Agent", "BTCPayServer")
			var resp *http.Response
			resp, err = hc.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
				_ = resp.Body.Close()
				rec.Status = resp.StatusCode
			}
		}
		if err != nil {
			rec.Err = err.Error()
			if s.ctx.Err() != nil { // shutting down
				return false
			}
		}
		retry = retried(rec.Status)
		s.mu.Lock()
		s.hooks.sent = append(s.hooks.sent, rec)
		s.mu.Unlock()
	}
	return retry
}

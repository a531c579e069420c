package btcpay

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// SignatureHeader is the header BTCPay signs its webhooks in.
const SignatureHeader = "BTCPay-Sig"

// Webhook event types BTCPay sends (WebhookEventType).
const (
	EventInvoiceCreated             = "InvoiceCreated"
	EventInvoiceReceivedPayment     = "InvoiceReceivedPayment"
	EventInvoicePaymentSettled      = "InvoicePaymentSettled"
	EventInvoiceProcessing          = "InvoiceProcessing"
	EventInvoiceExpired             = "InvoiceExpired"
	EventInvoiceSettled             = "InvoiceSettled"
	EventInvoiceInvalid             = "InvoiceInvalid"
	EventInvoiceExpiredPaidPartial  = "InvoiceExpiredPaidPartial"  // 2.1.2+
	EventInvoicePaidAfterExpiration = "InvoicePaidAfterExpiration" // 2.1.2+
	EventInvoiceRefund              = "InvoiceRefund"              // 2.4.1+
	EventPayoutCreated              = "PayoutCreated"
	EventPayoutApproved             = "PayoutApproved"
	EventPayoutUpdated              = "PayoutUpdated"
)

// Sign returns the signature header value for body: "sha256=" and the
// lowercase hex HMAC-SHA256 of the raw body keyed with the secret.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// VerifySignature reports whether header ("sha256=<hex>", hex in either
// case) is the signature of body under secret, comparing in constant time.
// An empty secret verifies nothing.
func VerifySignature(secret string, body []byte, header string) bool {
	if secret == "" {
		return false
	}
	algo, sig, ok := strings.Cut(strings.TrimSpace(header), "=")
	if !ok || !strings.EqualFold(algo, "sha256") {
		return false
	}
	got, err := hex.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return false
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hmac.Equal(got, m.Sum(nil))
}

// WebhookEvent is one webhook delivery, the union of the invoice and payout
// event shapes; the fields of other types stay zero.
type WebhookEvent struct {
	DeliveryID         string   `json:"deliveryId"`
	WebhookID          string   `json:"webhookId"`
	OriginalDeliveryID string   `json:"originalDeliveryId"` // set on redeliveries: the first delivery's id
	IsRedelivery       bool     `json:"isRedelivery"`
	Type               string   `json:"type"`
	Timestamp          UnixTime `json:"timestamp"`
	StoreID            string   `json:"storeId"`

	// Invoice events.
	InvoiceID       string   `json:"invoiceId"`
	Metadata        Metadata `json:"metadata"`
	AfterExpiration bool     `json:"afterExpiration"` // ReceivedPayment, PaymentSettled
	PaymentMethodID string   `json:"paymentMethodId"` // ReceivedPayment, PaymentSettled
	Payment         *Payment `json:"payment"`         // ReceivedPayment, PaymentSettled
	OverPaid        bool     `json:"overPaid"`        // Processing, Settled
	ManuallyMarked  bool     `json:"manuallyMarked"`  // Settled, Invalid
	PartiallyPaid   bool     `json:"partiallyPaid"`   // Expired

	// Payout events.
	PayoutID      string      `json:"payoutId"`
	PullPaymentID string      `json:"pullPaymentId"`
	PayoutState   PayoutState `json:"payoutState"`
}

// OrderID returns the invoice's metadata.orderId.
func (e WebhookEvent) OrderID() string { return e.Metadata.String(MetadataOrderID) }

// Identity is what deduplicates deliveries: a redelivery carries the first
// delivery's id in originalDeliveryId, so both collapse to it. Empty when
// the body names no delivery.
func (e WebhookEvent) Identity() string {
	if e.OriginalDeliveryID != "" {
		return e.OriginalDeliveryID
	}
	return e.DeliveryID
}

// IsInvoiceEvent reports an Invoice* type.
func (e WebhookEvent) IsInvoiceEvent() bool { return strings.HasPrefix(e.Type, "Invoice") }

// IsPayoutEvent reports a Payout* type.
func (e WebhookEvent) IsPayoutEvent() bool { return strings.HasPrefix(e.Type, "Payout") }

// ErrBadWebhook means a webhook body is not a BTCPay event.
var ErrBadWebhook = errors.New("not a webhook event")

// knownEvents are the types whose shape ParseWebhookEvent insists on.
var knownEvents = map[string]bool{
	EventInvoiceCreated: true, EventInvoiceReceivedPayment: true, EventInvoicePaymentSettled: true,
	EventInvoiceProcessing: true, EventInvoiceExpired: true, EventInvoiceSettled: true, EventInvoiceInvalid: true,
	EventInvoiceExpiredPaidPartial: true, EventInvoicePaidAfterExpiration: true, EventInvoiceRefund: true,
	EventPayoutCreated: true, EventPayoutApproved: true, EventPayoutUpdated: true,
}

// KnownEvent reports whether typ is an event type this package knows.
func KnownEvent(typ string) bool { return knownEvents[typ] }

// ParseWebhookEvent parses a webhook body: a JSON object with a non-empty
// string type. A known type must have its documented shape; for a type
// this package does not know (BTCPay adds types without notice) only the
// common fields are read, and a field of an unexpected shape is not an
// error. Unknown fields are ignored.
func ParseWebhookEvent(body []byte) (WebhookEvent, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return WebhookEvent{}, fmt.Errorf("%w: body is not a JSON object", ErrBadWebhook)
	}
	if dec.More() {
		return WebhookEvent{}, fmt.Errorf("%w: data after the JSON object", ErrBadWebhook)
	}
	var typ string
	if err := json.Unmarshal(fields["type"], &typ); err != nil || strings.TrimSpace(typ) == "" {
		return WebhookEvent{}, fmt.Errorf("%w: no type", ErrBadWebhook)
	}
	var e WebhookEvent
	err := json.Unmarshal(body, &e)
	if err == nil {
		return e, nil
	}
	if knownEvents[typ] {
		return WebhookEvent{}, fmt.Errorf("%w: %s: %v", ErrBadWebhook, typ, err)
	}
	e = WebhookEvent{Type: typ}
	for key, dst := range map[string]*string{"deliveryId": &e.DeliveryID, "originalDeliveryId": &e.OriginalDeliveryID,
		"webhookId": &e.WebhookID, "storeId": &e.StoreID} {
		_ = json.Unmarshal(fields[key], dst) // absent or of another shape: left empty
	}
	return e, nil
}

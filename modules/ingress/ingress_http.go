package ingress

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"svc/platform/btcpay"
	"svc/platform/fault"
	"svc/platform/tracing"
)

// Ack is the SPEC's webhook acknowledgement.
type Ack struct {
	Status string  `json:"status"` // accepted or ignored
	Reason *string `json:"reason"` // why it was ignored
}

var (
	errNoSignature  = fault.New(fault.Unauthenticated, "missing signature: send Processor-Sig (or BTCPay-Sig) as sha256= followed by the hex HMAC-SHA256 of the raw body")
	errBadSignature = fault.New(fault.Unauthenticated, "bad signature")
)

// Routes registers POST /webhooks/processor (no API key).
func (s *Service) Routes(r fiber.Router) {
	r.Post("/webhooks/processor", s.receive)
}

func (s *Service) receive(c *fiber.Ctx) error {
	sigs := []string{c.Get(HeaderProcessorSig), c.Get(HeaderBTCPaySig)}
	if sigs[0] == "" && sigs[1] == "" {
		return errNoSignature
	}
	// The signature first: a validly signed delivery of any size up to the
	// server's body limit (HTTP_BODY_LIMIT_BYTES) is taken. A size check of
	// our own before it answered 413, which BTCPay does not retry, and the
	// delivery was lost until the next poll.
	raw := c.BodyRaw()
	if !btcpay.VerifySignature(s.Secret, raw, sigs[0]) && !btcpay.VerifySignature(s.Secret, raw, sigs[1]) {
		return errBadSignature
	}
	body := bytes.Clone(raw) // fiber reuses its buffers after the handler
	ev, err := btcpay.ParseWebhookEvent(body)
	if err != nil {
		return fault.New(fault.BadRequest, "body is not a processor event: "+err.Error())
	}
	if reason := s.ignore(ev); reason != "" {
		s.log().InfoContext(c.UserContext(), "processor webhook ignored", "type", ev.Type, "delivery_id", ev.DeliveryID, "reason", reason)
		return c.JSON(Ack{Status: "ignored", Reason: &reason})
	}
	key := ev.Identity()
	if key == "" || len(key) > 200 {
		sum := sha256.Sum256(body)
		key = "sha256:" + hex.EncodeToString(sum[:])
	}
	// An invoice created with a trace (tracing.InjectInto) carries it in
	// its metadata: the job is inserted in that trace, linked to this
	// request's own.
	ctx, span := tracing.Resume(c.UserContext(), "processor webhook "+ev.Type, ev.Metadata.String)
	defer span.End()
	stored, err := s.store(ctx, key, ev, body)
	if err != nil {
		// 5xx: BTCPay retries, and nothing was acknowledged.
		return err
	}
	s.log().InfoContext(ctx, "processor webhook accepted", "type", ev.Type, "delivery_id", ev.DeliveryID,
		"invoice_id", ev.InvoiceID, "payout_id", ev.PayoutID, "duplicate", !stored)
	return c.JSON(Ack{Status: "accepted"})
}

// ignore returns why the service will not act on ev, or "".
func (s *Service) ignore(ev btcpay.WebhookEvent) string {
	switch {
	case !btcpay.KnownEvent(ev.Type):
		return "unknown event type " + strconv.Quote(ev.Type)
	case !Subscribed(ev.Type):
		return "event type " + ev.Type + " is not one the service subscribes to"
	case ev.StoreID != s.StoreID:
		return "event for another store"
	case ev.IsInvoiceEvent() && ev.InvoiceID == "":
		return "invoice event without an invoice id"
	case ev.IsPayoutEvent() && ev.PayoutID == "":
		return "payout event without a payout id"
	}
	return ""
}

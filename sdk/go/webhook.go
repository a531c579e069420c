package svcsdk

import (
	"time"

	"svc/platform/webhooksig"
)

// WebhookSignatureHeader is the header that carries an outbound webhook's
// signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">.
const WebhookSignatureHeader = webhooksig.Header

// WebhookTolerance is how far a delivery's signed time may be from the
// receiver's clock, either way.
const WebhookTolerance = webhooksig.Tolerance

// The errors VerifyWebhook returns (errors.Is): why a delivery was refused.
var (
	ErrWebhookMalformed = webhooksig.ErrMalformed
	ErrWebhookTimestamp = webhooksig.ErrTimestamp
	ErrWebhookMismatch  = webhooksig.ErrMismatch
)

// VerifyWebhook checks a delivery of the service's outbound webhooks: header
// is the X-Service-Signature value, body the raw request body (the bytes
// received, never a re-encoded copy), now the receiver's clock. It is the
// service's own verifier (svc/platform/webhooksig): constant-time, any of
// several v1 signatures (a secret rotation), WebhookTolerance either way.
func VerifyWebhook(secret []byte, header string, body []byte, now time.Time) error {
	return webhooksig.Verify(secret, header, body, now)
}

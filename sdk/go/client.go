// Package svcsdk is the Go client of the svc API.
//
// client.gen.go is generated from platform/openapi/openapi.json by
// oapi-codegen (make sdk; never edit it): a type for every schema, a method
// for every operation, and for each a response type with one field per
// documented status (JSON201, JSON402, JSON409, JSON422, JSON503, ...),
// decoded into that status's schema. The rest is written by hand: New (the
// API key), Retrying (one Idempotency-Key, retried) and VerifyWebhook (the
// service's own verifier, svc/platform/webhooksig).
package svcsdk

import (
	"context"
	"net/http"

	"github.com/google/uuid"
)

// New returns a client of the API at server (its base address, e.g.
// "https://payments.example.com") that sends apiKey as the bearer token.
// Pass WithHTTPClient(&Retrying{}) to retry with the same Idempotency-Key.
func New(server, apiKey string, opts ...ClientOption) (*ClientWithResponses, error) {
	return NewClientWithResponses(server, append([]ClientOption{WithRequestEditorFn(BearerAuth(apiKey))}, opts...)...)
}

// BearerAuth sets the Authorization header of every request to the API key.
func BearerAuth(apiKey string) RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+apiKey)
		return nil
	}
}

// NewIdempotencyKey returns a fresh key for one logical operation: make it
// once, and send the same key on every retry of that operation.
func NewIdempotencyKey() IdempotencyKey { return uuid.NewString() }

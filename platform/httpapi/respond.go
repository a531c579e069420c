package httpapi

import (
	"context"

	"github.com/gofiber/fiber/v2"
	"github.com/uptrace/bun"

	"svc/platform/idempotency"
)

// SendJSON answers with status and body, JSON already encoded: the answer a
// handler stored as its Idempotency-Key's, which a replay sends byte for
// byte.
func SendJSON(c *fiber.Ctx, status int, body []byte) error {
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(status).Send(body)
}

// Completer stores a mutation's answer as its Idempotency-Key's, in the
// transaction of its effect (idempotency.Record).
type Completer interface {
	CompleteTx(ctx context.Context, tx bun.IDB, status int, contentType string, body []byte) error
}

// Mutate runs a mutation with the request's Idempotency-Key (rec nil and key
// "" outside the idempotency middleware) and answers status with the body
// it returns, the one it stored as the key's answer.
func Mutate(c *fiber.Ctx, status int, run func(ctx context.Context, rec Completer, key string) ([]byte, error)) error {
	var rec Completer // nil, not a nil *Record: a service tests rec != nil
	var key string
	if r := idempotency.FromCtx(c); r != nil {
		rec, key = r, r.Key
	}
	body, err := run(c.UserContext(), rec, key)
	if err != nil {
		return err
	}
	return SendJSON(c, status, body)
}

package operator

import "github.com/gofiber/fiber/v2"

// EnvelopeFrom reads the request's Svc-Operator-Signature header: nil
// when it has none, a 401 when it is malformed.
func EnvelopeFrom(c *fiber.Ctx) (*Envelope, error) {
	h := c.Get(Header)
	if h == "" {
		return nil, nil
	}
	e, err := ParseHeader(h)
	if err != nil {
		return nil, err
	}
	return &e, nil
}

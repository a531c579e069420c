package apikey

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"svc/modules/audit"
	"svc/platform/fault"
)

const localsKey = "apikey"

// Require returns middleware that authenticates the bearer key and checks
// that it may be used from the client's address (its allow-list; the
// address is Store.Proxies.ClientIP's) and that its scope allows need with
// the request's method; a refusal is a 403 that names the rule. Keys are
// read only from the Authorization header, never from the query string.
func (s *Store) Require(need Scope) fiber.Handler {
	return func(c *fiber.Ctx) error {
		// A 401 says how to authenticate (RFC 9110 section 11.6.1).
		challenge := func(err error) error {
			if fault.KindOf(err) == fault.Unauthenticated {
				c.Set(fiber.HeaderWWWAuthenticate, "Bearer")
			}
			return err
		}
		h := c.Get(fiber.HeaderAuthorization)
		if h == "" {
			return challenge(ErrMissing)
		}
		scheme, token, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
			return challenge(ErrMalformed)
		}
		k, err := s.Authenticate(c.UserContext(), strings.TrimSpace(token))
		if err != nil {
			return challenge(err)
		}
		if ip := s.Proxies.ClientIP(c); !k.AllowsFrom(ip) {
			return k.notFrom(ip)
		}
		if !k.Scope.Allows(need, c.Method()) {
			return k.Scope.refusal(need, c.Method())
		}
		c.Locals(localsKey, k)
		return c.Next()
	}
}

// FromCtx returns the authenticated key of the request.
func FromCtx(c *fiber.Ctx) (Key, bool) {
	k, ok := c.Locals(localsKey).(Key)
	return k, ok
}

// ActorFrom is the audit actor of the request's authenticated key, or a
// 401 when the request has none (a route the authentication does not
// guard).
func ActorFrom(c *fiber.Ctx) (audit.Actor, error) {
	k, ok := FromCtx(c)
	if !ok {
		return audit.Actor{}, fault.New(fault.Unauthenticated, "missing API key")
	}
	return ActorOf(k), nil
}

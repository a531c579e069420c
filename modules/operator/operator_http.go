package operator

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/gofiber/fiber/v2"
	"github.com/uptrace/bun"

	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/httpapi"
	"svc/platform/idempotency"
)

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

// Routes registers, on the admin router (/v1/admin, admin scope, requests
// checked against openapi.json); idem is the Idempotency-Key middleware:
//
//	GET  /operators           Listing
//	POST /operators/changes   200 Result (applied), 202 Result (pending)
//
// A change travels as its signed statement in the Svc-Operator-Signature
// header: the statement alone says what changes (its action, the
// operator's name as its resource, and as facts the role, public key or
// key id and the chain head it applies to). The body is {} or repeats
// any of the change's fields (action, name, role, public_key, key_id),
// each of which must then equal the statement's (422 otherwise): a
// client that sends what it meant to sign learns of a mix-up before
// anything changes. The operators' listing never needs a signature.
func (s *Service) Routes(admin fiber.Router, idem fiber.Handler) {
	admin.Get("/operators", s.handleList)
	admin.Post("/operators/changes", idem, s.handleChange)
	admin.Get("/audit/verify", s.handleVerifyAudit)
}

// handleVerifyAudit is GET /audit/verify?allow_unsigned=: svc admin audit
// verify over HTTP, the audit trail and the enrollment chain read at one
// snapshot of the primary and verified (VerifyAudit); 200 with the report
// whatever it found (ok says).
func (s *Service) handleVerifyAudit(c *fiber.Ctx) error {
	x, err := ExportAudit(c.UserContext(), s.DB, s.RP, s.now())
	if err != nil {
		return err
	}
	return c.JSON(VerifyAudit(x, c.QueryBool("allow_unsigned", false)))
}

func (s *Service) handleList(c *fiber.Ctx) error {
	l, err := s.List(c.UserContext(), s.DB)
	if err != nil {
		return err
	}
	return c.JSON(l)
}

// changeRequest is OperatorChangeRequest: the change's fields, each
// optional, each checked against the signed statement.
type changeRequest struct {
	Action    *string `json:"action"`
	Name      *string `json:"name"`
	Role      *string `json:"role"`
	PublicKey *string `json:"public_key"`
	KeyID     *string `json:"key_id"`
}

// ErrChangeUnsigned: a change of the roster always carries an admin's
// signature, whatever OPERATOR_SIGNATURES says.
var ErrChangeUnsigned = fault.New(fault.Unauthenticated, "a change of the operators is signed by an admin: send its statement in the "+Header+" header (svc admin operators ... --key signs it)")

// check refuses a body field that is not the signed change's.
func (r changeRequest) check(c Change) error {
	for _, f := range []struct {
		name string
		body *string
		want string
	}{{"action", r.Action, c.Action}, {"name", r.Name, c.Name}, {"role", r.Role, string(c.Role)}, {"public_key", r.PublicKey, c.PublicKey}, {"key_id", r.KeyID, c.KeyID}} {
		if f.body != nil && *f.body != f.want {
			return fault.New(fault.Invalid, fmt.Sprintf("the body's %s %q is not the signed statement's %q: send {} or what the statement signs", f.name, *f.body, f.want))
		}
	}
	return nil
}

func (s *Service) handleChange(c *fiber.Ctx) error {
	var req changeRequest
	if err := httpapi.Bind(c, &req); err != nil {
		return err
	}
	env, err := EnvelopeFrom(c)
	if err != nil {
		return err
	}
	if env == nil {
		return ErrChangeUnsigned
	}
	st, err := env.Parse()
	if err != nil {
		return err
	}
	ch, err := changeOf(st)
	if err != nil {
		return fault.New(fault.Invalid, err.Error())
	}
	if err := req.check(ch); err != nil {
		return err
	}
	rec := idempotency.FromCtx(c)
	var (
		res    Result
		body   []byte
		status int
	)
	// The change and the key's answer commit together: Submit runs in a
	// savepoint of this transaction.
	err = db.RunInTx(c.UserContext(), s.DB, func(ctx context.Context, tx bun.Tx) error {
		in := *s
		in.DB = tx
		var err error
		if res, err = in.Submit(ctx, *env); err != nil {
			return err
		}
		status = fiber.StatusOK
		if res.Status != "applied" {
			status = fiber.StatusAccepted
		}
		if body, err = json.Marshal(res); err != nil {
			return err
		}
		if rec == nil {
			return nil
		}
		return rec.CompleteTx(ctx, tx, status, fiber.MIMEApplicationJSON, body)
	})
	return idempotency.SendJSON(c, rec, err, status, body)
}

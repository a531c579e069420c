package hold

import (
	"context"
	"fmt"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/platform/fault"
	"svc/platform/httpapi"
	"svc/platform/metadata"
	"svc/platform/money"
)

// Routes registers the hold routes on the /v1 router (readwrite); idem is
// the Idempotency-Key middleware of the mutating routes. The two lists read
// Service.Replica, which may lag the primary; everything else reads the
// primary.
//
//	POST /holds                                         201 Hold, open
//	GET  /holds?client_reference=                       {holds, next_cursor}: the one hold, or none
//	GET  /holds/{hold_id}                               Hold
//	POST /holds/{hold_id}/capture                       Hold, captured
//	POST /holds/{hold_id}/void                          Hold, voided
//	GET  /users/{external_user_id}/holds?status=        {holds, next_cursor}, newest first (replica)
//	GET  /platform-accounts/{platform_account}/holds?status=      {holds, next_cursor}, newest first (replica)
func (s *Service) Routes(platform fiber.Router, idem fiber.Handler) {
	platform.Post("/holds", idem, s.handleCreate)
	platform.Get("/holds", s.handleFind)
	platform.Get("/holds/:hold_id", s.handleGet)
	platform.Post("/holds/:hold_id/capture", idem, s.handleCapture)
	platform.Post("/holds/:hold_id/void", idem, s.handleVoid)
	platform.Get("/users/:external_user_id/holds", s.handleList(false))
	platform.Get("/platform-accounts/:platform_account/holds", s.handleList(true))
}

// The request bodies. openapi.json states their fields, types and lengths
// (httpapi.Validator); the handlers check only what it cannot say.
type createRequest struct {
	From            AccountRef        `json:"from"`
	Asset           string            `json:"asset"`
	Amount          string            `json:"amount"`
	ExpiresIn       *int64            `json:"expires_in"`
	Description     *string           `json:"description"`
	Metadata        metadata.Metadata `json:"metadata"`
	ClientReference *string           `json:"client_reference"`
}

type legRequest struct {
	To     AccountRef `json:"to"`
	Amount string     `json:"amount"`
}

type captureRequest struct {
	Legs []legRequest `json:"legs"`
}

// units reads an amount field: an integer string of smallest units from 1
// to MaxAmount.
func units(s string, loc ...any) (int64, error) {
	n, err := money.ParseUnits(s, true)
	switch {
	case err != nil:
		return 0, fault.Validation(fault.FieldError{Loc: loc, Type: "value_error", Msg: "amount " + err.Error(), Input: s})
	case n > MaxAmount:
		return 0, fault.Validation(fault.FieldError{Loc: loc, Type: "less_than_equal",
			Msg: fmt.Sprintf("amount must be at most %d smallest units", MaxAmount), Input: s})
	}
	return n, nil
}

func (s *Service) handleCreate(c *fiber.Ctx) error {
	var req createRequest
	if err := httpapi.Bind(c, &req); err != nil {
		return err
	}
	from, err := req.From.Holder("body", "from")
	if err != nil {
		return err
	}
	n, err := units(req.Amount, "body", "amount")
	if err != nil {
		return err
	}
	if err := req.Metadata.Check("body", "metadata"); err != nil {
		return err
	}
	p := CreateParams{From: from, Asset: req.Asset, Amount: n, Description: req.Description, Metadata: req.Metadata,
		ClientReference: req.ClientReference}
	if req.ExpiresIn != nil {
		// The document bounds it to 1..2592000 seconds.
		p.ExpiresIn = time.Duration(*req.ExpiresIn) * time.Second
	}
	return httpapi.Mutate(c, fiber.StatusCreated, func(ctx context.Context, rec httpapi.Completer, key string) ([]byte, error) {
		p.IdempotencyKey = key
		_, body, err := s.Create(ctx, p, rec)
		return body, err
	})
}

// idParam reads the path's hold id; anything that is not one is an
// unknown hold (404).
func idParam(c *fiber.Ctx) (uuid.UUID, error) {
	id, err := uuid.Parse(httpapi.Param(c, "hold_id"))
	if err != nil {
		return uuid.Nil, ErrNotFound
	}
	return id, nil
}

func (s *Service) handleGet(c *fiber.Ctx) error {
	id, err := idParam(c)
	if err != nil {
		return err
	}
	ctx := c.UserContext()
	h, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	v, err := s.View(ctx, h)
	if err != nil {
		return err
	}
	return c.JSON(v)
}

func (s *Service) handleCapture(c *fiber.Ctx) error {
	id, err := idParam(c)
	if err != nil {
		return err
	}
	var req captureRequest
	if err := httpapi.Bind(c, &req); err != nil {
		return err
	}
	legs := make([]CaptureLeg, 0, len(req.Legs))
	for i, l := range req.Legs {
		to, err := l.To.Holder("body", "legs", i, "to")
		if err != nil {
			return err
		}
		n, err := units(l.Amount, "body", "legs", i, "amount")
		if err != nil {
			return err
		}
		legs = append(legs, CaptureLeg{To: to, Amount: n})
	}
	return httpapi.Mutate(c, fiber.StatusOK, func(ctx context.Context, rec httpapi.Completer, _ string) ([]byte, error) {
		_, body, err := s.Capture(ctx, id, legs, rec)
		return body, err
	})
}

func (s *Service) handleVoid(c *fiber.Ctx) error {
	id, err := idParam(c)
	if err != nil {
		return err
	}
	return httpapi.Mutate(c, fiber.StatusOK, func(ctx context.Context, rec httpapi.Completer, _ string) ([]byte, error) {
		_, body, err := s.Void(ctx, id, rec)
		return body, err
	})
}

// handleFind answers GET /holds?client_reference=: the hold with that
// reference, as a list of one, or an empty list.
func (s *Service) handleFind(c *fiber.Ctx) error {
	ctx := c.UserContext()
	ref := c.Query("client_reference") // required by the document
	out := ListView{Holds: []View{}}
	h, ok, err := s.ByClientReference(ctx, ref)
	if err != nil {
		return err
	}
	if ok {
		v, err := s.View(ctx, h)
		if err != nil {
			return err
		}
		out.Holds = append(out.Holds, v)
	}
	return c.JSON(out)
}

// handleList answers a payer's list: a user's (external_user_id) or a
// platform account's (name), in the status asked (open by default).
func (s *Service) handleList(platform bool) fiber.Handler {
	return func(c *fiber.Ctx) error {
		var payer ledger.Holder
		if platform {
			name := httpapi.Param(c, "platform_account")
			if !ledger.ValidPlatformName(name) {
				return fault.Validation(fault.FieldError{Loc: []any{"path", "platform_account"}, Type: "string_pattern_mismatch",
					Msg: "a platform account's name has 1 to 64 characters of [a-z0-9_.:-]", Input: name})
			}
			payer = ledger.PlatformHolder(name)
		} else {
			payer = ledger.UserHolder(httpapi.Param(c, "external_user_id"))
		}
		status := Status(c.Query("status", string(StatusOpen)))
		return httpapi.SendPage(c, s.lists(), DefaultListLimit,
			func(ctx context.Context, idb bun.IDB, at httpapi.PageAt) ([]Hold, *uuid.UUID, error) {
				return list(ctx, idb, ListParams{Payer: payer, Status: status, Cursor: at.Cursor, Limit: at.Limit})
			}, views, func(vs []View, next *string) any { return ListView{Holds: vs, NextCursor: next} })
	}
}

// lists is where the lists read (the replica).
func (s *Service) lists() httpapi.Lists {
	return httpapi.Lists{Replica: s.Replica, Primary: s.DB, BadCursor: ErrBadCursor}
}

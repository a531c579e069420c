package transfer

import (
	"context"
	"fmt"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/platform/fault"
	"svc/platform/httpapi"
	"svc/platform/metadata"
	"svc/platform/money"
)

// Routes registers the routes on the /v1 router (readwrite); claimIn wraps
// creation in the Idempotency-Key middleware whose key the creation's own
// transaction claims on its fast way (Create). The two account lists
// (replica) read Service.Replica, which may lag the primary; the rest read
// the primary.
//
//	POST /transfers                                       201 Transfer
//	GET  /transfers?client_reference=                     {transfers, next_cursor}: the one match or none
//	GET  /transfers/{transfer_id}                         Transfer
//	GET  /users/{external_user_id}/transfers              {transfers, next_cursor}, newest first (replica)
//	GET  /platform-accounts/{platform_account}/transfers  {transfers, next_cursor}, newest first (replica)
func (s *Service) Routes(platform fiber.Router, claimIn func(fiber.Handler) fiber.Handler) {
	platform.Post("/transfers", claimIn(s.handleCreate))
	platform.Get("/transfers", s.handleFind)
	platform.Get("/transfers/:transfer_id", s.handleGet)
	platform.Get("/users/:external_user_id/transfers", s.handleUserList)
	platform.Get("/platform-accounts/:platform_account/transfers", s.handlePlatformList)
}

// The request body. openapi.json states its fields, types and lengths
// (httpapi.Validator); the handler checks only what it cannot say.
type createRequest struct {
	Legs []struct {
		From   AccountRef `json:"from"`
		To     AccountRef `json:"to"`
		Asset  string     `json:"asset"`
		Amount string     `json:"amount"`
	} `json:"legs"`
	Description     *string           `json:"description"`
	Metadata        metadata.Metadata `json:"metadata"`
	ClientReference *string           `json:"client_reference"`
}

func (s *Service) handleCreate(c *fiber.Ctx) error {
	var req createRequest
	if err := httpapi.Bind(c, &req); err != nil {
		return err
	}
	p := CreateParams{Description: req.Description, Metadata: req.Metadata, ClientReference: req.ClientReference,
		Legs: make([]LegParams, len(req.Legs))}
	var errs []error
	for i, l := range req.Legs {
		n, err := money.ParseUnits(l.Amount, true)
		switch {
		case err != nil:
			errs = append(errs, legError(i, "amount", "value_error", "amount "+err.Error(), l.Amount))
		case n > MaxAmount:
			errs = append(errs, legError(i, "amount", "less_than_equal", fmt.Sprintf("amount must be at most %d smallest units", int64(MaxAmount)), l.Amount))
		}
		for _, side := range []struct {
			name string
			ref  AccountRef
		}{{"from", l.From}, {"to", l.To}} {
			if (side.ref.ExternalUserID == "") == (side.ref.PlatformAccount == "") {
				errs = append(errs, legError(i, side.name, "value_error", "must name exactly one of external_user_id and platform_account", nil))
			}
		}
		p.Legs[i] = LegParams{From: l.From.Holder(), To: l.To.Holder(), Asset: l.Asset, Amount: n}
	}
	if err := fault.MergeValidation(errs...); err != nil {
		return err
	}
	return httpapi.Mutate(c, fiber.StatusCreated, func(ctx context.Context, rec httpapi.Completer, key string) ([]byte, error) {
		p.IdempotencyKey = key
		_, body, err := s.Create(ctx, p, rec)
		return body, err
	})
}

func (s *Service) handleGet(c *fiber.Ctx) error {
	id, err := uuid.Parse(httpapi.Param(c, "transfer_id"))
	if err != nil {
		return ErrNotFound // not an id: an unknown transfer
	}
	ctx := c.UserContext()
	t, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	vs, err := views(ctx, s.DB, []Transfer{t})
	if err != nil {
		return err
	}
	return c.JSON(vs[0])
}

// handleFind answers GET /transfers?client_reference=: the list shape with
// the one transfer that has it, or none (the parameter is required:
// openapi.json).
func (s *Service) handleFind(c *fiber.Ctx) error {
	ref := string(c.Context().QueryArgs().Peek("client_reference")) // a copy: fiber reuses its buffers
	ctx := c.UserContext()
	t, ok, err := byClientReference(ctx, s.DB, ref)
	if err != nil {
		return err
	}
	out := ListView{Transfers: []View{}}
	if ok {
		if out.Transfers, err = views(ctx, s.DB, []Transfer{t}); err != nil {
			return err
		}
	}
	return c.JSON(out)
}

func (s *Service) handleUserList(c *fiber.Ctx) error {
	return s.sendList(c, ledger.UserHolder(httpapi.Param(c, "external_user_id")))
}

func (s *Service) handlePlatformList(c *fiber.Ctx) error {
	return s.sendList(c, ledger.PlatformHolder(httpapi.Param(c, "platform_account")))
}

func (s *Service) sendList(c *fiber.Ctx, account ledger.Holder) error {
	return httpapi.SendPage(c, httpapi.Lists{Replica: s.Replica, Primary: s.DB, BadCursor: ErrBadCursor}, DefaultListLimit,
		func(ctx context.Context, idb bun.IDB, at httpapi.PageAt) ([]Transfer, *uuid.UUID, error) {
			return list(ctx, idb, ListParams{Account: account, Cursor: at.Cursor, Limit: at.Limit})
		}, views, func(vs []View, next *string) any { return ListView{Transfers: vs, NextCursor: next} })
}

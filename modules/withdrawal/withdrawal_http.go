package withdrawal

import (
	"context"

	"fmt"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/apikey"
	"svc/modules/ledger"
	"svc/modules/operator"
	"svc/platform/fault"
	"svc/platform/httpapi"
	"svc/platform/metadata"
	"svc/platform/money"
)

// Routes registers the platform routes on the /v1 router (readwrite) and
// the operator routes on the /v1/admin router; idem is the Idempotency-Key
// middleware of the mutating routes, and claimIn its variant for creation,
// which claims the key in its first statement (Service.Create). The two
// lists (replica) read Service.Replica, which may lag the primary; the
// single withdrawal and every decision read the primary.
//
//	POST /withdrawals                               201 Withdrawal (+ approval_reason)
//	GET  /withdrawals?client_reference=             {withdrawals, next_cursor}: the one withdrawal with it, or none
//	GET  /withdrawals/{withdrawal_id}               Withdrawal
//	GET  /users/{external_user_id}/withdrawals      {withdrawals, next_cursor}, newest first (replica)
//	GET  /admin/withdrawals?status=&limit=&cursor=  {withdrawals, next_cursor}, oldest first (replica)
//	GET  /admin/withdrawals/{id}                    admin withdrawal, with its approvals
//	POST /admin/withdrawals/{id}/approve            approved withdrawal (+ amount_to_send)
//	POST /admin/withdrawals/{id}/reject             admin withdrawal, refunded
//	POST /admin/withdrawals/{id}/release            admin withdrawal, refunded
//	POST /admin/withdrawals/{id}/mark-broadcast     admin withdrawal, broadcast (USDT_TRC20)
//
// A decision signed by an operator carries the statement in the
// Svc-Operator-Signature header (operator.EnvelopeFrom; DecisionExpect).
func (s *Service) Routes(platform, admin fiber.Router, idem fiber.Handler, claimIn func(fiber.Handler) fiber.Handler) {
	platform.Post("/withdrawals", claimIn(s.handleCreate))
	platform.Get("/withdrawals", s.handleFind)
	platform.Get("/withdrawals/:withdrawal_id", s.handleGet)
	platform.Get("/users/:external_user_id/withdrawals", s.handleList)
	admin.Get("/withdrawals", s.handleAdminList)
	admin.Get("/withdrawals/:id", s.handleAdminGet)
	admin.Post("/withdrawals/:id/approve", idem, s.handleApprove)
	admin.Post("/withdrawals/:id/reject", idem, s.handleReject)
	admin.Post("/withdrawals/:id/release", idem, s.handleRelease)
	admin.Post("/withdrawals/:id/mark-broadcast", idem, s.handleMarkBroadcast)
}

// The request bodies. openapi.json states their fields, types and lengths
// (httpapi.Validator); the handlers check only what it cannot say.
type createRequest struct {
	// Exactly one of the two (ledger.OwnerOf); the schema says each one's form.
	ExternalUserID  *string `json:"external_user_id"`
	PlatformAccount *string `json:"platform_account"`
	Asset           string  `json:"asset"`
	Amount          string  `json:"amount"`
	Destination     string  `json:"destination_address"`
	// The schemas Metadata and ClientReference say their shapes; Check
	// says the rest (the length of the keys, storable text).
	Metadata        metadata.Metadata `json:"metadata"`
	ClientReference *string           `json:"client_reference"`
}

func (s *Service) handleCreate(c *fiber.Ctx) error {
	var req createRequest
	if err := httpapi.Bind(c, &req); err != nil {
		return err
	}
	n, err := money.ParseUnits(req.Amount, true)
	switch {
	case err != nil:
		return fault.Validation(fault.FieldError{Loc: []any{"body", "amount"}, Type: "value_error", Msg: "amount " + err.Error(), Input: req.Amount})
	case n > MaxAmount:
		return fault.Validation(fault.FieldError{Loc: []any{"body", "amount"}, Type: "less_than_equal",
			Msg: fmt.Sprintf("amount must be at most %d smallest units", MaxAmount), Input: req.Amount})
	}
	user, platform, err := ledger.OwnerOf(req.ExternalUserID, req.PlatformAccount)
	if err != nil {
		return err
	}
	if err := req.Metadata.Check("body", "metadata"); err != nil {
		return err
	}
	p := CreateParams{ExternalUserID: user, PlatformAccount: platform, Asset: req.Asset, Amount: n, Destination: req.Destination,
		Metadata: req.Metadata, ClientReference: req.ClientReference}
	return httpapi.Mutate(c, fiber.StatusCreated, func(ctx context.Context, rec httpapi.Completer, key string) ([]byte, error) {
		p.IdempotencyKey = key
		_, body, err := s.Create(ctx, p, rec)
		return body, err
	})
}

// idParam reads a path's withdrawal id; anything that is not one is an
// unknown withdrawal (404).
func idParam(c *fiber.Ctx, name string) (uuid.UUID, error) {
	id, err := uuid.Parse(httpapi.Param(c, name))
	if err != nil {
		return uuid.Nil, ErrNotFound
	}
	return id, nil
}

func (s *Service) handleGet(c *fiber.Ctx) error {
	return getOne(c, s, "withdrawal_id", s.Views)
}

// getOne answers the withdrawal named by the path parameter param,
// rendered by render (the platform's view or the admin's), read from the
// primary.
func getOne[V any](c *fiber.Ctx, s *Service, param string, render func(context.Context, []Withdrawal) ([]V, error)) error {
	id, err := idParam(c, param)
	if err != nil {
		return err
	}
	ctx := c.UserContext()
	w, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	vs, err := render(ctx, []Withdrawal{w})
	if err != nil {
		return err
	}
	return c.JSON(vs[0])
}

// handleFind answers GET /withdrawals?client_reference=: the withdrawal
// the platform gave that reference, in the list's shape (one or none,
// never a next page). The document requires the parameter and refuses any
// other. It reads the primary, so a withdrawal just created is found.
func (s *Service) handleFind(c *fiber.Ctx) error {
	ctx := c.UserContext()
	out := ListView{Withdrawals: []View{}}
	w, ok, err := withdrawalByClientReference(ctx, s.DB, c.Query("client_reference"))
	if err != nil {
		return err
	}
	if ok {
		if out.Withdrawals, err = s.Views(ctx, []Withdrawal{w}); err != nil {
			return err
		}
	}
	return c.JSON(out)
}

// ListView is the API's withdrawal list.
type ListView struct {
	Withdrawals []View  `json:"withdrawals"`
	NextCursor  *string `json:"next_cursor"`
}

// AdminListView is the API's admin withdrawal list.
type AdminListView struct {
	Withdrawals []AdminView `json:"withdrawals"`
	NextCursor  *string     `json:"next_cursor"`
}

func (s *Service) handleList(c *fiber.Ctx) error {
	user := httpapi.Param(c, "external_user_id")
	return httpapi.SendPage(c, s.lists(), DefaultListLimit,
		func(ctx context.Context, idb bun.IDB, at httpapi.PageAt) ([]Withdrawal, *uuid.UUID, error) {
			return list(ctx, idb, ListParams{ExternalUserID: user, Cursor: at.Cursor, Limit: at.Limit})
		}, views, func(vs []View, next *string) any { return ListView{Withdrawals: vs, NextCursor: next} })
}

func (s *Service) handleAdminList(c *fiber.Ctx) error {
	status := Status(c.Query("status"))
	return httpapi.SendPage(c, s.lists(), DefaultAdminLimit,
		func(ctx context.Context, idb bun.IDB, at httpapi.PageAt) ([]Withdrawal, *uuid.UUID, error) {
			return adminList(ctx, idb, AdminListParams{Status: status, Cursor: at.Cursor, Limit: at.Limit})
		}, s.adminViews, func(vs []AdminView, next *string) any { return AdminListView{Withdrawals: vs, NextCursor: next} })
}

// handleAdminGet answers GET /admin/withdrawals/{id}: the admin view, with
// the approvals and their signatures verified, read from the primary.
func (s *Service) handleAdminGet(c *fiber.Ctx) error {
	return getOne(c, s, "id", s.AdminViews)
}

// lists is where the two lists read (the replica).
func (s *Service) lists() httpapi.Lists {
	return httpapi.Lists{Replica: s.Replica, Primary: s.DB, BadCursor: ErrBadCursor}
}

type decideRequest struct {
	Note        *string `json:"note"`
	Reason      *string `json:"reason"`
	Attestation *string `json:"attestation"`
	Txid        *string `json:"txid"`
}

// decide answers an operator decision: it reads the path's withdrawal, the
// body (which may be empty for approve and reject: {} is implied) and the
// operator's signature (Svc-Operator-Signature, optional), then runs the
// decision with the request's Idempotency-Key.
func decide(c *fiber.Ctx, run func(context.Context, DecideParams, Completer) ([]byte, error)) error {
	id, err := idParam(c, "id")
	if err != nil {
		return err
	}
	var req decideRequest
	if err := httpapi.Bind(c, &req); err != nil {
		return err
	}
	key, ok := apikey.FromCtx(c)
	if !ok {
		return apikey.ErrMissing
	}
	sig, err := operator.EnvelopeFrom(c)
	if err != nil {
		return err
	}
	p := DecideParams{WithdrawalID: id, Actor: apikey.ActorOf(key), Signature: sig, Note: req.Note, Reason: req.Reason}
	if req.Attestation != nil {
		p.Attestation = *req.Attestation
	}
	if req.Txid != nil {
		p.Txid = *req.Txid
	}
	return httpapi.Mutate(c, fiber.StatusOK, func(ctx context.Context, rec httpapi.Completer, _ string) ([]byte, error) {
		return run(ctx, p, rec)
	})
}

func (s *Service) handleApprove(c *fiber.Ctx) error {
	return decide(c, func(ctx context.Context, p DecideParams, rec Completer) ([]byte, error) {
		_, body, err := s.Approve(ctx, p, rec)
		return body, err
	})
}

func (s *Service) handleReject(c *fiber.Ctx) error {
	return decide(c, func(ctx context.Context, p DecideParams, rec Completer) ([]byte, error) {
		_, body, err := s.Reject(ctx, p, rec)
		return body, err
	})
}

func (s *Service) handleRelease(c *fiber.Ctx) error {
	return decide(c, func(ctx context.Context, p DecideParams, rec Completer) ([]byte, error) {
		_, body, err := s.Release(ctx, p, rec) // attestation: required by the document
		return body, err
	})
}

func (s *Service) handleMarkBroadcast(c *fiber.Ctx) error {
	return decide(c, func(ctx context.Context, p DecideParams, rec Completer) ([]byte, error) {
		_, body, err := s.MarkBroadcast(ctx, p, rec) // txid: required by the document
		return body, err
	})
}

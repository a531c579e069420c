package deposit

import (
	"context"
	"fmt"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/apikey"
	"svc/modules/asset"
	"svc/modules/ledger"
	"svc/modules/operator"
	"svc/platform/fault"
	"svc/platform/httpapi"
	"svc/platform/metadata"
	"svc/platform/money"
)

// maxExpected bounds a deposit's expected_amount, in smallest units, per
// asset: bitcoin's total supply (21,000,000 BTC) for BTC and BTC_LN, which
// no payment can exceed; for USDT_TRC20, whose supply has no fixed limit,
// one billion USDT, the operational maximum a withdrawal's amount has too
// (withdrawal.MaxAmount). docs/deposits.md and openapi.json state them.
var maxExpected = map[string]int64{
	asset.BTC:       2_100_000_000_000_000,
	asset.BTCLN:     2_100_000_000_000_000,
	asset.USDTTRC20: 1_000_000_000_000_000,
}

// MaxExpectedAmount is the largest expected_amount of an asset, in
// smallest units; false for an asset the service does not have.
func MaxExpectedAmount(code string) (int64, bool) {
	n, ok := maxExpected[code]
	return n, ok
}

// Routes registers the platform routes on the /v1 router (readwrite) and
// the operator routes on the /v1/admin router; idem is the Idempotency-Key
// middleware of the mutating routes. The lists (replica) read
// Service.Replica, which may lag the primary; the rest read the primary.
//
//	POST /deposits                                   201 Deposit
//	GET  /deposits?client_reference=                 {deposits, next_cursor}: the one deposit with it, or none
//	GET  /deposits/{deposit_id}                      Deposit
//	GET  /deposits/{deposit_id}/address-history      Address history
//	GET  /users/{external_user_id}/deposits          {deposits, next_cursor} (replica)
//	GET  /admin/deposits/review?limit=               {deposits}, oldest first (replica)
//	POST /admin/deposits/{deposit_id}/resolve        {deposit, credited}, signed (ResolveExpect; the Svc-Operator-Signature header)
//	GET  /admin/wallet-alerts?limit=                 {alerts}, newest first (replica)
func (s *Service) Routes(platform, admin fiber.Router, idem fiber.Handler) {
	platform.Post("/deposits", idem, s.handleCreate)
	platform.Get("/deposits", s.handleFind)
	platform.Get("/deposits/:deposit_id", s.handleGet)
	platform.Get("/deposits/:deposit_id/address-history", s.handleHistory)
	platform.Get("/users/:external_user_id/deposits", s.handleList)
	admin.Get("/deposits/review", s.handleReview)
	admin.Post("/deposits/:deposit_id/resolve", idem, s.handleResolve)
	admin.Get("/wallet-alerts", s.handleWalletAlerts)
}

// The request bodies. openapi.json states their fields, types and lengths
// (httpapi.Validator); the handlers check only what it cannot say.
type createRequest struct {
	// Exactly one of the two (ledger.OwnerOf); the schema says each one's form.
	ExternalUserID  *string `json:"external_user_id"`
	PlatformAccount *string `json:"platform_account"`
	Asset           string  `json:"asset"`
	ExpectedAmount  *string `json:"expected_amount"`
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
	user, platform, err := ledger.OwnerOf(req.ExternalUserID, req.PlatformAccount)
	if err != nil {
		return err
	}
	if err := req.Metadata.Check("body", "metadata"); err != nil {
		return err
	}
	p := CreateParams{ExternalUserID: user, PlatformAccount: platform, Asset: req.Asset, Metadata: req.Metadata,
		ClientReference: req.ClientReference}
	if req.ExpectedAmount != nil {
		n, err := expectedAmount(*req.ExpectedAmount, req.Asset)
		if err != nil {
			return err
		}
		p.ExpectedAmount = &n
	}
	return httpapi.Mutate(c, fiber.StatusCreated, func(ctx context.Context, rec httpapi.Completer, key string) ([]byte, error) {
		p.IdempotencyKey = key
		_, body, err := s.Create(ctx, p, rec)
		return body, err
	})
}

// expectedAmount reads expected_amount, whose digits the schema checked:
// at most the asset's bound (an unknown asset has none here: it is a 404
// once the body fits).
func expectedAmount(raw, code string) (int64, error) {
	n, err := money.ParseUnits(raw, true)
	if err != nil {
		return 0, fault.Validation(fault.FieldError{Loc: []any{"body", "expected_amount"}, Type: "value_error", Msg: err.Error(), Input: raw})
	}
	if max, ok := MaxExpectedAmount(code); ok && n > max {
		return 0, fault.Validation(fault.FieldError{Loc: []any{"body", "expected_amount"}, Type: "less_than_equal",
			Msg: fmt.Sprintf("expected_amount must be at most %d smallest units of %s", max, code), Input: raw})
	}
	return n, nil
}

// depositParam reads the path's deposit id; anything that is not one is
// an unknown deposit (404).
func depositParam(c *fiber.Ctx) (uuid.UUID, error) {
	id, err := uuid.Parse(httpapi.Param(c, "deposit_id"))
	if err != nil {
		return uuid.Nil, ErrNotFound
	}
	return id, nil
}

// pathDeposit reads the deposit the path names.
func (s *Service) pathDeposit(c *fiber.Ctx) (Deposit, error) {
	id, err := depositParam(c)
	if err != nil {
		return Deposit{}, err
	}
	return s.Get(c.UserContext(), id)
}

func (s *Service) handleGet(c *fiber.Ctx) error {
	d, err := s.pathDeposit(c)
	if err != nil {
		return err
	}
	v, err := s.ViewOf(c.UserContext(), s.DB, d)
	if err != nil {
		return err
	}
	return c.JSON(v)
}

func (s *Service) handleHistory(c *fiber.Ctx) error {
	d, err := s.pathDeposit(c)
	if err != nil {
		return err
	}
	held, err := s.AddressHistory(c.UserContext(), d)
	if err != nil {
		return err
	}
	return c.JSON(HistoryView(d, held))
}

// ListView is the API's deposit list.
type ListView struct {
	Deposits   []View  `json:"deposits"`
	NextCursor *string `json:"next_cursor"`
}

func (s *Service) handleList(c *fiber.Ctx) error {
	user := httpapi.Param(c, "external_user_id")
	return httpapi.SendPage(c, httpapi.Lists{Replica: s.Replica, Primary: s.DB, BadCursor: ErrBadCursor}, DefaultListLimit,
		func(ctx context.Context, idb bun.IDB, at httpapi.PageAt) ([]Deposit, *uuid.UUID, error) {
			return list(ctx, idb, ListParams{ExternalUserID: user, Cursor: at.Cursor, Limit: at.Limit})
		}, s.Views, func(vs []View, next *string) any { return ListView{Deposits: vs, NextCursor: next} })
}

// handleFind answers GET /deposits?client_reference=: the deposit the
// platform gave that reference, in the list's shape (one or none, never a
// next page). The document requires the parameter and refuses any other.
// It reads the primary, so a deposit just created is found.
func (s *Service) handleFind(c *fiber.Ctx) error {
	ref := c.Query("client_reference")
	ctx := c.UserContext()
	out := ListView{Deposits: []View{}}
	d, ok, err := depositByClientReference(ctx, s.DB, ref)
	if err != nil {
		return err
	}
	if ok {
		if out.Deposits, err = s.Views(ctx, s.DB, []Deposit{d}); err != nil {
			return err
		}
	}
	return c.JSON(out)
}

func (s *Service) handleReview(c *fiber.Ctx) error {
	limit := c.QueryInt("limit", DefaultReviewLimit)
	ctx := c.UserContext()
	var vs []View
	err := s.Replica.Read(ctx, s.DB, func(ctx context.Context, idb bun.IDB) error {
		ds, err := reviewQueue(ctx, idb, limit)
		if err != nil {
			return err
		}
		vs, err = s.Views(ctx, idb, ds)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"deposits": vs})
}

type resolveRequest struct {
	Action    string  `json:"action"`
	PaymentID *string `json:"payment_id"`
}

func (s *Service) handleResolve(c *fiber.Ctx) error {
	id, err := depositParam(c)
	if err != nil {
		return err
	}
	var req resolveRequest
	if err := httpapi.Bind(c, &req); err != nil {
		return err
	}
	actor, err := apikey.ActorFrom(c)
	if err != nil {
		return err
	}
	sig, err := operator.EnvelopeFrom(c)
	if err != nil {
		return err
	}
	p := ResolveParams{DepositID: id, Action: req.Action, PaymentID: req.PaymentID, Actor: actor, Signature: sig}
	return httpapi.Mutate(c, fiber.StatusOK, func(ctx context.Context, rec httpapi.Completer, _ string) ([]byte, error) {
		_, body, err := s.Resolve(ctx, p, rec)
		return body, err
	})
}

func (s *Service) handleWalletAlerts(c *fiber.Ctx) error {
	limit := c.QueryInt("limit", DefaultReviewLimit)
	var alerts []WalletAlertView
	err := s.Replica.Read(c.UserContext(), s.DB, func(ctx context.Context, idb bun.IDB) (err error) {
		alerts, err = walletAlerts(ctx, idb, limit)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"alerts": alerts})
}

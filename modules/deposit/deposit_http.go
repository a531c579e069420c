package deposit

import (
	"context"
	"fmt"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/apikey"
	"svc/modules/asset"
	"svc/platform/fault"
	"svc/platform/httpapi"
	"svc/platform/idempotency"
	"svc/platform/money"
)

// Length limits of the SPEC.
const (
	MaxExternalUserID = 255
	MaxAsset          = 32
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
//	GET  /deposits/{deposit_id}                      Deposit
//	GET  /deposits/{deposit_id}/address-history      Address history
//	GET  /users/{external_user_id}/deposits          {deposits, next_cursor} (replica)
//	GET  /admin/deposits/review?limit=               {deposits}, oldest first (replica)
//	POST /admin/deposits/{deposit_id}/resolve        {deposit, credited}
//	GET  /admin/wallet-alerts?limit=                 {alerts}, newest first (replica)
func (s *Service) Routes(platform, admin fiber.Router, idem fiber.Handler) {
	platform.Post("/deposits", idem, s.handleCreate)
	platform.Get("/deposits/:deposit_id", s.handleGet)
	platform.Get("/deposits/:deposit_id/address-history", s.handleHistory)
	platform.Get("/users/:external_user_id/deposits", s.handleList)
	admin.Get("/deposits/review", s.handleReview)
	admin.Post("/deposits/:deposit_id/resolve", idem, s.handleResolve)
	admin.Get("/wallet-alerts", s.handleWalletAlerts)
}

type createRequest struct {
	ExternalUserID *string `json:"external_user_id"`
	Asset          *string `json:"asset"`
	ExpectedAmount *string `json:"expected_amount"`
}

func (s *Service) handleCreate(c *fiber.Ctx) error {
	var req createRequest
	if err := httpapi.DecodeBody(c, &req); err != nil {
		return err
	}
	var f httpapi.Fields
	if f.Required(req.ExternalUserID != nil, "body", "external_user_id") && f.Storable(*req.ExternalUserID, "body", "external_user_id") {
		f.Length(*req.ExternalUserID, 1, MaxExternalUserID, "body", "external_user_id")
	}
	if f.Required(req.Asset != nil, "body", "asset") && f.Storable(*req.Asset, "body", "asset") {
		f.Length(*req.Asset, 1, MaxAsset, "body", "asset")
	}
	p := CreateParams{}
	if req.ExpectedAmount != nil {
		n, err := money.ParseUnits(*req.ExpectedAmount, true)
		if err != nil {
			f.Add([]any{"body", "expected_amount"}, "value_error", err.Error(), *req.ExpectedAmount)
		} else if max, ok := MaxExpectedAmount(deref(req.Asset)); ok && n > max {
			// An unknown asset has no bound here: it is a 404 once the
			// body fits.
			f.Add([]any{"body", "expected_amount"}, "less_than_equal",
				fmt.Sprintf("expected_amount must be at most %d smallest units of %s", max, *req.Asset), *req.ExpectedAmount)
		}
		p.ExpectedAmount = &n
	}
	if err := f.Err(); err != nil {
		return err
	}
	p.ExternalUserID, p.Asset = *req.ExternalUserID, *req.Asset
	var rec Completer
	if r := idempotency.FromCtx(c); r != nil {
		rec, p.IdempotencyKey = r, r.Key
	}
	_, body, err := s.Create(c.UserContext(), p, rec)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(fiber.StatusCreated).Send(body)
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

func (s *Service) handleGet(c *fiber.Ctx) error {
	id, err := depositParam(c)
	if err != nil {
		return err
	}
	ctx := c.UserContext()
	d, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	v, err := s.ViewOf(ctx, s.DB, d)
	if err != nil {
		return err
	}
	return c.JSON(v)
}

func (s *Service) handleHistory(c *fiber.Ctx) error {
	id, err := depositParam(c)
	if err != nil {
		return err
	}
	ctx := c.UserContext()
	d, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	held, err := s.AddressHistory(ctx, d)
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
	var f httpapi.Fields
	if f.Storable(user, "path", "external_user_id") {
		f.Length(user, 1, MaxExternalUserID, "path", "external_user_id")
	}
	limit, lerr := httpapi.QueryInt(c, "limit", DefaultListLimit, 1, MaxListLimit)
	p := ListParams{ExternalUserID: user, Limit: limit}
	var cerr error
	if raw := c.Query("cursor"); raw != "" || c.Context().QueryArgs().Has("cursor") {
		id, err := uuid.Parse(raw)
		if err != nil {
			cerr = ErrBadCursor
		}
		p.Cursor = &id
	}
	if err := fault.MergeValidation(f.Err(), lerr, cerr); err != nil {
		return err
	}
	ctx := c.UserContext()
	var out ListView
	err := s.Replica.Read(ctx, s.DB, func(ctx context.Context, idb bun.IDB) error {
		ds, next, err := list(ctx, idb, p)
		if err != nil {
			return err
		}
		vs, err := s.Views(ctx, idb, ds)
		out = ListView{Deposits: vs}
		if next != nil {
			n := next.String()
			out.NextCursor = &n
		}
		return err
	}, ErrBadCursor)
	if err != nil {
		return err
	}
	return c.JSON(out)
}

func (s *Service) handleReview(c *fiber.Ctx) error {
	limit, err := httpapi.QueryInt(c, "limit", DefaultReviewLimit, 1, MaxReviewLimit)
	if err := fault.MergeValidation(err, httpapi.OnlyQuery(c, "limit")); err != nil {
		return err
	}
	ctx := c.UserContext()
	var vs []View
	err = s.Replica.Read(ctx, s.DB, func(ctx context.Context, idb bun.IDB) error {
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
	Action    *string `json:"action"`
	PaymentID *string `json:"payment_id"`
}

func (s *Service) handleResolve(c *fiber.Ctx) error {
	id, err := depositParam(c)
	if err != nil {
		return err
	}
	var req resolveRequest
	if err := httpapi.DecodeBody(c, &req); err != nil {
		return err
	}
	var f httpapi.Fields
	if f.Required(req.Action != nil, "body", "action") && *req.Action != ActionCredit && *req.Action != ActionDismiss {
		f.Add([]any{"body", "action"}, "enum", "Input should be 'credit' or 'dismiss'", *req.Action)
	}
	if req.PaymentID != nil {
		f.Storable(*req.PaymentID, "body", "payment_id")
	}
	if err := f.Err(); err != nil {
		return err
	}
	key, ok := apikey.FromCtx(c)
	if !ok {
		return fault.New(fault.Unauthenticated, "missing API key")
	}
	var rec Completer
	if r := idempotency.FromCtx(c); r != nil {
		rec = r
	}
	_, body, err := s.Resolve(c.UserContext(), ResolveParams{DepositID: id, Action: *req.Action, PaymentID: req.PaymentID,
		By: key.ID, Actor: apikey.ActorOf(key)}, rec)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(fiber.StatusOK).Send(body)
}

func (s *Service) handleWalletAlerts(c *fiber.Ctx) error {
	limit, err := httpapi.QueryInt(c, "limit", DefaultReviewLimit, 1, MaxReviewLimit)
	if err := fault.MergeValidation(err, httpapi.OnlyQuery(c, "limit")); err != nil {
		return err
	}
	var alerts []WalletAlertView
	err = s.Replica.Read(c.UserContext(), s.DB, func(ctx context.Context, idb bun.IDB) error {
		alerts, err = walletAlerts(ctx, idb, limit)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"alerts": alerts})
}

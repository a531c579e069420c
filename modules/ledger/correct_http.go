package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/uptrace/bun"

	"svc/modules/apikey"
	"svc/modules/asset"
	"svc/modules/operator"
	"svc/platform/fault"
	"svc/platform/httpapi"
	"svc/platform/idempotency"
	"svc/platform/money"
	"svc/platform/timefmt"
)

// AdminRoutes registers the operator bookings on the admin router
// (/v1/admin, admin scope), which checks requests against openapi.json
// (httpapi.Validator.Router); idem is the Idempotency-Key middleware; ops
// authorizes the bookings (the Svc-Operator-Signature header; a dry run
// needs none):
//
//	POST /ledger/corrections   201 Booking (200 for a dry run or a replay), signed (CorrectionExpect)
//	POST /ledger/transfers     201 Booking (200 for a dry run or a replay), signed (TransferExpect)
func (a *API) AdminRoutes(admin fiber.Router, idem fiber.Handler, ops *operator.Service) {
	admin.Post("/ledger/corrections", idem, func(c *fiber.Ctx) error { return a.handleCorrection(c, ops) })
	admin.Post("/ledger/transfers", idem, func(c *fiber.Ctx) error { return a.handleTransfer(c, ops) })
}

// BookingLineView is the API's BookingLine: amounts and balances in the
// asset's display units, balances in the account's own sense.
type BookingLineView struct {
	Asset          string  `json:"asset"`
	Account        string  `json:"account"`
	ExternalUserID *string `json:"external_user_id"`
	Direction      string  `json:"direction"` // debit or credit
	Amount         string  `json:"amount"`
	BalanceBefore  *string `json:"balance_before"` // null for a replay
	BalanceAfter   *string `json:"balance_after"`
}

// BookingEntryView is one entry of a booking.
type BookingEntryView struct {
	EntryID   *int64  `json:"entry_id"` // null in a dry run
	Kind      string  `json:"kind"`
	Asset     string  `json:"asset"`
	SourceRef string  `json:"source_ref"`
	Memo      string  `json:"memo"`
	CreatedAt *string `json:"created_at"`
}

// BookingView is the API's Booking.
type BookingView struct {
	DryRun   bool               `json:"dry_run"`
	Replayed bool               `json:"replayed"`
	Entries  []BookingEntryView `json:"entries"`
	Lines    []BookingLineView  `json:"lines"`
	AuditID  *int64             `json:"audit_id"`
}

// ViewOf renders a booking with the assets' display units (decimals by
// asset code).
func ViewOf(b Booked, decimals map[string]int, dryRun bool) BookingView {
	v := BookingView{DryRun: dryRun, Replayed: b.Replayed(), Entries: []BookingEntryView{}, Lines: []BookingLineView{}}
	for i, e := range b.Entries {
		ev := BookingEntryView{Kind: string(e.Kind), Asset: e.Asset, SourceRef: e.SourceRef, Memo: e.Memo}
		if i < len(b.Posted) {
			id, at := b.Posted[i].ID, timefmt.Format(b.Posted[i].CreatedAt)
			ev.EntryID, ev.CreatedAt = &id, &at
		}
		v.Entries = append(v.Entries, ev)
	}
	for _, l := range b.Lines {
		d := decimals[l.Asset]
		amount, dir := l.Amount, "credit"
		if amount < 0 {
			amount, dir = -amount, "debit"
		}
		lv := BookingLineView{Asset: l.Asset, Account: string(l.Account.Kind), Direction: dir, Amount: money.Format(amount, d)}
		if l.Account.Owner != "" {
			o := l.Account.Owner
			lv.ExternalUserID = &o
		}
		if !v.Replayed {
			before, after := money.Format(l.Before, d), money.Format(l.After, d)
			lv.BalanceBefore, lv.BalanceAfter = &before, &after
		}
		v.Lines = append(v.Lines, lv)
	}
	if b.AuditID != 0 {
		id := b.AuditID
		v.AuditID = &id
	}
	return v
}

// The bodies as openapi.json describes them (CorrectionRequest,
// TransferRequest): the admin router checks them against it
// (httpapi.Bind), so a required field is present and of its type, an
// account and a direction are one of their enum, and an amount is 1 to 19
// digits. The rest is the booking's own policy (OperatorCorrection,
// CustodyTransfer).
type correctionLineRequest struct {
	Account        string  `json:"account"`
	ExternalUserID *string `json:"external_user_id"`
	Direction      string  `json:"direction"`
	Amount         string  `json:"amount"`
}

type correctionRequest struct {
	Asset     string                  `json:"asset"`
	Memo      string                  `json:"memo"`
	Reference *string                 `json:"reference"`
	DryRun    *bool                   `json:"dry_run"`
	Lines     []correctionLineRequest `json:"lines"`
}

type transferRequest struct {
	From       string  `json:"from"`
	To         string  `json:"to"`
	Amount     string  `json:"amount"`
	NetworkFee *string `json:"network_fee"`
	Reference  string  `json:"reference"`
	Memo       string  `json:"memo"`
	DryRun     *bool   `json:"dry_run"`
}

// units reads an amount of 1 to 19 digits (the document's pattern): what
// is left to refuse is zero, where the amount must be positive, and a
// number past int64.
func units(f *httpapi.Fields, s string, positive bool, loc ...any) int64 {
	n, err := money.ParseUnits(s, positive)
	if err != nil {
		f.Add(loc, "value_error", "amount "+err.Error(), s)
	}
	return n
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (a *API) handleCorrection(c *fiber.Ctx, ops *operator.Service) error {
	var req correctionRequest
	if err := httpapi.Bind(c, &req); err != nil {
		return err
	}
	var f httpapi.Fields
	p := OperatorCorrection{Asset: req.Asset, Memo: req.Memo, Reference: deref(req.Reference)}
	for i, l := range req.Lines {
		sign := int64(1)
		if l.Direction == "debit" {
			sign = -1
		}
		p.Lines = append(p.Lines, Line{Account: Account{Kind: AccountKind(l.Account), Owner: deref(l.ExternalUserID)},
			Amount: sign * units(&f, l.Amount, true, "body", "lines", i, "amount")})
	}
	if err := f.Err(); err != nil {
		return err
	}
	actor, err := apikey.ActorFrom(c)
	if err != nil {
		return err
	}
	if p.Signature, err = operator.EnvelopeFrom(c); err != nil {
		return err
	}
	p.Actor = actor
	dry := req.DryRun != nil && *req.DryRun
	return a.respond(c, dry, []string{p.Asset},
		func(ctx context.Context) (Booked, error) { return PreviewCorrection(ctx, a.DB, p) },
		func(ctx context.Context, then func(ctx context.Context, tx bun.IDB, b Booked) error) (Booked, error) {
			return BookCorrection(ctx, a.DB, ops, a.now(), p, then)
		})
}

func (a *API) handleTransfer(c *fiber.Ctx, ops *operator.Service) error {
	var req transferRequest
	if err := httpapi.Bind(c, &req); err != nil {
		return err
	}
	var f httpapi.Fields
	t := CustodyTransfer{From: req.From, To: req.To, Amount: units(&f, req.Amount, true, "body", "amount"),
		Reference: req.Reference, Memo: req.Memo}
	if req.NetworkFee != nil {
		t.NetworkFee = units(&f, *req.NetworkFee, false, "body", "network_fee")
	}
	if err := f.Err(); err != nil {
		return err
	}
	actor, err := apikey.ActorFrom(c)
	if err != nil {
		return err
	}
	if t.Signature, err = operator.EnvelopeFrom(c); err != nil {
		return err
	}
	t.Actor = actor
	dry := req.DryRun != nil && *req.DryRun
	return a.respond(c, dry, []string{t.From, t.To},
		func(ctx context.Context) (Booked, error) { return PreviewTransfer(ctx, a.DB, t) },
		func(ctx context.Context, then func(ctx context.Context, tx bun.IDB, b Booked) error) (Booked, error) {
			return BookTransfer(ctx, a.DB, ops, a.now(), t, then)
		})
}

// ErrBookingTakenOver: a retry with the same Idempotency-Key took the
// request over; this attempt booked nothing.
var ErrBookingTakenOver = fault.New(fault.Conflict, "this request was taken over by a retry with the same Idempotency-Key").WithRetryAfter(time.Second)

// respond runs a dry run (preview) or the booking (book), completing the
// Idempotency-Key in the booking's transaction.
func (a *API) respond(c *fiber.Ctx, dry bool, codes []string, preview func(ctx context.Context) (Booked, error),
	book func(ctx context.Context, then func(ctx context.Context, tx bun.IDB, b Booked) error) (Booked, error)) error {
	ctx := c.UserContext()
	decimals := map[string]int{}
	for _, code := range codes {
		x, err := (&asset.Store{DB: a.DB}).Get(ctx, code)
		if errors.Is(err, asset.ErrUnknown) {
			continue // the booking's own check names it
		}
		if err != nil {
			return err
		}
		decimals[code] = x.Decimals
	}
	if dry {
		b, err := preview(ctx)
		if err != nil {
			return err
		}
		return c.Status(http.StatusOK).JSON(ViewOf(b, decimals, true))
	}
	rec := idempotency.FromCtx(c)
	var body []byte
	status := http.StatusCreated
	_, err := book(ctx, func(ctx context.Context, tx bun.IDB, b Booked) error {
		if b.Replayed() {
			status = http.StatusOK
		}
		var err error
		if body, err = json.Marshal(ViewOf(b, decimals, false)); err != nil {
			return err
		}
		if rec == nil {
			return nil
		}
		return rec.CompleteTx(ctx, tx, status, fiber.MIMEApplicationJSON, body)
	})
	if errors.Is(err, idempotency.ErrLost) {
		return ErrBookingTakenOver
	}
	if err != nil {
		return err
	}
	idempotency.MarkCompleted(rec)
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(status).Send(body)
}

func (a *API) now() time.Time {
	if a.Now == nil {
		return time.Now()
	}
	return a.Now()
}

package ledger

import (
	"context"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/platform/db"
	"svc/platform/httpapi"
	"svc/platform/timefmt"
)

// API serves a user's balances and transaction history.
type API struct {
	DB bun.IDB
	// Replica serves the transaction history, whose answer may lag the
	// primary by up to DATABASE_READ_MAX_LAG; balances always read DB
	// (docs/operations.md, "Reads from a replica"). Nil reads DB.
	Replica *db.Replica
	// Now is the clock of the operator bookings' audit records (nil:
	// time.Now).
	Now func() time.Time
}

// Routes registers, on the platform router (/v1, readwrite):
//
//	GET /users/{external_user_id}/balances
//	GET /users/{external_user_id}/transactions?asset=&limit=&cursor=
//
// limit defaults to 50 (DefaultTransactionsLimit) and may be 1 to 200
// (MaxTransactionsLimit); cursor is the next_cursor of the previous page, a
// posting_id. Bad values are 422 field errors, found by r, which checks
// requests against openapi.json (httpapi.Validator.Router); an unknown
// asset is 404.
// Balances always read the primary (DB); the history may read the replica
// (API.Replica) and lag it by up to DATABASE_READ_MAX_LAG.
func (a *API) Routes(r fiber.Router) {
	r.Get("/users/:external_user_id/balances", a.balances)
	r.Get("/users/:external_user_id/transactions", a.transactions)
}

// BalanceView is the API's Balance: decimal strings in display units.
type BalanceView struct {
	Asset     string `json:"asset"`
	Available string `json:"available"`
	Held      string `json:"held"`
	Total     string `json:"total"`
}

// BalancesView is the API's BalancesResponse.
type BalancesView struct {
	ExternalUserID string        `json:"external_user_id"`
	Balances       []BalanceView `json:"balances"`
}

// TransactionView is the API's Ledger transaction.
type TransactionView struct {
	PostingID int64   `json:"posting_id"`
	EntryID   int64   `json:"entry_id"`
	Kind      string  `json:"kind"`
	Asset     string  `json:"asset"`
	Account   string  `json:"account"`
	Amount    string  `json:"amount"`    // never negative; Direction is the sign
	Direction string  `json:"direction"` // credit or debit, from the user's point of view
	SourceRef *string `json:"source_ref"`
	Memo      *string `json:"memo"`
	CreatedAt string  `json:"created_at"`
}

// TransactionsView is the API's transaction list.
type TransactionsView struct {
	Transactions []TransactionView `json:"transactions"`
	NextCursor   *int64            `json:"next_cursor"`
}

func (a *API) balances(c *fiber.Ctx) error {
	user := httpapi.Param(c, "external_user_id")
	list, err := Balances(c.UserContext(), a.DB, user)
	if err != nil {
		return err
	}
	out := BalancesView{ExternalUserID: user, Balances: make([]BalanceView, len(list))}
	for i, b := range list {
		out.Balances[i] = BalanceView{Asset: b.Asset, Available: b.Format(b.Available),
			Held: b.Format(b.Held), Total: b.Format(b.Total())}
	}
	return c.JSON(out)
}

func (a *API) transactions(c *fiber.Ctx) error {
	user := httpapi.Param(c, "external_user_id")
	limit := c.QueryInt("limit", DefaultTransactionsLimit)
	cursor := int64(c.QueryInt("cursor", 0))
	code := string(c.Context().QueryArgs().Peek("asset")) // a copy: fiber reuses its buffers
	ctx := c.UserContext()
	var (
		page []Transaction
		next *int64
		all  []asset.Asset
	)
	err := a.Replica.Read(ctx, a.DB, func(ctx context.Context, idb bun.IDB) error {
		var err error
		page, next, err = Transactions(ctx, idb, TransactionsQuery{ExternalUserID: user, Asset: code, Cursor: cursor, Limit: limit})
		if err != nil {
			return err
		}
		all, err = (&asset.Store{DB: idb}).All(ctx)
		return err
	})
	if err != nil {
		return err
	}
	assets := make(map[string]asset.Asset, len(all))
	for _, x := range all {
		assets[x.Code] = x
	}
	out := TransactionsView{Transactions: make([]TransactionView, len(page)), NextCursor: next}
	for i, t := range page {
		amount, dir := t.Amount, "credit"
		if amount < 0 {
			amount, dir = -amount, "debit"
		}
		out.Transactions[i] = TransactionView{PostingID: t.PostingID, EntryID: t.EntryID, Kind: string(t.Kind), Asset: t.Asset,
			Account: string(t.Account), Amount: assets[t.Asset].Format(amount), Direction: dir,
			SourceRef: optional(t.SourceRef), Memo: optional(t.Memo), CreatedAt: timefmt.Format(t.CreatedAt)}
	}
	return c.JSON(out)
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

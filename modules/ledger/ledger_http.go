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
//
// and the same of the platform accounts, with their list:
//
//	GET /platform-accounts?limit=&cursor=
//	GET /platform-accounts/{platform_account}/balances
//	GET /platform-accounts/{platform_account}/transactions?asset=&limit=&cursor=
func (a *API) Routes(r fiber.Router) {
	r.Get("/users/:external_user_id/balances", a.balances)
	r.Get("/users/:external_user_id/transactions", a.transactions)
	r.Get("/platform-accounts", a.platformAccounts)
	r.Get("/platform-accounts/:platform_account/balances", a.balances)
	r.Get("/platform-accounts/:platform_account/transactions", a.transactions)
}

// holder is the user or the platform account a route names.
func holder(c *fiber.Ctx) Holder {
	if name := httpapi.Param(c, "platform_account"); name != "" {
		return PlatformHolder(name)
	}
	return UserHolder(httpapi.Param(c, "external_user_id"))
}

// BalanceView is the API's Balance: decimal strings in display units.
type BalanceView struct {
	Asset     string `json:"asset"`
	Available string `json:"available"`
	Held      string `json:"held"`
	Reserved  string `json:"reserved"`
	Total     string `json:"total"`
}

func balanceViews(list []Balance) []BalanceView {
	out := make([]BalanceView, len(list))
	for i, b := range list {
		out[i] = BalanceView{Asset: b.Asset, Available: b.Format(b.Available), Held: b.Format(b.Held),
			Reserved: b.Format(b.Reserved), Total: b.Format(b.Total())}
	}
	return out
}

// BalancesView is the API's BalancesResponse, or PlatformBalancesResponse
// (PlatformAccount set instead of ExternalUserID).
type BalancesView struct {
	ExternalUserID  string        `json:"external_user_id,omitempty"`
	PlatformAccount string        `json:"platform_account,omitempty"`
	Balances        []BalanceView `json:"balances"`
}

// PlatformAccountView is the API's PlatformAccount.
type PlatformAccountView struct {
	PlatformAccount string        `json:"platform_account"`
	Balances        []BalanceView `json:"balances"`
}

// PlatformAccountsView is the API's PlatformAccountList.
type PlatformAccountsView struct {
	PlatformAccounts []PlatformAccountView `json:"platform_accounts"`
	NextCursor       *string               `json:"next_cursor"`
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
	h := holder(c)
	list, err := HolderBalances(c.UserContext(), a.DB, h)
	if err != nil {
		return err
	}
	out := BalancesView{Balances: balanceViews(list)}
	if h.Platform {
		out.PlatformAccount = h.ID
	} else {
		out.ExternalUserID = h.ID
	}
	return c.JSON(out)
}

func (a *API) platformAccounts(c *fiber.Ctx) error {
	limit := c.QueryInt("limit", DefaultPlatformAccountsLimit)
	cursor := string(c.Context().QueryArgs().Peek("cursor")) // a copy: fiber reuses its buffers
	list, next, err := PlatformAccounts(c.UserContext(), a.DB, cursor, limit)
	if err != nil {
		return err
	}
	out := PlatformAccountsView{PlatformAccounts: make([]PlatformAccountView, len(list)), NextCursor: next}
	for i, p := range list {
		out.PlatformAccounts[i] = PlatformAccountView{PlatformAccount: p.Name, Balances: balanceViews(p.Balances)}
	}
	return c.JSON(out)
}

func (a *API) transactions(c *fiber.Ctx) error {
	h := holder(c)
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
		page, next, err = Transactions(ctx, idb, TransactionsQuery{ExternalUserID: h.ID, Platform: h.Platform, Asset: code, Cursor: cursor, Limit: limit})
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

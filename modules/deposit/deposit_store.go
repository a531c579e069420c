package deposit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/schema"

	"svc/modules/asset"
	"svc/platform/db"
	"svc/platform/fault"
)

// Get returns one deposit; ErrNotFound when there is none.
func (s *Service) Get(ctx context.Context, id uuid.UUID) (Deposit, error) {
	return getDeposit(ctx, s.DB, id, false)
}

// getDeposit reads deposit id, and locks it until idb's transaction ends
// when lock is set; real parameters (db.GetModel): every webhook, poll and
// creation reads it.
func getDeposit(ctx context.Context, idb bun.IDB, id uuid.UUID, lock bool) (Deposit, error) {
	var d Deposit
	if err := db.Found(db.GetByID(ctx, idb, &d, id, lock), ErrNotFound, "read deposit %s", id); err != nil {
		return Deposit{}, err
	}
	return d, nil
}

// lockDeposit reads the deposit and locks its row until tx ends: every
// change of a deposit (reconcile, resolve, creation's outcome) holds it, so
// concurrent webhooks, polls and operators are applied one at a time.
func lockDeposit(ctx context.Context, tx bun.Tx, id uuid.UUID) (Deposit, error) {
	return getDeposit(ctx, tx, id, true)
}

// lockedWithAsset is a deposit's row as lockWithAsset reads it: the
// deposit's columns, then its asset's prefixed asset__.
type lockedWithAsset struct {
	Deposit `bun:",extend"`
	Asset   asset.Asset `bun:"embed:asset__"`
}

// lockWithAsset is lockDeposit that also reads the deposit's asset, in the
// same statement: a reconcile needs both, and they were a statement each.
//
// The asset's row is read as the statement's snapshot has it, taken
// before the statement waits for the deposit's lock; that is no weaker
// than a read after the lock, as the deposit's lock does not hold the
// asset's row (an operator's change of it can commit at any time). A
// deposit's payments are another matter: whoever holds the deposit's lock
// may change them, so they are read by a statement after this one, whose
// snapshot sees what the last holder committed
// (TestReconcileWaitingForTheLockSeesThePaymentsOfItsHolder).
func lockWithAsset(ctx context.Context, tx bun.Tx, id uuid.UUID) (Deposit, asset.Asset, error) {
	var row lockedWithAsset
	err := db.QueryModel(ctx, tx, &row, lockWithAssetQuery(tx), id)
	if err := db.Found(err, ErrNotFound, "read deposit %s", id); err != nil {
		return Deposit{}, asset.Asset{}, err
	}
	return row.Deposit, row.Asset, nil
}

// lockWithAssetQuery is lockWithAsset's statement, written once: the
// columns named, as db.Columns says why.
var lockWithAssetQuery = func() func(idb bun.IDB) string {
	var (
		once sync.Once
		q    string
	)
	return func(idb bun.IDB) string {
		once.Do(func() {
			var cols []string
			for _, c := range strings.Split(db.Columns(idb, (*Deposit)(nil)), ", ") {
				cols = append(cols, "deposit."+c)
			}
			for _, c := range strings.Split(db.Columns(idb, (*asset.Asset)(nil)), ", ") {
				cols = append(cols, "asset."+c+` AS "asset__`+strings.Trim(c, `"`)+`"`)
			}
			q = "SELECT " + strings.Join(cols, ", ") + ` FROM deposits AS deposit JOIN assets AS asset ON asset.asset = deposit.asset
 WHERE deposit.id = $1 FOR UPDATE OF deposit`
		})
		return q
	}
}()

func depositByKey(ctx context.Context, idb bun.IDB, key string) (Deposit, bool, error) {
	var d Deposit
	err := db.GetModel(ctx, idb, &d, "WHERE idempotency_key = $1", key)
	if db.IsNoRows(err) {
		return Deposit{}, false, nil
	}
	if err != nil {
		return Deposit{}, false, fmt.Errorf("read deposit by idempotency key: %w", err)
	}
	return d, true, nil
}

// depositByClientReference finds the deposit the platform gave ref.
func depositByClientReference(ctx context.Context, idb bun.IDB, ref string) (Deposit, bool, error) {
	var d Deposit
	err := db.GetModel(ctx, idb, &d, "WHERE client_reference = $1", ref)
	if db.IsNoRows(err) {
		return Deposit{}, false, nil
	}
	if err != nil {
		return Deposit{}, false, fmt.Errorf("read deposit by client reference: %w", err)
	}
	return d, true, nil
}

func depositByInvoice(ctx context.Context, idb bun.IDB, invoiceID string) (Deposit, bool, error) {
	var d Deposit
	err := idb.NewSelect().Model(&d).Where("invoice_id = ?", invoiceID).Scan(ctx)
	if db.IsNoRows(err) {
		return Deposit{}, false, nil
	}
	if err != nil {
		return Deposit{}, false, fmt.Errorf("read deposit by invoice: %w", err)
	}
	return d, true, nil
}

// payments returns the payments of the given deposits, oldest first; real
// parameters (db.GetModels), one statement shape whatever the number of
// deposits: every reconcile read them.
func payments(ctx context.Context, idb bun.IDB, ids ...uuid.UUID) (map[uuid.UUID][]Payment, error) {
	out := make(map[uuid.UUID][]Payment, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	text := make([]string, len(ids))
	for i, id := range ids {
		text[i] = id.String()
	}
	var rows []Payment
	if err := db.GetModels(ctx, idb, &rows, "WHERE deposit_id = ANY($1::uuid[]) ORDER BY deposit_id, received_at, id", text); err != nil {
		return nil, fmt.Errorf("read deposit payments: %w", err)
	}
	for _, p := range rows {
		out[p.DepositID] = append(out[p.DepositID], p)
	}
	return out, nil
}

// paymentsAndClashes returns the payments of deposit id, oldest first, and
// for each of reported (the processor's payment ids) recorded under
// another deposit, that deposit: one statement, where a reconcile read the
// payments and then learnt of a clash from its insert's conflict.
func paymentsAndClashes(ctx context.Context, tx bun.Tx, id uuid.UUID, reported []string) ([]Payment, map[string]uuid.UUID, error) {
	var all []Payment
	if err := db.GetModels(ctx, tx, &all, "WHERE deposit_id = $1 OR payment_id = ANY($2) ORDER BY received_at, id", id, reported); err != nil {
		return nil, nil, fmt.Errorf("read the payments of deposit %s: %w", id, err)
	}
	var (
		own       = all[:0]
		elsewhere map[string]uuid.UUID
	)
	for _, p := range all {
		if p.DepositID == id {
			own = append(own, p)
			continue
		}
		if elsewhere == nil {
			elsewhere = map[string]uuid.UUID{}
		}
		elsewhere[p.PaymentID] = p.DepositID
	}
	return own, elsewhere, nil
}

// credited sums the credited payments.
// hasMarkedCredit reports whether an operator credited the value of an
// invoice marked settled by hand (which stands in for its payments).
func hasMarkedCredit(ps []Payment) bool {
	for _, p := range ps {
		if p.Credited && strings.HasPrefix(p.PaymentID, markedPrefix) {
			return true
		}
	}
	return false
}

func credited(ps []Payment) int64 {
	var sum int64
	for _, p := range ps {
		if p.Credited && p.Units != nil {
			sum += *p.Units
		}
	}
	return sum
}

// ListParams page a user's deposits.
type ListParams struct {
	ExternalUserID string
	Cursor         *uuid.UUID // the last deposit of the previous page
	Limit          int
}

// Page limits of the user list (openapi.json DepositsLimit).
const (
	DefaultListLimit = 25
	MaxListLimit     = 100
)

// ErrBadCursor: the cursor is not one of the user's deposits.
var ErrBadCursor = fault.Validation(fault.FieldError{Loc: []any{"query", "cursor"}, Type: "value_error",
	Msg: "cursor must be the next_cursor of a previous page: a deposit_id of this user"})

// List returns a page of the user's deposits, newest first, keyset-paginated
// on (created_at, id) so that inserts never shift a page; next is the
// cursor of the following page, nil on the last.
func (s *Service) List(ctx context.Context, p ListParams) ([]Deposit, *uuid.UUID, error) {
	return list(ctx, s.DB, p)
}

func list(ctx context.Context, idb bun.IDB, p ListParams) ([]Deposit, *uuid.UUID, error) {
	if p.Limit <= 0 {
		p.Limit = DefaultListLimit
	}
	q := idb.NewSelect().Model((*Deposit)(nil)).Where("external_user_id = ?", p.ExternalUserID)
	if p.Cursor != nil {
		var at time.Time
		err := idb.NewSelect().Model((*Deposit)(nil)).Column("created_at").
			Where("id = ? AND external_user_id = ?", *p.Cursor, p.ExternalUserID).Scan(ctx, &at)
		if db.IsNoRows(err) {
			return nil, nil, ErrBadCursor
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read deposit cursor: %w", err)
		}
		q = q.Where("(created_at, id) < (?, ?)", at, *p.Cursor)
	}
	var out []Deposit
	if err := q.OrderExpr("created_at DESC, id DESC").Limit(int64(p.Limit+1)).Scan(ctx, &out); err != nil {
		return nil, nil, fmt.Errorf("list deposits: %w", err)
	}
	out, next := db.Page(out, p.Limit, func(d Deposit) uuid.UUID { return d.ID })
	return out, next, nil
}

// Review limits (SPEC: admin review limit default 50, 1 to 200).
const (
	DefaultReviewLimit = 50
	MaxReviewLimit     = 200
)

// ReviewQueue returns the deposits in review, oldest first (by the time
// they entered review).
func (s *Service) ReviewQueue(ctx context.Context, limit int) ([]Deposit, error) {
	return reviewQueue(ctx, s.DB, limit)
}

func reviewQueue(ctx context.Context, idb bun.IDB, limit int) ([]Deposit, error) {
	if limit <= 0 {
		limit = DefaultReviewLimit
	}
	out := []Deposit{}
	if err := idb.NewSelect().Model(&out).Where("status = ?", StatusReview).
		OrderExpr("review_at, id").Limit(int64(limit)).Scan(ctx); err != nil {
		return nil, fmt.Errorf("list review queue: %w", err)
	}
	return out, nil
}

// AddressHistory returns every deposit that has held d's address, oldest
// first; d alone when it has no address.
func (s *Service) AddressHistory(ctx context.Context, d Deposit) ([]Deposit, error) {
	if d.Address == nil {
		return []Deposit{d}, nil
	}
	var out []Deposit
	if err := s.DB.NewSelect().Model(&out).Where("address = ?", *d.Address).
		OrderExpr("COALESCE(address_reserved_from, created_at), id").Scan(ctx); err != nil {
		return nil, fmt.Errorf("address history: %w", err)
	}
	return out, nil
}

// IssuedExpr is IsDepositAddress as a boolean SQL expression, for a caller
// that reads it with other things in one statement.
func IssuedExpr(addresses ...string) schema.QueryWithArgs {
	return bun.SafeQuery("EXISTS (SELECT 1 FROM deposits WHERE address = ANY(?))", pgdialect.Array(addresses))
}

// IsDepositAddress reports whether any of addresses was ever issued for a
// deposit (withdrawals refuse the service's own deposit addresses). Every
// withdrawal request asks, so it is one statement with a real parameter
// (see db.Querier), whatever the number of spellings asked about.
func IsDepositAddress(ctx context.Context, idb bun.IDB, addresses ...string) (bool, error) {
	q, err := db.SQLOf(idb)
	if err != nil {
		return false, err
	}
	var ok bool
	if err := q.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM deposits WHERE address = ANY($1))", addresses).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up deposit address: %w", err)
	}
	return ok, nil
}

package withdrawal

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/metadata"
)

// Get returns one withdrawal; ErrNotFound when there is none.
func (s *Service) Get(ctx context.Context, id uuid.UUID) (Withdrawal, error) {
	return getWithdrawal(ctx, s.DB, id, false)
}

// getWithdrawal reads withdrawal id, and locks it until idb's transaction
// ends when lock is set; real parameters (db.GetModel): every step of a
// withdrawal's life reads it.
func getWithdrawal(ctx context.Context, idb bun.IDB, id uuid.UUID, lock bool) (Withdrawal, error) {
	var w Withdrawal
	if err := db.Found(db.GetByID(ctx, idb, &w, id, lock), ErrNotFound, "read withdrawal %s", id); err != nil {
		return Withdrawal{}, err
	}
	return w, nil
}

// lockWithdrawal reads the withdrawal and locks its row until tx ends:
// every operator decision holds it, so concurrent decisions are applied one
// at a time and each sees the other's outcome.
func lockWithdrawal(ctx context.Context, tx bun.Tx, id uuid.UUID) (Withdrawal, error) {
	return getWithdrawal(ctx, tx, id, true)
}

// withdrawalByKey finds the withdrawal an Idempotency-Key created: one
// parameterized statement (see db.Querier) that reads the row only when
// there is one.
func withdrawalByKey(ctx context.Context, idb bun.IDB, key string) (Withdrawal, bool, error) {
	q, err := db.SQLOf(idb)
	if err != nil {
		return Withdrawal{}, false, err
	}
	var id uuid.UUID
	err = q.QueryRowContext(ctx, "SELECT id FROM withdrawals WHERE idempotency_key = $1", key).Scan(&id)
	if db.IsNoRows(err) {
		return Withdrawal{}, false, nil
	}
	if err != nil {
		return Withdrawal{}, false, fmt.Errorf("read withdrawal by idempotency key: %w", err)
	}
	w, err := getWithdrawal(ctx, idb, id, false)
	return w, err == nil, err
}

// insertNew writes a new withdrawal: the columns creation sets, with real
// parameters, so that the statement is prepared once per connection (see
// db.Querier) instead of being parsed and planned for every request.
func insertNew(ctx context.Context, idb bun.IDB, w Withdrawal) error {
	q, err := db.SQLOf(idb)
	if err != nil {
		return err
	}
	if _, err := q.ExecContext(ctx, insertNewSQL, insertNewArgs(w)...); err != nil {
		return fmt.Errorf("insert withdrawal %s: %w", w.ID, err)
	}
	return nil
}

// insertNewSQL is the statement of insertNew, with insertNewArgs. It
// casts the values of the columns whose type is a domain (migration 0028)
// to the domain's base type: a parameter typed as the domain is read by
// domain_in, which prepares the domain's rules anew for every parameter
// of every statement, where the plan checks a base-type value against the
// rules it prepared once.
const insertNewSQL = `INSERT INTO withdrawals (id, external_user_id, asset, status, destination, amount_gross,
    fee_mode, fee_estimate, approval_mode, approval_reason, volume_minute, payment_hash, invoice_expires_at,
    idempotency_key, created_at, updated_at, metadata, client_reference, platform_account)
VALUES ($1, $2::text, $3, $4::text, $5::text, $6::bigint, $7::text, $8::bigint, $9::text, $10, $11, $12, $13, $14, $15, $16,
    $17::text::jsonb, $18::text, $19::text)`

func insertNewArgs(w Withdrawal) []any {
	return []any{w.ID, optional(w.ExternalUserID), w.Asset, string(w.Status), w.Destination, w.AmountGross, w.FeeMode, w.FeeEstimate,
		w.ApprovalMode, w.ApprovalReason, w.VolumeMinute, w.PaymentHash, w.InvoiceExpiresAt, w.IdempotencyKey,
		w.CreatedAt, w.UpdatedAt, metadataText(w.Metadata), w.ClientReference, optional(w.PlatformAccount)}
}

// metadataText is m as the JSON text insertNewSQL stores ({} for none).
func metadataText(m metadata.Metadata) string {
	b, err := m.MarshalJSON()
	if err != nil { // a map of strings always marshals
		return "{}"
	}
	return string(b)
}

// withdrawalByClientReference finds the withdrawal the platform gave ref.
func withdrawalByClientReference(ctx context.Context, idb bun.IDB, ref string) (Withdrawal, bool, error) {
	var w Withdrawal
	err := db.GetModel(ctx, idb, &w, "WHERE client_reference = $1", ref)
	if db.IsNoRows(err) {
		return Withdrawal{}, false, nil
	}
	if err != nil {
		return Withdrawal{}, false, fmt.Errorf("read withdrawal by client reference: %w", err)
	}
	return w, true, nil
}

// Page limits of the user list (openapi.json WithdrawalsLimit) and of the
// admin list (AdminLimit).
const (
	DefaultListLimit  = 25
	MaxListLimit      = 100
	DefaultAdminLimit = 50
	MaxAdminLimit     = 200
)

// ErrBadCursor: the cursor is not one of the listed withdrawals.
var ErrBadCursor = fault.Validation(fault.FieldError{Loc: []any{"query", "cursor"}, Type: "value_error",
	Msg: "cursor must be the next_cursor of a previous page: a withdrawal_id of this list"})

// ListParams page a user's withdrawals.
type ListParams struct {
	ExternalUserID string
	Cursor         *uuid.UUID // the last withdrawal of the previous page
	Limit          int
}

// List returns a page of the user's withdrawals, newest first, keyset-
// paginated on (created_at, id) so that inserts never shift a page; next is
// the cursor of the following page, nil on the last.
func (s *Service) List(ctx context.Context, p ListParams) ([]Withdrawal, *uuid.UUID, error) {
	return list(ctx, s.DB, p)
}

func list(ctx context.Context, idb bun.IDB, p ListParams) ([]Withdrawal, *uuid.UUID, error) {
	if p.Limit <= 0 {
		p.Limit = DefaultListLimit
	}
	q := idb.NewSelect().Model((*Withdrawal)(nil)).Where("external_user_id = ?", p.ExternalUserID)
	if p.Cursor != nil {
		at, err := cursorTime(ctx, idb, *p.Cursor, func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("external_user_id = ?", p.ExternalUserID)
		})
		if err != nil {
			return nil, nil, err
		}
		q = q.Where("(created_at, id) < (?, ?)", at, *p.Cursor)
	}
	return page(ctx, q.OrderExpr("created_at DESC, id DESC"), p.Limit)
}

// AdminListParams page every withdrawal, or those in one status.
type AdminListParams struct {
	Status Status // "" for every status
	Cursor *uuid.UUID
	Limit  int
}

// AdminList returns a page of withdrawals, oldest first (an approval queue
// reads in arrival order), keyset-paginated on (created_at, id).
func (s *Service) AdminList(ctx context.Context, p AdminListParams) ([]Withdrawal, *uuid.UUID, error) {
	return adminList(ctx, s.DB, p)
}

func adminList(ctx context.Context, idb bun.IDB, p AdminListParams) ([]Withdrawal, *uuid.UUID, error) {
	if p.Limit <= 0 {
		p.Limit = DefaultAdminLimit
	}
	filter := func(q *bun.SelectQuery) *bun.SelectQuery {
		if p.Status != "" {
			q = q.Where("status = ?", p.Status)
		}
		return q
	}
	q := filter(idb.NewSelect().Model((*Withdrawal)(nil)))
	if p.Cursor != nil {
		// The cursor need not be in the status any more (it may have been
		// decided since the page was read): its place in time is enough.
		at, err := cursorTime(ctx, idb, *p.Cursor, func(q *bun.SelectQuery) *bun.SelectQuery { return q })
		if err != nil {
			return nil, nil, err
		}
		q = q.Where("(created_at, id) > (?, ?)", at, *p.Cursor)
	}
	return page(ctx, q.OrderExpr("created_at, id"), p.Limit)
}

func cursorTime(ctx context.Context, idb bun.IDB, id uuid.UUID, scope func(*bun.SelectQuery) *bun.SelectQuery) (time.Time, error) {
	var at time.Time
	err := scope(idb.NewSelect().Model((*Withdrawal)(nil)).Column("created_at").Where("id = ?", id)).Scan(ctx, &at)
	if err := db.Found(err, ErrBadCursor, "read withdrawal cursor"); err != nil {
		return time.Time{}, err
	}
	return at, nil
}

func page(ctx context.Context, q *bun.SelectQuery, limit int) ([]Withdrawal, *uuid.UUID, error) {
	out := []Withdrawal{}
	if err := q.Limit(int64(limit+1)).Scan(ctx, &out); err != nil {
		return nil, nil, fmt.Errorf("list withdrawals: %w", err)
	}
	out, next := db.Page(out, limit, func(w Withdrawal) uuid.UUID { return w.ID })
	return out, next, nil
}

package transfer

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/fault"
)

// Page limits of the lists (openapi.json TransfersLimit).
const (
	DefaultListLimit = 25
	MaxListLimit     = 100
)

// ErrBadCursor: the cursor is not one of the listed transfers.
var ErrBadCursor = fault.Validation(fault.FieldError{Loc: []any{"query", "cursor"}, Type: "value_error",
	Msg: "cursor must be the next_cursor of a previous page: a transfer_id of this list"})

// Get returns one transfer with its legs; ErrNotFound when there is none.
func (s *Service) Get(ctx context.Context, id uuid.UUID) (Transfer, error) {
	return get(ctx, s.DB, id)
}

func get(ctx context.Context, idb bun.IDB, id uuid.UUID) (Transfer, error) {
	var t Transfer
	if err := db.Found(idb.NewSelect().Model(&t).Where("id = ?", id).Scan(ctx), ErrNotFound, "read transfer %s", id); err != nil {
		return Transfer{}, err
	}
	ts := []Transfer{t}
	if err := withLegs(ctx, idb, ts); err != nil {
		return Transfer{}, err
	}
	return ts[0], nil
}

// withLegs reads the legs of ts, in order, into each.
func withLegs(ctx context.Context, idb bun.IDB, ts []Transfer) error {
	if len(ts) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(ts))
	at := make(map[uuid.UUID]int, len(ts))
	for i, t := range ts {
		ids[i], at[t.ID] = t.ID, i
	}
	var legs []Leg
	if err := idb.NewSelect().Model(&legs).Where("transfer_id IN (?)", bun.In(ids)).OrderExpr("transfer_id, leg").Scan(ctx); err != nil {
		return fmt.Errorf("read transfer legs: %w", err)
	}
	for _, l := range legs {
		i := at[l.TransferID]
		ts[i].Legs = append(ts[i].Legs, l)
	}
	return nil
}

// byIDs reads transfers with their legs, in the order of ids.
func byIDs(ctx context.Context, idb bun.IDB, ids []uuid.UUID) ([]Transfer, error) {
	out := make([]Transfer, 0, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	var rows []Transfer
	if err := idb.NewSelect().Model(&rows).Where("id IN (?)", bun.In(ids)).Scan(ctx); err != nil {
		return nil, fmt.Errorf("read transfers: %w", err)
	}
	by := make(map[uuid.UUID]Transfer, len(rows))
	for _, t := range rows {
		by[t.ID] = t
	}
	for _, id := range ids {
		if t, ok := by[id]; ok {
			out = append(out, t)
		}
	}
	return out, withLegs(ctx, idb, out)
}

// byKey finds the transfer an Idempotency-Key created.
func byKey(ctx context.Context, idb bun.IDB, key string) (Transfer, bool, error) {
	var id uuid.UUID
	err := idb.NewSelect().Model((*Transfer)(nil)).Column("id").Where("idempotency_key = ?", key).Scan(ctx, &id)
	if db.IsNoRows(err) {
		return Transfer{}, false, nil
	}
	if err != nil {
		return Transfer{}, false, fmt.Errorf("read transfer by idempotency key: %w", err)
	}
	t, err := get(ctx, idb, id)
	return t, err == nil, err
}

// byClientReference finds the transfer of a client_reference.
func byClientReference(ctx context.Context, idb bun.IDB, ref string) (Transfer, bool, error) {
	var id uuid.UUID
	err := idb.NewSelect().Model((*Transfer)(nil)).Column("id").Where("client_reference = ?", ref).Scan(ctx, &id)
	if db.IsNoRows(err) {
		return Transfer{}, false, nil
	}
	if err != nil {
		return Transfer{}, false, fmt.Errorf("read transfer by client_reference: %w", err)
	}
	t, err := get(ctx, idb, id)
	return t, err == nil, err
}

// party is one row of transfer_parties.
type party struct {
	bun.BaseModel `bun:"table:transfer_parties"`

	Platform   bool      `bun:"platform,pk"`
	Owner      string    `bun:"owner,pk"`
	CreatedAt  time.Time `bun:"created_at,pk"`
	TransferID uuid.UUID `bun:"transfer_id,pk,type:uuid"`
}

// insert writes a new transfer, its legs and its parties (every account
// of its legs, once).
func insert(ctx context.Context, idb bun.IDB, t Transfer) error {
	if _, err := idb.NewInsert().Model(&t).Exec(ctx); err != nil {
		return fmt.Errorf("insert transfer %s: %w", t.ID, err)
	}
	legs := t.Legs
	if _, err := idb.NewInsert().Model(&legs).Exec(ctx); err != nil {
		return fmt.Errorf("insert transfer %s legs: %w", t.ID, err)
	}
	parties := t.parties()
	if _, err := idb.NewInsert().Model(&parties).Exec(ctx); err != nil {
		return fmt.Errorf("insert transfer %s parties: %w", t.ID, err)
	}
	return nil
}

// parties are the rows of t's parties: every account of its legs, once.
func (t Transfer) parties() []party {
	seen := map[ledger.Holder]bool{}
	var parties []party
	for _, l := range t.Legs {
		for _, h := range []ledger.Holder{l.From(), l.To()} {
			if !seen[h] {
				seen[h] = true
				parties = append(parties, party{Platform: h.Platform, Owner: h.ID, CreatedAt: t.CreatedAt, TransferID: t.ID})
			}
		}
	}
	return parties
}

// ListParams page an account's transfers.
type ListParams struct {
	Account ledger.Holder
	Cursor  *uuid.UUID // the last transfer of the previous page
	Limit   int
}

// List returns a page of the transfers with a leg from or to the account,
// newest first, keyset-paginated on (created_at, transfer_id) over
// transfer_parties' primary key, so that inserts never shift a page; next
// is the cursor of the following page, nil on the last.
func (s *Service) List(ctx context.Context, p ListParams) ([]Transfer, *uuid.UUID, error) {
	return list(ctx, s.DB, p)
}

func list(ctx context.Context, idb bun.IDB, p ListParams) ([]Transfer, *uuid.UUID, error) {
	if p.Limit <= 0 {
		p.Limit = DefaultListLimit
	}
	q := idb.NewSelect().Model((*party)(nil)).Column("transfer_id").
		Where("platform = ? AND owner = ?", p.Account.Platform, p.Account.ID)
	if p.Cursor != nil {
		var at time.Time
		err := idb.NewSelect().Model((*Transfer)(nil)).Column("created_at").Where("id = ?", *p.Cursor).
			Where("EXISTS (SELECT 1 FROM transfer_parties p WHERE p.platform = ? AND p.owner = ? AND p.created_at = transfer.created_at AND p.transfer_id = transfer.id)",
				p.Account.Platform, p.Account.ID).Scan(ctx, &at)
		if err := db.Found(err, ErrBadCursor, "read transfer cursor"); err != nil {
			return nil, nil, err
		}
		q = q.Where("(created_at, transfer_id) < (?, ?)", at, *p.Cursor)
	}
	var ids []uuid.UUID
	if err := q.OrderExpr("created_at DESC, transfer_id DESC").Limit(int64(p.Limit+1)).Scan(ctx, &ids); err != nil {
		return nil, nil, fmt.Errorf("list transfers: %w", err)
	}
	ids, next := db.Page(ids, p.Limit, func(id uuid.UUID) uuid.UUID { return id })
	ts, err := byIDs(ctx, idb, ids)
	return ts, next, err
}

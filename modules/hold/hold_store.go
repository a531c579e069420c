package hold

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

// Get returns one hold; ErrNotFound when there is none.
func (s *Service) Get(ctx context.Context, id uuid.UUID) (Hold, error) {
	return getHold(ctx, s.DB, id, false)
}

// getHold reads hold id, and locks it until idb's transaction ends when
// lock is set: every step of a hold's life holds its row.
func getHold(ctx context.Context, idb bun.IDB, id uuid.UUID, lock bool) (Hold, error) {
	var h Hold
	if err := db.Found(db.GetByID(ctx, idb, &h, id, lock), ErrNotFound, "read hold %s", id); err != nil {
		return Hold{}, err
	}
	return h, nil
}

// idOf returns the id of the hold whose column col is value, if any.
func idOf(ctx context.Context, idb bun.IDB, col, value string) (uuid.UUID, bool, error) {
	var id uuid.UUID
	err := idb.NewSelect().Model((*Hold)(nil)).Column("id").Where("? = ?", bun.Ident(col), value).Scan(ctx, &id)
	if db.IsNoRows(err) {
		return uuid.Nil, false, nil
	}
	if err != nil {
		return uuid.Nil, false, fmt.Errorf("read hold by %s: %w", col, err)
	}
	return id, true, nil
}

// ByClientReference returns the hold with client reference ref, if any.
func (s *Service) ByClientReference(ctx context.Context, ref string) (Hold, bool, error) {
	id, ok, err := idOf(ctx, s.DB, "client_reference", ref)
	if err != nil || !ok {
		return Hold{}, false, err
	}
	h, err := s.Get(ctx, id)
	return h, err == nil, err
}

// insertHold writes a new hold.
func insertHold(ctx context.Context, idb bun.IDB, h *Hold) error {
	if _, err := idb.NewInsert().Model(h).Exec(ctx); err != nil {
		return fmt.Errorf("insert hold %s: %w", h.ID, err)
	}
	return nil
}

// insertCaptures writes the accounts a capture paid.
func insertCaptures(ctx context.Context, idb bun.IDB, cs []CaptureRow) error {
	if len(cs) == 0 {
		return nil
	}
	if _, err := idb.NewInsert().Model(&cs).Exec(ctx); err != nil {
		return fmt.Errorf("insert captures of hold %s: %w", cs[0].HoldID, err)
	}
	return nil
}

// capturesOf returns the captures of the holds given, by hold, each in
// its legs' order.
func capturesOf(ctx context.Context, idb bun.IDB, ids []uuid.UUID) (map[uuid.UUID][]CaptureRow, error) {
	out := map[uuid.UUID][]CaptureRow{}
	if len(ids) == 0 {
		return out, nil
	}
	var rows []CaptureRow
	if err := idb.NewSelect().Model(&rows).Where("hold_id IN (?)", bun.List(ids)).OrderExpr("hold_id, seq").Scan(ctx); err != nil {
		return nil, fmt.Errorf("read captures: %w", err)
	}
	for _, r := range rows {
		out[r.HoldID] = append(out[r.HoldID], r)
	}
	return out, nil
}

// Page limits of the lists (openapi.json HoldsLimit).
const (
	DefaultListLimit = 25
	MaxListLimit     = 100
)

// ErrBadCursor: the cursor is not one of the listed holds.
var ErrBadCursor = fault.Validation(fault.FieldError{Loc: []any{"query", "cursor"}, Type: "value_error",
	Msg: "cursor must be the next_cursor of a previous page: a hold_id of this list"})

// ListParams page a payer's holds in one status.
type ListParams struct {
	Payer  ledger.Holder
	Status Status // open when empty
	Cursor *uuid.UUID
	Limit  int
}

// list returns a page of the payer's holds in the status, newest first,
// keyset-paginated on (created_at, id); next is the cursor of the
// following page, nil on the last.
func list(ctx context.Context, idb bun.IDB, p ListParams) ([]Hold, *uuid.UUID, error) {
	if p.Limit <= 0 {
		p.Limit = DefaultListLimit
	}
	if p.Status == "" {
		p.Status = StatusOpen
	}
	scope := func(q *bun.SelectQuery) *bun.SelectQuery {
		return q.Where("payer_platform = ? AND payer = ?", p.Payer.Platform, p.Payer.ID)
	}
	q := scope(idb.NewSelect().Model((*Hold)(nil))).Where("status = ?", string(p.Status))
	if p.Cursor != nil {
		// The cursor need not be in the status any more: its place in time
		// is enough.
		var at time.Time
		err := scope(idb.NewSelect().Model((*Hold)(nil)).Column("created_at").Where("id = ?", *p.Cursor)).Scan(ctx, &at)
		if err := db.Found(err, ErrBadCursor, "read hold cursor"); err != nil {
			return nil, nil, err
		}
		q = q.Where("(created_at, id) < (?, ?)", at, *p.Cursor)
	}
	out := []Hold{}
	if err := q.OrderExpr("created_at DESC, id DESC").Limit(int64(p.Limit+1)).Scan(ctx, &out); err != nil {
		return nil, nil, fmt.Errorf("list holds: %w", err)
	}
	out, next := db.Page(out, p.Limit, func(h Hold) uuid.UUID { return h.ID })
	return out, next, nil
}

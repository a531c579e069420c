package audit

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"svc/platform/db"
)

// Page limits of the audit list.
const (
	DefaultListLimit = 50
	MaxListLimit     = 200
)

// ListParams page and filter the audit trail.
type ListParams struct {
	Limit  int    // 1 to MaxListLimit; 0 means DefaultListLimit
	Cursor *int64 // the next cursor of the previous page: entries with smaller ids
	Action string // only this action; empty: every action
	Target string // only this target; empty: every target
}

// List returns a page of the audit trail, newest first, keyset-paginated on
// id so that new entries never shift a page; next is the cursor of the
// following page, nil on the last.
func List(ctx context.Context, idb bun.IDB, p ListParams) ([]Entry, *int64, error) {
	if p.Limit <= 0 {
		p.Limit = DefaultListLimit
	}
	p.Limit = min(p.Limit, MaxListLimit)
	out := []Entry{}
	q := idb.NewSelect().Model(&out).OrderExpr("id DESC").Limit(int64(p.Limit) + 1)
	if p.Cursor != nil {
		q = q.Where("id < ?", *p.Cursor)
	}
	if p.Action != "" {
		q = q.Where("action = ?", p.Action)
	}
	if p.Target != "" {
		q = q.Where("target = ?", p.Target)
	}
	if err := q.Scan(ctx); err != nil {
		return nil, nil, fmt.Errorf("audit: list: %w", err)
	}
	out, next := db.Page(out, p.Limit, func(e Entry) int64 { return e.ID })
	return out, next, nil
}

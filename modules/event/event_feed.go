package event

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"svc/platform/db"
	"svc/platform/fault"
)

// Page limits of the events list (GET /v1/events).
const (
	DefaultFeedLimit = 50
	MaxFeedLimit     = 200
)

// ErrBadCursor: the cursor names no event the list has shown.
var ErrBadCursor = fault.Validation(fault.FieldError{Loc: []any{"query", "cursor"}, Type: "value_error",
	Msg: "cursor must be the id of an event this list returned (an evt_ id, such as next_cursor)"})

// listed is the condition under which the feed shows an event: every
// transaction whose id is below its writer's has ended. xmin is the oldest
// transaction still running when the statement's snapshot was taken (or
// the next id when none is); transaction ids only grow, so xmin never goes
// back, and whatever commits from now on has an id of at least xmin. The
// scalar subquery is evaluated once per statement, on the same snapshot the
// rows are read with, so every committed event below xmin is visible to it.
const listed = "xact_id < (SELECT pg_snapshot_xmin(pg_current_snapshot()))"

// FeedParams filter and page Feed.
type FeedParams struct {
	Type         Type       // only this type; empty: every type
	CreatedAfter *time.Time // only events created strictly after it
	// Cursor is the last event already read: the page starts after it in
	// the stream. It must be an event the feed has shown (ErrBadCursor).
	Cursor *uuid.UUID
	Limit  int // 1 to MaxFeedLimit; 0 means DefaultFeedLimit
}

// Feed returns a page of the events the platform is sent, whatever their
// delivery status, in stream order, and the cursor of the next page (the
// last event of this one; nil on the last page).
//
// # Order
//
// An event row is written inside the transaction of the change it
// reports, so events commit in an order that their created_at and ids,
// taken when they are written, do not follow. Listing by (created_at, id)
// would show an event while an earlier one is still uncommitted, and a
// reader going on from the last id it saw would never see the earlier one.
//
// The stream is instead ordered by the id of the writing transaction
// (outbound_events.xact_id, set by the column's default) and then by the
// event's id, and it shows only the events whose transaction id is below
// the xmin of the reading snapshot (see listed). When an event is listed,
// every transaction with a smaller id has therefore ended: every event that
// sorts before it is committed and listed, and every event committed later
// sorts after it. So the listed stream only ever grows at its end: pages
// never shift, and a reader that goes on from the last id it read misses
// nothing. The price is a short delay: an event is listed once the
// transactions that started writing before its own have ended, normally
// within milliseconds; a long-running write transaction anywhere on the
// database server holds newer events back (never loses them) until it
// ends. The order is close to created_at order but not exactly it.
//
// A cursor is an event id. It must be listed already (an id the feed has
// returned): an event that is committed but not yet listed (a webhook can
// arrive that early) may have unlisted events before it, which a page
// starting after it would skip for good, so it is ErrBadCursor, as is an
// unknown id.
func (s *Service) Feed(ctx context.Context, p FeedParams) ([]Event, *uuid.UUID, error) {
	if p.Limit <= 0 {
		p.Limit = DefaultFeedLimit
	}
	p.Limit = min(p.Limit, MaxFeedLimit)
	out := []Event{}
	q := s.DB.NewSelect().Model(&out).Where(listed)
	if p.Cursor != nil {
		// A cursor listed now stays listed (xmin never goes back), so the
		// page below, read on a later snapshot, starts from a listed event.
		var ok bool
		err := s.DB.NewSelect().Model((*Event)(nil)).ColumnExpr(listed).Where("id = ?", *p.Cursor).Scan(ctx, &ok)
		if db.IsNoRows(err) || (err == nil && !ok) {
			return nil, nil, ErrBadCursor
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read event cursor: %w", err)
		}
		q = q.Where("(xact_id, id) > (SELECT c.xact_id, c.id FROM outbound_events c WHERE c.id = ?)", *p.Cursor)
	}
	if p.Type != "" {
		q = q.Where("type = ?", p.Type)
	}
	if p.CreatedAfter != nil {
		q = q.Where("created_at > ?", p.CreatedAfter.UTC())
	}
	if err := q.OrderExpr("xact_id, id").Limit(int64(p.Limit) + 1).Scan(ctx); err != nil {
		return nil, nil, fmt.Errorf("list events: %w", err)
	}
	out, next := db.Page(out, p.Limit, func(e Event) uuid.UUID { return e.ID })
	return out, next, nil
}

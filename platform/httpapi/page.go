package httpapi

import (
	"context"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/uptrace/bun"

	"svc/platform/db"
)

// Lists is where a module's keyset-paginated lists read: the replica (nil
// reads the primary), the primary, and the list's 422 for a cursor that is
// not one of its items. On the replica, that error sends the read to the
// primary once: a cursor taken from a fresher page may not have reached
// the replica yet.
type Lists struct {
	Replica   *db.Replica
	Primary   bun.IDB
	BadCursor error
}

// PageAt is the page a list request asks for: after Cursor (nil: the
// first page), at most Limit items.
type PageAt struct {
	Cursor *uuid.UUID
	Limit  int
}

// SendPage answers a list request with one page, as the API's lists are:
// the page is asked with ?cursor= (the next_cursor of the previous page)
// and ?limit= (defaultLimit when absent), whose text openapi.json checks
// (Validator); list reads the items and the id after the last, view
// renders them, and page makes the answer, {<items>, next_cursor}, of the
// items and the next cursor (null on the last page).
func SendPage[T, V any](c *fiber.Ctx, l Lists, defaultLimit int,
	list func(context.Context, bun.IDB, PageAt) ([]T, *uuid.UUID, error),
	view func(context.Context, bun.IDB, []T) ([]V, error),
	page func(items []V, next *string) any,
) error {
	at := PageAt{Limit: c.QueryInt("limit", defaultLimit)}
	if args := c.Context().QueryArgs(); args.Has("cursor") {
		id, err := uuid.ParseBytes(args.Peek("cursor"))
		if err != nil {
			return l.BadCursor
		}
		at.Cursor = &id
	}
	var items []V
	var next *string
	err := l.Replica.Read(c.UserContext(), l.Primary, func(ctx context.Context, idb bun.IDB) error {
		ts, after, err := list(ctx, idb, at)
		if err != nil {
			return err
		}
		if after != nil {
			s := after.String()
			next = &s
		}
		items, err = view(ctx, idb, ts)
		return err
	}, l.BadCursor)
	if err != nil {
		return err
	}
	return c.JSON(page(items, next))
}

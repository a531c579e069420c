package audit

import (
	"context"

	"encoding/json"

	"github.com/gofiber/fiber/v2"
	"github.com/uptrace/bun"

	"svc/platform/db"
	"svc/platform/timefmt"
)

// API serves the audit trail to operators.
type API struct {
	DB bun.IDB
	// Replica serves the list, whose answer may lag the primary by up to
	// DATABASE_READ_MAX_LAG (the trail is append-only: a lagging page
	// misses the newest entries, never shows a changed one); nil reads DB.
	Replica *db.Replica
}

// Routes registers, on the admin router (/v1/admin, admin scope):
//
//	GET /audit?limit=&cursor=&action=&target=   {entries, next_cursor}, newest first
//
// limit defaults to 50 (DefaultListLimit) and may be 1 to 200
// (MaxListLimit); cursor is the next_cursor of the previous page, an entry
// id. action and target, when given, keep only the entries with exactly
// that action or target. Every bad parameter is reported in one 422, by
// admin, which checks requests against openapi.json
// (httpapi.Validator.Router).
func (a *API) Routes(admin fiber.Router) {
	admin.Get("/audit", a.handleList)
}

// View is the API's AuditEntry.
type View struct {
	ID            int64           `json:"id"`
	At            string          `json:"at"`
	Actor         string          `json:"actor"`
	ActorLabel    string          `json:"actor_label"`
	Action        string          `json:"action"`
	Target        string          `json:"target"`
	RequestDigest string          `json:"request_digest"`
	Detail        json.RawMessage `json:"detail"`
}

// ToView renders an entry for operators.
func ToView(e Entry) View {
	return View{ID: e.ID, At: timefmt.Format(e.At), Actor: e.Actor, ActorLabel: e.ActorLabel, Action: e.Action,
		Target: e.Target, RequestDigest: e.RequestDigest, Detail: e.Detail}
}

// ListView is the API's AuditList.
type ListView struct {
	Entries    []View `json:"entries"`
	NextCursor *int64 `json:"next_cursor"`
}

// ToListView renders a page of List.
func ToListView(entries []Entry, next *int64) ListView {
	out := ListView{Entries: make([]View, len(entries)), NextCursor: next}
	for i, e := range entries {
		out.Entries[i] = ToView(e)
	}
	return out
}

func (a *API) handleList(c *fiber.Ctx) error {
	args := c.Context().QueryArgs() // copies below: fiber reuses its buffers
	p := ListParams{Limit: c.QueryInt("limit", DefaultListLimit), Action: string(args.Peek("action")), Target: string(args.Peek("target"))}
	if n := int64(c.QueryInt("cursor", 0)); n > 0 {
		p.Cursor = &n
	}
	var (
		entries []Entry
		next    *int64
	)
	err := a.Replica.Read(c.UserContext(), a.DB, func(ctx context.Context, idb bun.IDB) error {
		var err error
		entries, next, err = List(ctx, idb, p)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(ToListView(entries, next))
}

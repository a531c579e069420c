package audit

import (
	"context"

	"encoding/json"
	"math"
	"regexp"

	"github.com/gofiber/fiber/v2"
	"github.com/uptrace/bun"

	"svc/platform/db"
	"svc/platform/fault"
	"svc/platform/httpapi"
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
// that action or target. Every bad parameter is reported in one 422.
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

// actionPattern is what audit_log accepts as an action.
var actionPattern = regexp.MustCompile(`^[a-z][a-z0-9_.]{0,63}$`)

// MaxTarget is the longest target audit_log holds.
const MaxTarget = 255

func (a *API) handleList(c *fiber.Ctx) error {
	limit, limitErr := httpapi.QueryInt(c, "limit", DefaultListLimit, 1, MaxListLimit)
	cursor, cursorErr := httpapi.QueryInt(c, "cursor", 0, 1, math.MaxInt64)
	args := c.Context().QueryArgs()
	var f httpapi.Fields
	p := ListParams{Limit: limit}
	if cursor > 0 {
		n := int64(cursor)
		p.Cursor = &n
	}
	if args.Has("action") {
		p.Action = string(args.Peek("action")) // a copy: fiber reuses its buffers
		if !actionPattern.MatchString(p.Action) {
			f.Add([]any{"query", "action"}, "string_pattern_mismatch", "String should match pattern '"+actionPattern.String()+"'", p.Action)
		}
	}
	if args.Has("target") {
		p.Target = string(args.Peek("target"))
		if f.Length(p.Target, 1, MaxTarget, "query", "target") {
			f.Storable(p.Target, "query", "target")
		}
	}
	// Every bad parameter in one 422.
	if err := fault.MergeValidation(limitErr, cursorErr, f.Err()); err != nil {
		return err
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

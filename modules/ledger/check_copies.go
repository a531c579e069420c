package ledger

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"svc/platform/timefmt"
)

// The copies of an entry's display fields on its user postings (migration
// 0025: entry_kind, entry_ref, entry_memo, entry_at) are what a user's
// history shows. The posting trigger refuses a posting whose copies are not
// its entry's, so a divergence means a row changed around the triggers;
// both checks list it among the MaterializedVsDerivedDrifts: the copy is
// materialized from the entry, as a balance is from its postings.

// copyColumns are the columns scanCopyDrifts reads, of postings p joined
// with their entries e and accounts a.
const copyColumns = `p.id, p.entry_id, a.id, a.asset, a.kind, a.owner, a.balance IS NOT NULL,
       p.entry_kind, p.entry_ref, p.entry_memo, p.entry_at, e.kind, e.source_ref, e.memo, e.created_at`

// copyDrifts is the condition on p, e and a of a posting whose copies are
// not what they must be: its entry's fields on a user account, none on a
// system account.
const copyDrifts = `CASE WHEN a.balance IS NULL
            THEN p.entry_kind IS NOT NULL OR p.entry_ref IS NOT NULL OR p.entry_memo IS NOT NULL OR p.entry_at IS NOT NULL
            ELSE (p.entry_kind, p.entry_ref, p.entry_memo, p.entry_at) IS DISTINCT FROM (e.kind, e.source_ref, e.memo, e.created_at) END`

// scanCopyDrifts lists the postings of rows (copyColumns) whose copies of
// their entry diverge, and closes rows.
func scanCopyDrifts(rows *sql.Rows, drifts *findings) error {
	for rows.Next() {
		var (
			posting, entry, account     int64
			code, owner                 string
			kind                        AccountKind
			user                        bool
			copyKind, copyRef, copyMemo sql.NullString
			copyAt                      sql.NullTime
			entryKind, entryRef         string
			entryMemo                   sql.NullString
			entryAt                     sql.NullTime
		)
		if err := rows.Scan(&posting, &entry, &account, &code, &kind, &owner, &user,
			&copyKind, &copyRef, &copyMemo, &copyAt, &entryKind, &entryRef, &entryMemo, &entryAt); err != nil {
			rows.Close()
			return err
		}
		name := fmt.Sprintf("%s %s of %q (account %d)", code, kind, owner, account)
		if !user {
			drifts.add(fmt.Sprintf("%s: posting %d (entry %d) of a system account carries copies of its entry", name, posting, entry))
			continue
		}
		var diff []string
		field := func(what string, c, e sql.NullString) {
			if c != e {
				diff = append(diff, fmt.Sprintf("%s %s, the entry's %s", what, quoteNull(c), quoteNull(e)))
			}
		}
		field("kind", copyKind, sql.NullString{String: entryKind, Valid: true})
		field("source_ref", copyRef, sql.NullString{String: entryRef, Valid: true})
		field("memo", copyMemo, entryMemo)
		if copyAt.Valid != entryAt.Valid || !copyAt.Time.Equal(entryAt.Time) {
			diff = append(diff, fmt.Sprintf("created_at %s, the entry's %s", timeOrNull(copyAt), timeOrNull(entryAt)))
		}
		drifts.add(fmt.Sprintf("%s: posting %d (entry %d) copies its entry as %s", name, posting, entry, strings.Join(diff, "; ")))
	}
	return closeRows(rows)
}

func quoteNull(s sql.NullString) string {
	if !s.Valid {
		return "null"
	}
	return strconv.Quote(s.String)
}

func timeOrNull(t sql.NullTime) string {
	if !t.Valid {
		return "null"
	}
	return timefmt.Format(t.Time)
}

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

// copyColumns are the columns of a copyRow, of postings p joined with
// their entries e and accounts a (a may be missing: a left join).
const copyColumns = `p.id, p.entry_id, coalesce(a.id, 0), coalesce(a.asset, ''), coalesce(a.kind, ''), coalesce(a.owner, ''),
       a.balance IS NOT NULL, p.entry_kind, p.entry_ref, p.entry_memo, p.entry_at, e.kind, e.source_ref, e.memo, e.created_at`

// copyDrifts is the condition on p, e and a of a posting whose copies are
// not what they must be: its entry's fields on a user account, none on a
// system account.
const copyDrifts = `CASE WHEN a.balance IS NULL
            THEN p.entry_kind IS NOT NULL OR p.entry_ref IS NOT NULL OR p.entry_memo IS NOT NULL OR p.entry_at IS NOT NULL
            ELSE (p.entry_kind, p.entry_ref, p.entry_memo, p.entry_at) IS DISTINCT FROM (e.kind, e.source_ref, e.memo, e.created_at) END`

// copyRow is a posting with its copies and its entry's fields.
type copyRow struct {
	posting, entry, account     int64
	code, owner                 string
	kind                        AccountKind
	user                        bool
	copyKind, copyRef, copyMemo sql.NullString
	copyAt                      sql.NullTime
	entryKind, entryRef         string
	entryMemo                   sql.NullString
	entryAt                     sql.NullTime
}

// dest is where to scan copyColumns.
func (c *copyRow) dest() []any {
	return []any{&c.posting, &c.entry, &c.account, &c.code, &c.kind, &c.owner, &c.user,
		&c.copyKind, &c.copyRef, &c.copyMemo, &c.copyAt, &c.entryKind, &c.entryRef, &c.entryMemo, &c.entryAt}
}

// finding says how the posting's copies diverge from its entry.
func (c *copyRow) finding() string {
	name := fmt.Sprintf("%s %s of %q (account %d)", c.code, c.kind, c.owner, c.account)
	if !c.user {
		return fmt.Sprintf("%s: posting %d (entry %d) of a system account carries copies of its entry", name, c.posting, c.entry)
	}
	var diff []string
	field := func(what string, cp, e sql.NullString) {
		if cp != e {
			diff = append(diff, fmt.Sprintf("%s %s, the entry's %s", what, quoteNull(cp), quoteNull(e)))
		}
	}
	field("kind", c.copyKind, sql.NullString{String: c.entryKind, Valid: true})
	field("source_ref", c.copyRef, sql.NullString{String: c.entryRef, Valid: true})
	field("memo", c.copyMemo, c.entryMemo)
	if c.copyAt.Valid != c.entryAt.Valid || !c.copyAt.Time.Equal(c.entryAt.Time) {
		diff = append(diff, fmt.Sprintf("created_at %s, the entry's %s", timeOrNull(c.copyAt), timeOrNull(c.entryAt)))
	}
	return fmt.Sprintf("%s: posting %d (entry %d) copies its entry as %s", name, c.posting, c.entry, strings.Join(diff, "; "))
}

// scanPostingFindings reads rows of the full check's pass over postings
// and entries (entry, kind, asset, ref, posting, account, account exists,
// account's asset, whether the posting is on a missing or foreign account,
// then copyColumns): a foreign posting is an unbalanced entry, any other
// row a diverging copy. It closes rows.
func scanPostingFindings(rows *sql.Rows, unbalanced, drifts *findings) error {
	for rows.Next() {
		var (
			entry, posting, account int64
			kind, code, ref, other  string
			exists, foreign         bool
			c                       copyRow
		)
		if err := rows.Scan(append([]any{&entry, &kind, &code, &ref, &posting, &account, &exists, &other, &foreign}, c.dest()...)...); err != nil {
			rows.Close()
			return err
		}
		if foreign {
			unbalanced.addAt(code, foreignPosting(entry, kind, code, ref, posting, account, exists, other))
		} else {
			drifts.addAt(c.code, c.finding())
		}
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

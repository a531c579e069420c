package ledger_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// The copies of an entry's display fields on its user postings (migration
// 0025), which a user's history reads instead of the entry.

// TestPostingCopiesMustBeTheEntrys: as the runtime role, a posting whose
// copies are not its entry's fields, or a system posting that carries
// any, is refused by the postings' trigger; the same statement with the
// right copies is accepted, so each refusal is for the copy alone.
func TestPostingCopiesMustBeTheEntrys(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4) // the runtime role
	ctx := context.Background()
	credit(t, d, "BTC", "pia", 1_000, "pay-1")
	var pia, custody int64
	require.NoError(t, d.NewRaw(`SELECT
  (SELECT id FROM ledger_accounts WHERE asset = 'BTC' AND kind = 'user_available' AND owner = 'pia'),
  (SELECT id FROM ledger_accounts WHERE asset = 'BTC' AND kind = 'custody')`).Scan(ctx, &pia, &custody))

	// post writes an entry with a memo and, in the same transaction, a
	// credit of 5 to pia from custody whose postings carry the copies
	// given (of the entry e).
	post := func(ref, userCopies, systemCopies string) error {
		return db.RunInTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
			var id int64
			if err := tx.NewRaw(`INSERT INTO ledger_entries (kind, asset, source_ref, memo) VALUES ('correction', 'BTC', ?, 'a memo') RETURNING id`, ref).
				Scan(ctx, &id); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `WITH u AS (UPDATE ledger_accounts SET balance = balance + 5 WHERE id = ? RETURNING id, balance)
INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after, entry_kind, entry_ref, entry_memo, entry_at)
SELECT e.id, u.id, 5, u.balance, `+userCopies+` FROM ledger_entries e, u WHERE e.id = ?
 UNION ALL
SELECT e.id, ?, -5, NULL, `+systemCopies+` FROM ledger_entries e WHERE e.id = ?`, pia, id, custody, id)
			return err
		})
	}
	const right, none = `e.kind, e.source_ref, e.memo, e.created_at`, `NULL, NULL, NULL, NULL::timestamptz`
	for _, tc := range []struct{ name, user, system string }{
		{"WrongKind", `'deposit_credit', e.source_ref, e.memo, e.created_at`, none},
		{"WrongSourceRef", `e.kind, 'pay-1', e.memo, e.created_at`, none},
		{"WrongMemo", `e.kind, e.source_ref, 'another memo', e.created_at`, none},
		{"MemoLeftOut", `e.kind, e.source_ref, NULL, e.created_at`, none},
		{"WrongTime", `e.kind, e.source_ref, e.memo, e.created_at + interval '1 microsecond'`, none},
		{"NoCopies", none, none},
		{"CopiesOnASystemPosting", right, `e.kind, NULL, NULL, NULL::timestamptz`},
	} {
		err := post("bad-"+tc.name, tc.user, tc.system)
		require.Error(t, err, tc.name)
		require.Equal(t, "ledger_posting_entry_copies", constraintOf(err), "%s: %v", tc.name, err)
	}
	require.NoError(t, post("good", right, none))
	require.Equal(t, int64(2), count(t, d, `SELECT count(*) FROM ledger_entries`), "only the good one got in")
	avail, _ := balance(t, d, "BTC", "pia")
	require.Equal(t, int64(1_005), avail)
	requireInvariants(t, d)
}

// TestChecksFindADivergingCopy: a copy changed with the triggers off is a
// drift for the incremental check (a new entry's posting) and for the full
// check (any posting), and so is a copy on a system posting.
func TestChecksFindADivergingCopy(t *testing.T) {
	t.Parallel()
	u, d := newCheckpointDB(t)
	old := credit(t, d, "BTC", "quinn", 1_000, "old-quinn")
	full := checkAboveAll(t, d)
	p := credit(t, d, "BTC", "quinn", 10, "new-quinn")

	require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, u, `UPDATE ledger_postings SET entry_memo = 'not the entry''s'
 WHERE entry_id = $1 AND entry_kind IS NOT NULL`, p.ID))
	r := checkIncremental(t, d)
	require.Equal(t, ledger.ScopeIncremental, r.Coverage.Scope)
	require.Equal(t, *full.Coverage.CheckID, *r.Coverage.SinceCheck)
	require.False(t, r.LedgerConsistent)
	require.Len(t, r.MaterializedVsDerivedDrifts, 1, "%q", r.MaterializedVsDerivedDrifts)
	require.Contains(t, r.MaterializedVsDerivedDrifts[0], `BTC user_available of "quinn"`)
	require.Contains(t, r.MaterializedVsDerivedDrifts[0], `memo "not the entry's", the entry's null`)
	require.Empty(t, r.UnbalancedEntries)
	require.Empty(t, r.NegativeBalances)

	all := fullCheck(t, d)
	require.False(t, all.LedgerConsistent)
	require.Equal(t, r.MaterializedVsDerivedDrifts, all.MaterializedVsDerivedDrifts)
	require.Empty(t, all.UnbalancedEntries)

	// Below the incremental check's boundary only the full check reads:
	// the old entry's custody posting given a copy, and its user
	// posting's time moved.
	require.Equal(t, int64(2), dbtest.ExecBehindTriggers(t, u, `UPDATE ledger_postings
   SET entry_kind = CASE WHEN entry_kind IS NULL THEN 'deposit_credit' ELSE entry_kind END,
       entry_at = CASE WHEN entry_kind IS NULL THEN entry_at ELSE '2020-01-02 03:04:05+00' END
 WHERE entry_id = $1`, old.ID))
	all = fullCheck(t, d)
	require.Len(t, all.MaterializedVsDerivedDrifts, 3, "%q", all.MaterializedVsDerivedDrifts)
	require.Contains(t, all.MaterializedVsDerivedDrifts[0], `BTC user_available of "quinn"`)
	require.Contains(t, all.MaterializedVsDerivedDrifts[0], `created_at 2020-01-02T03:04:05`)
	require.Contains(t, all.MaterializedVsDerivedDrifts[1], `BTC custody of ""`)
	require.Contains(t, all.MaterializedVsDerivedDrifts[1], "of a system account carries copies of its entry")
	require.Contains(t, all.MaterializedVsDerivedDrifts[2], `memo "not the entry's"`)
}

// TestHistoryReadsTheCopies: a user's history, read from the postings'
// copies, is what the join with the entries gives, field for field, with
// and without memos, over both user accounts and across pages.
func TestHistoryReadsTheCopies(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	ctx := context.Background()
	credit(t, d, "BTC", "rae", 5_000, "pay-1")
	require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.CreditDeposit(ctx, tx, "BTC", ledger.UserHolder("rae"), 700, "pay-2", "réglé ✓ \"quoted\"")
		return err
	}))
	_, err := hold(t, d, "BTC", "rae", 1_200, "wd-1")
	require.NoError(t, err)
	credit(t, d, "BTC", "someone-else", 100, "pay-3")

	var want []ledger.Transaction
	rows, err := d.QueryContext(ctx, `
SELECT p.id, p.entry_id, e.kind, e.asset, a.kind, p.amount, e.source_ref, e.memo, e.created_at
  FROM ledger_postings p
  JOIN ledger_entries e ON e.id = p.entry_id
  JOIN ledger_accounts a ON a.id = p.account_id
 WHERE a.owner = 'rae'
 ORDER BY p.id DESC`)
	require.NoError(t, err)
	for rows.Next() {
		var tr ledger.Transaction
		var memo sql.NullString
		require.NoError(t, rows.Scan(&tr.PostingID, &tr.EntryID, &tr.Kind, &tr.Asset, &tr.Account, &tr.Amount, &tr.SourceRef, &memo, &tr.CreatedAt))
		tr.Memo = memo.String
		want = append(want, tr)
	}
	require.NoError(t, rows.Err())
	require.Len(t, want, 4)

	var got []ledger.Transaction
	var cursor int64
	for {
		page, next, err := ledger.Transactions(ctx, d, ledger.TransactionsQuery{ExternalUserID: "rae", Cursor: cursor, Limit: 3})
		require.NoError(t, err)
		got = append(got, page...)
		if next == nil {
			break
		}
		cursor = *next
	}
	require.Len(t, got, len(want))
	for i := range want {
		require.True(t, want[i].CreatedAt.Equal(got[i].CreatedAt), "%d: %s vs %s", i, want[i].CreatedAt, got[i].CreatedAt)
		want[i].CreatedAt = got[i].CreatedAt
	}
	require.Equal(t, want, got)
	require.Equal(t, "réglé ✓ \"quoted\"", got[2].Memo)
}

package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestPostingCopiesBackfill: a ledger written before 0025 (a deposit
// without a memo, a hold with one) gets its user postings' copies of their
// entries' kind, source_ref, memo and created_at, and its system postings
// none; after it, the trigger accepts the next posting on the same
// accounts only with the right copies.
func TestPostingCopiesBackfill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := migratedBefore(t, "0025")

	// As the ledger wrote them before: user postings with their running
	// balance, no copies; every trigger on.
	for _, q := range []string{
		`WITH e AS (INSERT INTO ledger_entries (kind, asset, source_ref) VALUES ('deposit_credit', 'BTC', 'old-1') RETURNING id),
a AS (INSERT INTO ledger_accounts (asset, kind, owner, balance) VALUES ('BTC', 'user_available', 'ann', 700) RETURNING id)
INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after)
SELECT e.id, a.id, 700, 700 FROM e, a
 UNION ALL
SELECT e.id, c.id, -700, NULL FROM e, ledger_accounts c WHERE c.owner = '' AND c.asset = 'BTC' AND c.kind = 'custody'`,
		`WITH e AS (INSERT INTO ledger_entries (kind, asset, source_ref, memo, created_at)
            VALUES ('withdrawal_hold', 'BTC', 'old-2', 'réglé ✓', '2025-06-30 12:00:00.123456+00') RETURNING id),
av AS (UPDATE ledger_accounts SET balance = balance - 300 WHERE owner = 'ann' AND kind = 'user_available' RETURNING id, balance),
h AS (INSERT INTO ledger_accounts (asset, kind, owner, balance) VALUES ('BTC', 'user_hold', 'ann', 300) RETURNING id, balance)
INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after)
SELECT e.id, av.id, -300, av.balance FROM e, av
 UNION ALL
SELECT e.id, h.id, 300, h.balance FROM e, h`,
	} {
		tx, err := d.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, q)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}

	migrateAll(t, d)
	var users, copied, system, bare int64
	require.NoError(t, d.Pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE a.balance IS NOT NULL),
       count(*) FILTER (WHERE a.balance IS NOT NULL
                          AND (p.entry_kind, p.entry_ref, p.entry_memo, p.entry_at) IS NOT DISTINCT FROM (e.kind, e.source_ref, e.memo, e.created_at)),
       count(*) FILTER (WHERE a.balance IS NULL),
       count(*) FILTER (WHERE a.balance IS NULL
                          AND p.entry_kind IS NULL AND p.entry_ref IS NULL AND p.entry_memo IS NULL AND p.entry_at IS NULL)
  FROM ledger_postings p
  JOIN ledger_entries e ON e.id = p.entry_id
  JOIN ledger_accounts a ON a.id = p.account_id`).Scan(&users, &copied, &system, &bare))
	require.Equal(t, int64(3), users)
	require.Equal(t, users, copied, "every user posting copies its entry")
	require.Equal(t, int64(1), system)
	require.Equal(t, system, bare, "no system posting carries a copy")
	var memo string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT entry_memo FROM ledger_postings WHERE entry_ref = 'old-2' AND amount = 300`).Scan(&memo))
	require.Equal(t, "réglé ✓", memo)

	// The append-only trigger is back on.
	_, err := d.Pool.Exec(ctx, `UPDATE ledger_postings SET entry_memo = 'x'`)
	require.ErrorContains(t, err, "append-only")
	// And the trigger wants copies now: a release without them is refused.
	release := func(copies string) error {
		tx, err := d.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
		_, err = tx.Exec(ctx, `WITH e AS (INSERT INTO ledger_entries (kind, asset, source_ref) VALUES ('withdrawal_release', 'BTC', 'old-2')
            RETURNING id, kind, source_ref, memo, created_at),
av AS (UPDATE ledger_accounts SET balance = balance + 300 WHERE owner = 'ann' AND kind = 'user_available' RETURNING id, balance),
h AS (UPDATE ledger_accounts SET balance = balance - 300 WHERE owner = 'ann' AND kind = 'user_hold' RETURNING id, balance)
INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after, entry_kind, entry_ref, entry_memo, entry_at)
SELECT e.id, h.id, -300, h.balance, `+copies+` FROM e, h
 UNION ALL
SELECT e.id, av.id, 300, av.balance, `+copies+` FROM e, av`)
		if err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	var pe *pgconn.PgError
	require.ErrorAs(t, release(`NULL, NULL, NULL, NULL::timestamptz`), &pe)
	require.Equal(t, "ledger_posting_entry_copies", pe.ConstraintName, pe.Message)
	require.NoError(t, release(`e.kind, e.source_ref, e.memo, e.created_at`))
}

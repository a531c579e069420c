package migrations_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/migrations"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// TestLedgerDomainsKeepFiles: 0029 turns the ledger's and the keys'
// single-column CHECKs into domains without rewriting a table or
// rebuilding an index (the same files before and after: on a large ledger,
// only a scan that checks the rows already there), keeps the rows, and
// keeps the triggers it had to drop and create again.
func TestLedgerDomainsKeepFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	d, err := db.Open(ctx, dbtest.NewEmptyURL(t), 4)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	require.NoError(t, db.Migrate(ctx, d, db.MigrationSet{FS: sqlBefore(t, "0029"), River: migrations.River}, log))

	tx, err := d.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }() // after a failure: the pool closes only without it
	_, err = tx.Exec(ctx, `WITH e AS (INSERT INTO ledger_entries (kind, asset, source_ref, memo) VALUES ('deposit_credit', 'BTC', 'old-1', 'm') RETURNING id, created_at),
a AS (INSERT INTO ledger_accounts (asset, kind, owner, balance) VALUES ('BTC', 'user_available', 'ann', 700) RETURNING id)
INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after, entry_kind, entry_ref, entry_memo, entry_at)
SELECT e.id, a.id, 700, 700, 'deposit_credit', 'old-1', 'm', e.created_at FROM e, a
 UNION ALL
SELECT e.id, c.id, -700, NULL, NULL, NULL, NULL, NULL FROM e, ledger_accounts c WHERE c.owner = '' AND c.asset = 'BTC' AND c.kind = 'custody'`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	_, err = d.Pool.Exec(ctx, `INSERT INTO idempotency_keys (key, method, path, request_hash, state) VALUES ('k-1', 'POST', '/v1/x', '\x00', 'in_flight')`)
	require.NoError(t, err)

	files := func() map[string]uint32 {
		rows, err := d.Pool.Query(ctx, `SELECT c.relname, c.relfilenode::int8 FROM pg_class c
 WHERE c.oid IN ('ledger_accounts'::regclass, 'ledger_entries'::regclass, 'ledger_postings'::regclass, 'idempotency_keys'::regclass)
    OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid IN ('ledger_accounts'::regclass, 'ledger_entries'::regclass,
                                                                     'ledger_postings'::regclass, 'idempotency_keys'::regclass))`)
		require.NoError(t, err)
		m := map[string]uint32{}
		for rows.Next() {
			var name string
			var file int64
			require.NoError(t, rows.Scan(&name, &file))
			m[name] = uint32(file)
		}
		require.NoError(t, rows.Err())
		return m
	}
	triggers := func() map[string]string {
		rows, err := d.Pool.Query(ctx, `SELECT tgname, concat_ws(' ', tgtype, tgfoid::regproc, tgattr, tgqual IS NOT NULL, tgenabled) FROM pg_trigger WHERE tgrelid = 'ledger_accounts'::regclass AND NOT tgisinternal`)
		require.NoError(t, err)
		m := map[string]string{}
		for rows.Next() {
			var name, def string
			require.NoError(t, rows.Scan(&name, &def))
			m[name] = def
		}
		require.NoError(t, rows.Err())
		return m
	}
	before, trigBefore := files(), triggers()
	require.Len(t, before, 14, "the four tables and their ten indexes")

	require.NoError(t, db.Migrate(ctx, d, migrations.Set, log))
	require.Equal(t, before, files(), "no table rewritten, no index rebuilt")
	// The same events, functions, columns and conditions (a condition's
	// text now reads the domain's value as its base type).
	require.Equal(t, trigBefore, triggers(), "the triggers on ledger_accounts are as they were")
	var typ string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute
 WHERE attrelid = 'ledger_accounts'::regclass AND attname = 'balance'`).Scan(&typ))
	require.Equal(t, "ledger_balance", typ)
	var n int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ledger_postings) + (SELECT count(*) FROM idempotency_keys)`).Scan(&n))
	require.Equal(t, 3, n)
}

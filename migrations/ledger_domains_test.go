package migrations_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/platform/db"
)

// TestLedgerDomainsKeepFiles: 0029 turns the ledger's and the keys'
// single-column CHECKs into domains without rewriting a table or
// rebuilding an index (the same files before and after: on a large ledger,
// only a scan that checks the rows already there), keeps the rows, and
// keeps the triggers it had to drop and create again.
func TestLedgerDomainsKeepFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := migratedBefore(t, "0029")

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

	const files = `SELECT c.relname, c.relfilenode::text FROM pg_class c
 WHERE c.oid IN ('ledger_accounts'::regclass, 'ledger_entries'::regclass, 'ledger_postings'::regclass, 'idempotency_keys'::regclass)
    OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid IN ('ledger_accounts'::regclass, 'ledger_entries'::regclass,
                                                                     'ledger_postings'::regclass, 'idempotency_keys'::regclass))`
	const triggers = `SELECT tgname, concat_ws(' ', tgtype, tgfoid::regproc, tgattr, tgqual IS NOT NULL, tgenabled)
  FROM pg_trigger WHERE tgrelid = 'ledger_accounts'::regclass AND NOT tgisinternal`
	before, trigBefore := textMap(t, d, files), textMap(t, d, triggers)
	require.Len(t, before, 14, "the four tables and their ten indexes")

	migrateAll(t, d)
	after := textMap(t, d, files)
	for name := range after {
		if _, old := before[name]; !old {
			delete(after, name) // an index a later migration added (0043)
		}
	}
	require.Equal(t, before, after, "no table rewritten, no index rebuilt")
	// The same events, functions, columns and conditions (a condition's
	// text now reads the domain's value as its base type).
	require.Equal(t, trigBefore, textMap(t, d, triggers), "the triggers on ledger_accounts are as they were")
	var typ string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute
 WHERE attrelid = 'ledger_accounts'::regclass AND attname = 'balance'`).Scan(&typ))
	require.Equal(t, "ledger_balance", typ)
	var n int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ledger_postings) + (SELECT count(*) FROM idempotency_keys)`).Scan(&n))
	require.Equal(t, 3, n)
}

// textMap returns the rows of q, two text columns, as a map of the first
// to the second.
func textMap(t *testing.T, d *db.DB, q string) map[string]string {
	t.Helper()
	rows, err := d.Pool.Query(context.Background(), q)
	require.NoError(t, err)
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var k, v string
		require.NoError(t, rows.Scan(&k, &v))
		m[k] = v
	}
	require.NoError(t, rows.Err())
	return m
}

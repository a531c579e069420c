package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestMetadataColumns: 0039 gives the deposits and withdrawals written
// before it metadata {} and no client reference without rewriting either
// table; its checks are validated and its unique indexes valid, and they
// refuse a second use of a reference and metadata that is not an object.
func TestMetadataColumns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := migratedBefore(t, "0039")
	for _, q := range []string{
		`INSERT INTO deposits (id, external_user_id, asset, status, created_at, updated_at)
         VALUES ('01a20000-0000-7000-8000-000000000001', 'ann', 'BTC', 'creating', now(), now())`,
		`INSERT INTO withdrawals (id, external_user_id, asset, status, destination, amount_gross, fee_mode, fee_estimate,
             approval_reason, volume_minute, created_at, updated_at)
         VALUES ('01a20000-0000-7000-8000-000000000002', 'ann', 'BTC', 'pending_approval', 'bcrt1qold', 1000, 'deduct', 10,
             'test', date_trunc('minute', now()), now(), now())`,
	} {
		_, err := d.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	files := textMap(t, d, `SELECT relname, relfilenode::text FROM pg_class WHERE relname IN ('deposits', 'withdrawals')`)
	require.Len(t, files, 2)

	migrateAll(t, d)
	require.Equal(t, files, textMap(t, d, `SELECT relname, relfilenode::text FROM pg_class WHERE relname IN ('deposits', 'withdrawals')`),
		"neither table was rewritten")
	for _, table := range []string{"deposits", "withdrawals"} {
		var meta string
		var ref *string
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT metadata::text, client_reference FROM `+table).Scan(&meta, &ref))
		require.Equal(t, "{}", meta, table)
		require.Nil(t, ref, table)
	}
	require.Equal(t, map[string]string{
		"deposits_client_reference_key":    "true",
		"withdrawals_client_reference_key": "true",
	}, textMap(t, d, `SELECT c.relname, (i.indisvalid AND i.indisunique)::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE c.relname IN ('deposits_client_reference_key', 'withdrawals_client_reference_key')`))
	require.Equal(t, map[string]string{
		"deposits_client_reference_length":    "true",
		"deposits_metadata_object":            "true",
		"withdrawals_client_reference_length": "true",
		"withdrawals_metadata_object":         "true",
	}, textMap(t, d, `SELECT conname, convalidated::text FROM pg_constraint
 WHERE conrelid IN ('deposits'::regclass, 'withdrawals'::regclass)
   AND (conname LIKE '%client_reference_length' OR conname LIKE '%metadata_object')`))

	_, err := d.Pool.Exec(ctx, `UPDATE deposits SET client_reference = 'order-1', metadata = '{"a": "b"}'`)
	require.NoError(t, err)
	violates := func(q, constraint string) {
		t.Helper()
		_, err := d.Pool.Exec(ctx, q)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, q)
		require.Equal(t, constraint, pe.ConstraintName, q)
	}
	violates(`INSERT INTO deposits (id, external_user_id, asset, status, client_reference, created_at, updated_at)
         VALUES ('01a20000-0000-7000-8000-000000000003', 'bob', 'BTC', 'creating', 'order-1', now(), now())`,
		"deposits_client_reference_key")
	violates(`UPDATE withdrawals SET metadata = '[]'`, "withdrawals_metadata_object")
	violates(`UPDATE withdrawals SET client_reference = ''`, "withdrawals_client_reference_length")
	// The same reference is free for the other resource type, and NULL
	// for any number of rows.
	_, err = d.Pool.Exec(ctx, `UPDATE withdrawals SET client_reference = 'order-1'`)
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, `INSERT INTO deposits (id, external_user_id, asset, status, created_at, updated_at)
         VALUES ('01a20000-0000-7000-8000-000000000004', 'bob', 'BTC', 'creating', now(), now()),
                ('01a20000-0000-7000-8000-000000000005', 'bob', 'BTC', 'creating', now(), now())`)
	require.NoError(t, err)
}

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

// unpinned lists the functions of the schema whose configuration does not
// pin the search path (db.PinnedSearchPath), by signature.
func unpinned(t *testing.T, d *db.DB, where string) []string {
	t.Helper()
	rows, err := d.Pool.Query(context.Background(), `SELECT p.oid::regprocedure::text
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'public' AND NOT coalesce(p.proconfig @> ARRAY['search_path=' || $1], false) `+where+`
 ORDER BY 1`, db.PinnedSearchPath)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestFunctionsPinTheirSearchPath: every function of the schema runs with
// search_path = pg_catalog, public, pg_temp, so that no table a session
// creates (a temporary ledger_postings) can stand in for one a trigger
// reads.
//
//   - The migrations alone pin every function they create, and name
//     every table of the schema they use with its schema.
//   - svc migrate's PinSearchPath pins the rest (River's own function)
//     and any function a migration forgot, and then has nothing left to do.
//   - A test database, migrated as svc migrate does, has every function
//     pinned.
func TestFunctionsPinTheirSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := db.Open(ctx, dbtest.NewEmptyURL(t), 4)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	require.NoError(t, db.Migrate(ctx, d, migrations.Set, slog.New(slog.DiscardHandler)))

	require.Empty(t, unpinned(t, d, `AND p.proname NOT LIKE 'river\_%'`), "functions the migrations create without the search path")
	var unqualified []string
	rows, err := d.Pool.Query(ctx, `SELECT p.proname || ': ' || c.relname
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
       pg_class c JOIN pg_namespace cn ON cn.oid = c.relnamespace
 WHERE n.nspname = 'public' AND p.proname NOT LIKE 'river\_%' AND cn.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm')
   AND p.prosrc ~* ('\m(from|join|into|update|table)\s+' || c.relname || '\M')
 ORDER BY 1`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		unqualified = append(unqualified, s)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, unqualified, "tables named without their schema in a function's body")

	require.NotEmpty(t, unpinned(t, d, ""), "River's function, pinned by svc migrate only")
	_, err = d.Pool.Exec(ctx, `CREATE FUNCTION forgot_its_search_path(a text, "b c" int) RETURNS int LANGUAGE sql AS 'SELECT 1'`)
	require.NoError(t, err)
	n, err := db.PinSearchPath(ctx, d)
	require.NoError(t, err)
	require.Equal(t, 2, n, "river_job_state_in_bitmask and forgot_its_search_path")
	require.Empty(t, unpinned(t, d, ""))
	n, err = db.PinSearchPath(ctx, d)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to pin")

	owner, err := db.Open(ctx, dbtest.OwnerURL(dbtest.NewURL(t)), 2)
	require.NoError(t, err)
	t.Cleanup(owner.Close)
	require.Empty(t, unpinned(t, owner, ""), "a database migrated as svc migrate does")
	var functions int
	require.NoError(t, owner.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'public'`).Scan(&functions))
	require.GreaterOrEqual(t, functions, 19)
}

package db_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"svc/platform/db"
	"svc/platform/dbtest"
)

// TestGrantRuntime: migrate's grants give the runtime role rows, never
// the schema; applying them again changes nothing; a role that could not
// be a runtime role is refused.
func TestGrantRuntime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := dbtest.NewURL(t) // migrated and granted by its owner, as svc migrate does
	owner, err := db.Open(ctx, dbtest.OwnerURL(u), 2)
	require.NoError(t, err)
	t.Cleanup(owner.Close)

	has := func(table, priv string) bool {
		var ok bool
		require.NoError(t, owner.Pool.QueryRow(ctx, "SELECT has_table_privilege($1, $2, $3)", dbtest.RuntimeRole, table, priv).Scan(&ok))
		return ok
	}
	hasColumn := func(table, column, priv string) bool {
		var ok bool
		require.NoError(t, owner.Pool.QueryRow(ctx, "SELECT has_column_privilege($1, $2, $3, $4)", dbtest.RuntimeRole, table, column, priv).Scan(&ok))
		return ok
	}
	check := func() {
		t.Helper()
		for _, table := range []string{"ledger_entries", "ledger_postings", "audit_log"} {
			require.True(t, has(table, "SELECT"), table)
			require.True(t, has(table, "INSERT"), table)
			for _, p := range []string{"UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"} {
				require.False(t, has(table, p), "%s %s", table, p)
			}
		}
		require.True(t, hasColumn("ledger_accounts", "balance", "UPDATE"))
		for _, c := range []string{"owner", "kind", "asset", "id"} {
			require.False(t, hasColumn("ledger_accounts", c, "UPDATE"), c)
		}
		require.False(t, has("ledger_accounts", "DELETE"))
		for _, p := range []string{"SELECT", "INSERT", "UPDATE", "DELETE"} {
			require.True(t, has("withdrawals", p), p)
			require.True(t, has("river_job", p), p)
		}
		require.False(t, has("withdrawals", "TRUNCATE"))
		require.True(t, has("bun_migrations", "SELECT"))
		require.False(t, has("bun_migrations", "INSERT"))
		var create bool
		require.NoError(t, owner.Pool.QueryRow(ctx, "SELECT has_schema_privilege($1, 'public', 'CREATE')", dbtest.RuntimeRole).Scan(&create))
		require.False(t, create)
		// No temporary tables, for the runtime role or for PUBLIC.
		var temp, public bool
		require.NoError(t, owner.Pool.QueryRow(ctx, `SELECT has_database_privilege($1, current_database(), 'TEMPORARY'),
       EXISTS (SELECT 1 FROM pg_database d, aclexplode(coalesce(d.datacl, acldefault('d', d.datdba))) a
                WHERE d.datname = current_database() AND a.grantee = 0 AND a.privilege_type = 'TEMPORARY')`,
			dbtest.RuntimeRole).Scan(&temp, &public))
		require.False(t, temp, "the runtime role may create temporary tables")
		require.False(t, public, "PUBLIC may create temporary tables")
	}
	check()
	require.NoError(t, db.GrantRuntime(ctx, owner, dbtest.RuntimeRole))
	require.NoError(t, db.GrantRuntime(ctx, owner, dbtest.RuntimeRole))
	check()

	// TEMPORARY given back (to PUBLIC, as a new database has it) is taken
	// again; one the owner cannot take (granted by a superuser to a role
	// the runtime role belongs to) fails the grants with the fix.
	su, err := pgx.Connect(ctx, dbtest.AdminURLOf(t, u))
	require.NoError(t, err)
	defer su.Close(ctx)
	var name string
	require.NoError(t, su.QueryRow(ctx, "SELECT current_database()").Scan(&name))
	_, err = su.Exec(ctx, "GRANT TEMPORARY ON DATABASE "+name+" TO PUBLIC")
	require.NoError(t, err)
	require.NoError(t, db.GrantRuntime(ctx, owner, dbtest.RuntimeRole))
	check()
	group := fmt.Sprintf("svc_temp_%d", time.Now().UnixNano())
	_, err = su.Exec(ctx, "CREATE ROLE "+group+" NOLOGIN")
	require.NoError(t, err)
	defer su.Exec(context.Background(), "DROP OWNED BY "+group+"; DROP ROLE IF EXISTS "+group) //nolint:errcheck // runs before the close above
	_, err = su.Exec(ctx, "GRANT TEMPORARY ON DATABASE "+name+" TO "+group+"; GRANT "+group+" TO "+dbtest.RuntimeRole)
	require.NoError(t, err)
	defer su.Exec(context.Background(), "REVOKE "+group+" FROM "+dbtest.RuntimeRole) //nolint:errcheck // runs before the drop above
	require.ErrorContains(t, db.GrantRuntime(ctx, owner, dbtest.RuntimeRole), "can still create temporary tables")

	err = db.GrantRuntime(ctx, owner, dbtest.OwnerRole)
	require.ErrorContains(t, err, "must be another one")
	err = db.GrantRuntime(ctx, owner, "svc_nobody")
	require.ErrorContains(t, err, "does not exist")
	admin, err := db.UserOf(dbtest.AdminURL(t))
	require.NoError(t, err)
	var super bool
	require.NoError(t, owner.Pool.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = $1", admin).Scan(&super))
	if super {
		require.ErrorContains(t, db.GrantRuntime(ctx, owner, admin), "superuser")
	}
}

// TestRuntimeRoleProblems: the runtime role passes; the owner and a
// superuser are named, with the fix.
func TestRuntimeRoleProblems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := dbtest.NewURL(t)
	problems := func(url string) []string {
		d, err := db.Open(ctx, url, 2)
		require.NoError(t, err)
		defer d.Close()
		p, err := db.RuntimeRoleProblems(ctx, d)
		require.NoError(t, err)
		return p
	}
	require.Empty(t, problems(u))
	p := strings.Join(problems(dbtest.OwnerURL(u)), "; ")
	require.Contains(t, p, "owns the ledger's tables")
	require.Contains(t, p, "MIGRATE_DATABASE_URL")
	p = strings.Join(problems(dbtest.AdminURLOf(t, u)), "; ")
	require.Contains(t, p, "a superuser")

	// A member of the owner that does not inherit its privileges could
	// still SET ROLE to it.
	admin, err := pgx.Connect(ctx, dbtest.AdminURL(t))
	require.NoError(t, err)
	defer admin.Close(ctx)
	member := fmt.Sprintf("svc_member_%d", time.Now().UnixNano())
	_, err = admin.Exec(ctx, "CREATE ROLE "+member+" LOGIN NOINHERIT IN ROLE "+dbtest.OwnerRole)
	require.NoError(t, err)
	defer admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+member) //nolint:errcheck // runs before the close above
	mu, err := url.Parse(u)
	require.NoError(t, err)
	mu.User = url.User(member)
	p = strings.Join(problems(mu.String()), "; ")
	require.Contains(t, p, "owns the ledger's tables")

	// A runtime role that may create temporary tables (TEMPORARY given
	// back to PUBLIC, as a new database has it) is named, and only for that.
	_, err = admin.Exec(ctx, "GRANT TEMPORARY ON DATABASE "+strings.TrimPrefix(mu.Path, "/")+" TO PUBLIC")
	require.NoError(t, err)
	got := problems(u)
	require.Len(t, got, 2, "%q", got)
	require.Contains(t, got[0], "may create temporary tables")
	require.Contains(t, got[1], "MIGRATE_DATABASE_URL")
}

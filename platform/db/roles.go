package db

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The service runs with two PostgreSQL roles (docs/operations.md):
//
//   - the owner, which svc migrate connects as (MIGRATE_DATABASE_URL): it
//     owns every table, function and sequence, and is the only role that
//     can change the schema, switch a trigger off or truncate a table;
//   - the runtime role, which svc api, svc worker and svc admin connect as
//     (DATABASE_URL): it reads and writes rows, and nothing more.
//
// The append-only tables (the ledger's entries and postings, the audit
// trail) then hold against the service's own account: their triggers
// refuse UPDATE and DELETE even to the owner, and the runtime role has
// neither the privilege to change those rows nor the ownership that
// switching the triggers off needs.

// UserOf returns the user a PostgreSQL URL connects as.
func UserOf(url string) (string, error) {
	c, err := pgx.ParseConfig(url)
	if err != nil {
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	return c.User, nil
}

// readOnlyTables are read by the runtime role and never written: the
// migration history (svc api and svc worker refuse to start while one is
// pending).
var readOnlyTables = []string{"bun_migrations", "bun_migration_locks", "river_migration"}

// integrityTables are the integrity records (migration 0033): the runtime
// role reads them and writes them only through integrityWriters, functions
// that run as the owner and compute the records' bounds, sums and times.
var (
	integrityTables  = []string{"ledger_checks", "ledger_checkpoints", "ledger_checkpoint_blocks", "liabilities_snapshots"}
	integrityWriters = []string{"ledger_record_check", "ledger_record_checkpoint", "liabilities_record_snapshot"}
)

// GrantRuntime gives role exactly what svc api, svc worker and svc admin
// need on the schema d's user owns, after revoking whatever it had, so that
// running it again (every svc migrate does) converges to the same grants:
//
//   - every table: SELECT, INSERT, UPDATE, DELETE; never TRUNCATE,
//     REFERENCES or TRIGGER, and no ownership;
//   - an append-only table (one with a *_append_only trigger: ledger
//     entries and postings, the audit trail): SELECT and INSERT only;
//   - ledger_accounts: SELECT, INSERT, and UPDATE of balance only;
//   - the migration history and the integrity records: SELECT only, and
//     EXECUTE on the functions that write the records;
//   - every sequence: USAGE and SELECT (nextval);
//   - the database: no TEMPORARY, neither for role nor for PUBLIC (a
//     temporary table of a session's own could shadow a table for any
//     function that does not pin its search path; the migrations' all do).
//
// It refuses a role that is a superuser, can bypass row security, or is
// d's own user, and fails when role can still create temporary tables
// afterwards (d's user does not own the database, or role has TEMPORARY
// through another role).
func GrantRuntime(ctx context.Context, d *DB, role string) error {
	var me string
	var exists, super, bypass bool
	err := d.Pool.QueryRow(ctx, `SELECT current_user, r.rolname IS NOT NULL, coalesce(r.rolsuper, false), coalesce(r.rolbypassrls, false)
  FROM (SELECT 1) x LEFT JOIN pg_roles r ON r.rolname = $1`, role).Scan(&me, &exists, &super, &bypass)
	if err != nil {
		return fmt.Errorf("grant runtime role: %w", err)
	}
	switch {
	case !exists:
		return fmt.Errorf("grant runtime role: the role %q of DATABASE_URL does not exist; create it (CREATE ROLE %s LOGIN PASSWORD '...'; see docs/operations.md)", role, pgx.Identifier{role}.Sanitize())
	case role == me:
		return fmt.Errorf("grant runtime role: DATABASE_URL and MIGRATE_DATABASE_URL both connect as %q; the runtime role must be another one", role)
	case super || bypass:
		return fmt.Errorf("grant runtime role: %q is a superuser or bypasses row security; the runtime role must be an ordinary role (ALTER ROLE %s NOSUPERUSER NOBYPASSRLS)", role, pgx.Identifier{role}.Sanitize())
	}
	rows, err := d.Pool.Query(ctx, `SELECT c.relname,
       EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = c.oid AND t.tgname LIKE '%\_append\_only')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND pg_get_userbyid(c.relowner) = current_user
 ORDER BY c.relname`)
	if err != nil {
		return fmt.Errorf("grant runtime role: list tables: %w", err)
	}
	type table struct {
		name       string
		appendOnly bool
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
		var t table
		return t, r.Scan(&t.name, &t.appendOnly)
	})
	if err != nil {
		return fmt.Errorf("grant runtime role: list tables: %w", err)
	}
	rt := pgx.Identifier{role}.Sanitize()
	stmts := []string{
		"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM " + rt,
		"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM " + rt,
		"REVOKE CREATE ON SCHEMA public FROM " + rt,
		"GRANT USAGE ON SCHEMA public TO " + rt,
		"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO " + rt,
	}
	for _, t := range tables {
		name := pgx.Identifier{t.name}.Sanitize()
		var privs string
		switch {
		case slices.Contains(readOnlyTables, t.name), slices.Contains(integrityTables, t.name):
			privs = "SELECT"
		case t.appendOnly:
			privs = "SELECT, INSERT"
		case t.name == "ledger_accounts":
			privs = "SELECT, INSERT, UPDATE (balance)"
		default:
			privs = "SELECT, INSERT, UPDATE, DELETE"
		}
		stmts = append(stmts, fmt.Sprintf("GRANT %s ON %s TO %s", privs, name, rt))
	}
	rows, err = d.Pool.Query(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = current_schema() AND p.proname = ANY($1) ORDER BY 1`, integrityWriters)
	if err != nil {
		return fmt.Errorf("grant runtime role: list functions: %w", err)
	}
	writers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("grant runtime role: list functions: %w", err)
	}
	for _, f := range writers {
		stmts = append(stmts, fmt.Sprintf("GRANT EXECUTE ON FUNCTION %s TO %s", f, rt))
	}
	tx, err := d.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("grant runtime role: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("grant runtime role: %s: %w", s, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("grant runtime role: %w", err)
	}
	if err := RevokeTemporary(ctx, d.Pool, role); err != nil {
		return fmt.Errorf("grant runtime role: %w", err)
	}
	return nil
}

// PgxQuerier is what RevokeTemporary needs of a pgx connection or pool.
type PgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// RevokeTemporary revokes TEMPORARY on q's current database from PUBLIC
// and from role, and fails when role can still create temporary tables
// (q's user does not own the database, so the revocation did nothing, or
// role has the privilege through another role). GrantRuntime runs it; a
// database copied from a template does not copy the template's privileges
// on the database, so it must run on every copy too.
func RevokeTemporary(ctx context.Context, q PgxQuerier, role string) error {
	var name string
	if err := q.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
		return fmt.Errorf("revoke TEMPORARY: %w", err)
	}
	dbName, rt := pgx.Identifier{name}.Sanitize(), pgx.Identifier{role}.Sanitize()
	stmt := fmt.Sprintf("REVOKE TEMPORARY ON DATABASE %s FROM PUBLIC, %s", dbName, rt)
	if _, err := q.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	var temp bool
	if err := q.QueryRow(ctx, "SELECT has_database_privilege($1, current_database(), 'TEMPORARY')", role).Scan(&temp); err != nil {
		return fmt.Errorf("revoke TEMPORARY: %w", err)
	}
	if temp {
		return fmt.Errorf("the runtime role %q can still create temporary tables in the database %s: as the database's owner, run %s (and revoke TEMPORARY from any role %q is a member of); see docs/operations.md",
			role, name, stmt, role)
	}
	return nil
}

// PinnedSearchPath is the search path every function of the schema runs
// with, whoever calls it: pg_temp last and named, so that no temporary
// table of the caller's session can shadow a table the function reads.
const PinnedSearchPath = "pg_catalog, public, pg_temp"

// PinSearchPath sets PinnedSearchPath on every function and procedure of
// the schema d's user owns that does not have it (River's own included,
// and any a migration created without it), and returns how many it set.
// svc migrate runs it after the migrations, so that the schema converges
// whatever a migration forgot; the migrations' own functions carry the
// SET clause already (migration 0031).
func PinSearchPath(ctx context.Context, d *DB) (int, error) {
	rows, err := d.Pool.Query(ctx, `SELECT p.oid::regprocedure::text
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = current_schema() AND p.prokind IN ('f', 'p') AND pg_get_userbyid(p.proowner) = current_user
   AND NOT coalesce(p.proconfig @> ARRAY['search_path=' || $1], false)
 ORDER BY 1`, PinnedSearchPath)
	if err != nil {
		return 0, fmt.Errorf("pin search paths: %w", err)
	}
	fns, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("pin search paths: %w", err)
	}
	for _, fn := range fns {
		// fn is a regprocedure's text: the name and argument types, quoted
		// by PostgreSQL.
		if _, err := d.Pool.Exec(ctx, "ALTER ROUTINE "+fn+" SET search_path = "+PinnedSearchPath); err != nil {
			return 0, fmt.Errorf("pin the search path of %s: %w", fn, err)
		}
	}
	return len(fns), nil
}

// RuntimeRoleProblems lists why d's user is not a proper runtime role: it
// is a superuser, bypasses row security, owns (or is a member of the role
// that owns, even without inheriting: it could SET ROLE) the ledger's or
// the audit trail's tables, may create objects in the schema, or may
// create temporary tables (which could shadow a table for a function that
// does not pin its search path).
// Each problem says how to fix it. None means the split is in place.
func RuntimeRoleProblems(ctx context.Context, d *DB) ([]string, error) {
	var (
		user          string
		super, bypass bool
		owns, create  bool
		temp          bool
	)
	err := d.Pool.QueryRow(ctx, `SELECT current_user, r.rolsuper, r.rolbypassrls,
       EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = current_schema() AND c.relname IN ('ledger_entries', 'ledger_postings', 'ledger_accounts', 'audit_log')
                  AND pg_has_role(current_user, c.relowner, 'MEMBER')),
       has_schema_privilege(current_user, current_schema(), 'CREATE'),
       has_database_privilege(current_user, current_database(), 'TEMPORARY')
  FROM pg_roles r WHERE r.rolname = current_user`).Scan(&user, &super, &bypass, &owns, &create, &temp)
	if err != nil {
		return nil, fmt.Errorf("check the database role: %w", err)
	}
	var p []string
	if super {
		p = append(p, fmt.Sprintf("DATABASE_URL connects as %q, a superuser, which can switch the ledger's append-only triggers off", user))
	}
	if bypass {
		p = append(p, fmt.Sprintf("DATABASE_URL connects as %q, which bypasses row security", user))
	}
	if owns && !super {
		p = append(p, fmt.Sprintf("DATABASE_URL connects as %q, which owns the ledger's tables and can alter them", user))
	}
	if create && !super {
		p = append(p, fmt.Sprintf("DATABASE_URL connects as %q, which may create objects in the schema", user))
	}
	if temp && !super {
		p = append(p, fmt.Sprintf("DATABASE_URL connects as %q, which may create temporary tables (svc migrate revokes TEMPORARY on the database from PUBLIC and from the runtime role when its user owns the database; otherwise run REVOKE TEMPORARY ON DATABASE ... FROM PUBLIC, %s as the database's owner)",
			user, pgx.Identifier{user}.Sanitize()))
	}
	if len(p) > 0 {
		p = append(p, "connect svc api, svc worker and svc admin as an ordinary role, and svc migrate as the schema owner (MIGRATE_DATABASE_URL), which grants the runtime role what it needs (docs/operations.md)")
	}
	return p, nil
}

// RoleProblemsError joins RuntimeRoleProblems into one error.
func RoleProblemsError(problems []string) error {
	return fmt.Errorf("unsafe database role: %s", strings.Join(problems, "; "))
}

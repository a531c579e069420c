// Package dbtest gives each test its own real PostgreSQL database, cloned in
// milliseconds from a template that is migrated once per migration set.
// The server comes from DATABASE_URL (make test provides one), whose user
// must be able to create databases and roles.
//
// The databases are split as in production (docs/operations.md): the
// schema belongs to the owner role (OwnerRole), which migrates the
// template, and the URL a test gets connects as the runtime role
// (RuntimeRole) with only the grants svc migrate gives it. A test that
// must do what only the owner can (tamper with the ledger, build bulk
// data) asks for OwnerURL.
package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"svc/migrations"
	"svc/platform/db"
)

// The roles of the test databases.
const (
	OwnerRole   = "svc_owner"
	RuntimeRole = "svc_app"
)

// AdminURL returns DATABASE_URL or fails the test with how to get one.
func AdminURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("DATABASE_URL")
	if u == "" {
		t.Fatal("DATABASE_URL is not set: run the tests with `make test`, which finds or starts a PostgreSQL server")
	}
	return u
}

// New returns a connection to a fresh, migrated database that is dropped
// when the test ends.
func New(t testing.TB) *db.DB {
	t.Helper()
	url := NewURL(t)
	d, err := db.Open(context.Background(), url, 10)
	if err != nil {
		t.Fatalf("dbtest: open: %v", err)
	}
	t.Cleanup(d.Close)
	return d
}

// NewURL creates a fresh migrated database and returns its URL; the database
// is dropped when the test ends (after the test's own cleanups close their
// connections, since cleanups run last-in first-out).
func NewURL(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	admin := AdminURL(t)
	tmpl, err := template(ctx, admin)
	if err != nil {
		t.Fatalf("dbtest: template: %v", err)
	}
	return copyOf(t, tmpl, "")
}

// copyOf creates a database copied from tmpl (with CREATE DATABASE's
// strategy when strategy is not empty) and returns its URL as the runtime
// role; the database is dropped when the test ends.
func copyOf(t testing.TB, tmpl, strategy string) string {
	t.Helper()
	ctx := context.Background()
	admin := AdminURL(t)
	name := "t_" + randHex(8)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("dbtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	stmt := fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s OWNER %s", name, tmpl, OwnerRole)
	if strategy != "" {
		stmt += " STRATEGY " + strategy
	}
	if err := execWhileAccessed(ctx, conn, stmt); err != nil {
		t.Fatalf("dbtest: create database: %v", err)
	}
	revokeTemporary(t, name)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name))
	})
	return withUser(withDatabase(admin, name), RuntimeRole)
}

// revokeTemporary gives the database name what svc migrate gives a
// production database on the database itself (db.RevokeTemporary: no
// TEMPORARY for PUBLIC or the runtime role), as its owner: CREATE
// DATABASE ... TEMPLATE copies the template's schema and rows, not the
// privileges granted on the template database.
func revokeTemporary(t testing.TB, name string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, withUser(withDatabase(AdminURL(t), name), OwnerRole))
	if err != nil {
		t.Fatalf("dbtest: connect as owner: %v", err)
	}
	defer conn.Close(ctx)
	if err := db.RevokeTemporary(ctx, conn, RuntimeRole); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
}

// execWhileAccessed runs stmt (a CREATE or ALTER DATABASE), again every
// 100 ms for about five seconds while PostgreSQL says that a database it
// names is still being accessed by other users (a connection closing).
func execWhileAccessed(ctx context.Context, conn *pgx.Conn, stmt string) error {
	for attempt := 0; ; attempt++ {
		_, err := conn.Exec(ctx, stmt)
		if err == nil || attempt == 50 || !strings.Contains(err.Error(), "being accessed by other users") {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// OwnerURL returns the URL of the same database as u, connecting as the
// schema owner.
func OwnerURL(u string) string { return withUser(u, OwnerRole) }

// VacuumAnalyze vacuums and analyzes the database of u as its owner: the
// runtime role a test connects as may not (PostgreSQL skips, with a
// warning, the tables a role does not own), and a benchmark measured on a
// never-vacuumed database measures the missing statistics.
func VacuumAnalyze(t testing.TB, u string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, OwnerURL(u))
	if err != nil {
		t.Fatalf("dbtest: connect as owner: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE"); err != nil {
		t.Fatalf("dbtest: VACUUM ANALYZE: %v", err)
	}
}

// AdminURLOf returns the URL of the same database as u, connecting as
// DATABASE_URL's user (a superuser on the private server): for a test
// that does what not even the owner can, like writing with the triggers
// off (session_replication_role).
func AdminURLOf(t testing.TB, u string) string {
	t.Helper()
	a, err := url.Parse(AdminURL(t))
	if err != nil {
		t.Fatalf("dbtest: DATABASE_URL: %v", err)
	}
	v, err := url.Parse(u)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	v.User = a.User
	return v.String()
}

// ExecBehindTriggers runs query on the database of u as DATABASE_URL's
// user with every trigger off (session_replication_role = replica, in one
// transaction), and returns the rows it affected: for a test that corrupts
// the ledger as only a superuser could, to show that a check finds it.
// Through any other path the database refuses such a write
// (migrations 0002 and 0014).
func ExecBehindTriggers(t testing.TB, u, query string, args ...any) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, AdminURLOf(t, u))
	if err != nil {
		t.Fatalf("dbtest: connect as admin: %v", err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatalf("dbtest: begin: %v", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
		t.Fatalf("dbtest: triggers off: %v", err)
	}
	tag, err := tx.Exec(ctx, query, args...)
	if err != nil {
		t.Fatalf("dbtest: %s: %v", query, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("dbtest: commit: %v", err)
	}
	return tag.RowsAffected()
}

func withDatabase(admin, name string) string {
	u, err := url.Parse(admin)
	if err != nil {
		return admin
	}
	u.Path = "/" + name
	return u.String()
}

// withUser returns raw with its user replaced by role, keeping the
// password: the test roles are given the admin's (ensureRoles).
func withUser(raw, role string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	if pw, ok := u.User.Password(); ok {
		u.User = url.UserPassword(role, pw)
	} else {
		u.User = url.User(role)
	}
	return u.String()
}

// ensureRoles creates the owner and the runtime roles when they are
// missing, with the admin URL's password if it has one. The caller holds
// the template lock, so parallel test binaries do not race.
func ensureRoles(ctx context.Context, conn *pgx.Conn, admin string) error {
	pw := ""
	if u, err := url.Parse(admin); err == nil {
		pw, _ = u.User.Password()
	}
	for _, role := range []string{OwnerRole, RuntimeRole} {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", role).Scan(&exists); err != nil {
			return err
		}
		if exists {
			continue
		}
		stmt := "CREATE ROLE " + role + " LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS"
		if pw != "" {
			stmt += " PASSWORD " + quoteLiteral(pw)
		}
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("create role %s: %w", role, err)
		}
	}
	return nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// template returns the name of the migrated template database for the
// current migration files, creating it under an advisory lock so parallel
// test binaries build it once.
func template(ctx context.Context, admin string) (string, error) {
	name := "svc_tmpl_" + migrationsHash()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(7263541)"); err != nil {
		return "", err
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock(7263541)") //nolint:errcheck
	if err := ensureRoles(ctx, conn, admin); err != nil {
		return "", err
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	building := name + "_build"
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", building)); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s OWNER %s", building, OwnerRole)); err != nil {
		return "", err
	}
	// As svc migrate does with MIGRATE_DATABASE_URL: the owner migrates,
	// then grants the runtime role.
	d, err := db.Open(ctx, withUser(withDatabase(admin, building), OwnerRole), 4)
	if err != nil {
		return "", err
	}
	err = db.Migrate(ctx, d, migrations.Set, slog.New(slog.DiscardHandler))
	if err == nil {
		_, err = db.PinSearchPath(ctx, d)
	}
	if err == nil {
		err = db.GrantRuntime(ctx, d, RuntimeRole)
	}
	d.Close()
	if err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, name)); err != nil {
		return "", err
	}
	return name, nil
}

func migrationsHash() string {
	h := sha256.New()
	var names []string
	_ = fs.WalkDir(migrations.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
		}
		return nil
	})
	sort.Strings(names)
	for _, n := range names {
		b, _ := fs.ReadFile(migrations.FS, n)
		h.Write([]byte(n))
		h.Write(b)
	}
	for _, st := range migrations.River {
		fmt.Fprintf(h, "river:%s:%d", st.Name, st.Version)
	}
	h.Write([]byte("roles:" + OwnerRole + "," + RuntimeRole))
	return hex.EncodeToString(h.Sum(nil))[:12]
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewEmptyURL returns the URL of a new database with nothing in it (not
// cloned from the migrated template), dropped when the test ends: what a
// deployment that never ran svc migrate sees.
func NewEmptyURL(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	admin := AdminURL(t)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("dbtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	name := "t_empty_" + randHex(8)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("dbtest: create database: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	return withDatabase(admin, name)
}

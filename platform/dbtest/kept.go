package dbtest

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// KeptPrefix starts the name of every database Kept makes. They outlive
// the tests on purpose; make bench-scale-drop removes them.
const KeptPrefix = "svc_keep_"

var keptKey = regexp.MustCompile(`^[a-z0-9_]{1,40}$`)

// Kept returns the URL, as the runtime role, of a database that outlives
// the test: named after key and the migration set, built by build the
// first time (build gets the URL, as the runtime role, of a fresh migrated
// database, fills it and closes its connections) and reused as it is by
// every later call, in this process or another. It exists under its name
// only once build returned: a build that failed or was interrupted leaves
// a database named ..._build that the next call drops and builds again.
// key is lower-case letters, digits and underscores (at most 40); put in
// it everything the content depends on besides the migrations (a size, a
// version of the generator).
//
// A test must not write into a kept database (the next run would see its
// writes): it writes into a Clone.
func Kept(t testing.TB, key string, build func(url string)) string {
	t.Helper()
	if !keptKey.MatchString(key) {
		t.Fatalf("dbtest: kept database key %q: want [a-z0-9_]{1,40}", key)
	}
	ctx := context.Background()
	admin := AdminURL(t)
	tmpl, err := template(ctx, admin)
	if err != nil {
		t.Fatalf("dbtest: template: %v", err)
	}
	name := KeptPrefix + key + "_" + migrationsHash()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("dbtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	// One builder per name across test binaries; the others wait for it.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(7263542)"); err != nil {
		t.Fatalf("dbtest: lock: %v", err)
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock(7263542)") //nolint:errcheck
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	if exists {
		return withUser(withDatabase(admin, name), RuntimeRole)
	}
	building := name + "_build"
	for _, q := range []string{
		fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", building),
		fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s OWNER %s", building, tmpl, OwnerRole),
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("dbtest: %s: %v", q, err)
		}
	}
	revokeTemporary(t, building)
	start := time.Now()
	build(withUser(withDatabase(admin, building), RuntimeRole))
	if t.Failed() {
		t.FailNow()
	}
	// A rename needs the database to itself: end what build left open.
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, building); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	q := fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, name)
	if err := execWhileAccessed(ctx, conn, q); err != nil {
		t.Fatalf("dbtest: %s: %v", q, err)
	}
	t.Logf("dbtest: built the kept database %s in %s", name, time.Since(start).Round(time.Second))
	return withUser(withDatabase(admin, name), RuntimeRole)
}

// Clone returns the URL, as the runtime role, of a new database copied
// file by file from the database of u (CREATE DATABASE ... STRATEGY
// FILE_COPY: a checkpoint and a copy of the files, instead of writing a
// large database through the WAL), dropped when the test ends. The source
// must have no open connection.
func Clone(t testing.TB, u string) string {
	t.Helper()
	v, err := url.Parse(u)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	return copyOf(t, strings.TrimPrefix(v.Path, "/"), "FILE_COPY")
}

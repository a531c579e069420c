package db_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"svc/migrations"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// emptyDatabase creates a database with nothing in it (not from the
// migrated template) and returns its URL.
func emptyDatabase(t *testing.T) string { t.Helper(); return dbtest.NewEmptyURL(t) }

// openEmptyDatabase opens a pool of 4 on a database of its own with
// nothing in it, closed when the test ends.
func openEmptyDatabase(t *testing.T) *db.DB {
	t.Helper()
	d, err := db.Open(context.Background(), emptyDatabase(t), 4)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

func TestMigrateConcurrentlyAndAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := emptyDatabase(t)
	log := slog.New(slog.DiscardHandler)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := db.Open(ctx, dbURL, 4)
			if err != nil {
				errs[i] = err
				return
			}
			defer d.Close()
			errs[i] = db.Migrate(ctx, d, migrations.Set, log)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err, "concurrent migrators take turns")
	}
	d, err := db.Open(ctx, dbURL, 4)
	require.NoError(t, err)
	defer d.Close()
	var applied int
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM bun_migrations").Scan(&applied))
	files, err := migrations.FS.ReadDir(".")
	require.NoError(t, err)
	sqlFiles := 0
	for _, f := range files {
		if !f.IsDir() && len(f.Name()) > 4 && f.Name()[len(f.Name())-4:] == ".sql" {
			sqlFiles++
		}
	}
	require.Equal(t, sqlFiles+len(migrations.River), applied, "each migration applied exactly once")
	require.NoError(t, db.Migrate(ctx, d, migrations.Set, log), "running again is a no-op")
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM bun_migrations").Scan(&applied))
	require.Equal(t, sqlFiles+len(migrations.River), applied)
	pending, err := db.Pending(ctx, d, migrations.Set)
	require.NoError(t, err)
	require.Empty(t, pending)
}

// TestFailedMigrationStaysPending: a migration that fails (here a refused
// precondition) is not recorded, so the api and the worker still refuse to
// start, and the next svc migrate runs it again; once its cause is fixed,
// it applies and is recorded once.
func TestFailedMigrationStaysPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := openEmptyDatabase(t)
	log := slog.New(slog.DiscardHandler)
	set := db.MigrationSet{FS: fstest.MapFS{
		"0001_gate.tx.up.sql": {Data: []byte("CREATE TABLE gate (open boolean NOT NULL);\nINSERT INTO gate VALUES (false);")},
		"0002_refuses.tx.up.sql": {Data: []byte(`DO $$ BEGIN
  IF NOT (SELECT open FROM gate) THEN RAISE EXCEPTION 'the gate is closed'; END IF;
END $$;
CREATE TABLE behind_gate (id int);`)},
	}}
	err := db.Migrate(ctx, d, set, log)
	require.ErrorContains(t, err, "the gate is closed")
	pending, err := db.Pending(ctx, d, set)
	require.NoError(t, err)
	require.Equal(t, []string{"0002"}, pending, "the refused migration is not recorded")
	require.Error(t, db.RequireMigrated(ctx, d, set))

	err = db.Migrate(ctx, d, set, log)
	require.ErrorContains(t, err, "the gate is closed", "the next run tries it again")
	_, err = d.Pool.Exec(ctx, "UPDATE gate SET open = true")
	require.NoError(t, err)
	require.NoError(t, db.Migrate(ctx, d, set, log))
	require.NoError(t, db.RequireMigrated(ctx, d, set))
	var n int
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM bun_migrations WHERE name = '0002'").Scan(&n))
	require.Equal(t, 1, n)
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM behind_gate").Scan(&n))
}

// TestRiverStepsInHistory: River's schema moves at its step and is recorded
// there, in bun_migrations beside the SQL files; a database whose River
// schema is behind its step has that step pending.
func TestRiverStepsInHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := openEmptyDatabase(t)
	log := slog.New(slog.DiscardHandler)
	fsys := fstest.MapFS{
		"0001_before.tx.up.sql": {Data: []byte("SELECT 1")},
		"0003_after.tx.up.sql":  {Data: []byte("SELECT count(*) FROM river_job")}, // needs River's tables
	}
	set := db.MigrationSet{FS: fsys, River: []db.RiverStep{{Name: "0002", Comment: "river_schema", Version: 6}}}
	pending, err := db.Pending(ctx, d, set)
	require.NoError(t, err)
	require.Equal(t, []string{"0001", "0002", "0003"}, pending)
	require.NoError(t, db.Migrate(ctx, d, set, log))
	var riverVersion int
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT max(version) FROM river_migration").Scan(&riverVersion))
	require.Equal(t, 6, riverVersion, "River migrated up to its step's version, not beyond")

	// A later step moves River on; until it has run, it is pending.
	set.River = append(set.River, db.RiverStep{Name: "0004", Comment: "river_schema", Version: 7})
	pending, err = db.Pending(ctx, d, set)
	require.NoError(t, err)
	require.Equal(t, []string{"0004"}, pending)
	require.NoError(t, db.Migrate(ctx, d, set, log))
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT max(version) FROM river_migration").Scan(&riverVersion))
	require.Equal(t, 7, riverVersion)
	var names []string
	require.NoError(t, d.Bun.NewRaw("SELECT name FROM bun_migrations ORDER BY id").Scan(ctx, &names))
	require.Equal(t, []string{"0001", "0002", "0003", "0004"}, names)

	set.River = append(set.River, db.RiverStep{Name: "0003", Comment: "river_schema", Version: 8})
	require.ErrorContains(t, db.Migrate(ctx, d, set, log), "has the number of another migration")
}

// TestStandardConformingStringsIsPinned: bun writes values as literals,
// so a database configured with standard_conforming_strings off must not
// change how they are read: every connection pins it on.
func TestStandardConformingStringsIsPinned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := emptyDatabase(t)
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "ALTER ROLE CURRENT_USER IN DATABASE "+conn.Config().Database+" SET standard_conforming_strings = off")
	require.NoError(t, err)
	conn.Close(ctx)
	d, err := db.Open(ctx, u, 2)
	require.NoError(t, err)
	defer d.Close()
	var scs, back string
	require.NoError(t, d.Bun.NewRaw("SHOW standard_conforming_strings").Scan(ctx, &scs))
	require.Equal(t, "on", scs)
	require.NoError(t, d.Bun.NewRaw("SELECT ?", `a\'b`).Scan(ctx, &back))
	require.Equal(t, `a\'b`, back, "a backslash in a value stays a backslash")
}

package db_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"svc/migrations"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// emptyDatabase creates a database with nothing in it (not from the
// migrated template) and returns its URL.
func emptyDatabase(t *testing.T) string { t.Helper(); return dbtest.NewEmptyURL(t) }

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
			errs[i] = db.Migrate(ctx, d, migrations.FS, log)
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
	require.Equal(t, sqlFiles, applied, "each migration applied exactly once")
	require.NoError(t, db.Migrate(ctx, d, migrations.FS, log), "running again is a no-op")
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM bun_migrations").Scan(&applied))
	require.Equal(t, sqlFiles, applied)
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

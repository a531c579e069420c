package db_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
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
func emptyDatabase(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin := dbtest.AdminURL(t)
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	defer conn.Close(ctx)
	name := fmt.Sprintf("t_empty_%d", rngID(t))
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	u, err := url.Parse(admin)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

func rngID(t *testing.T) int64 {
	var n int64
	for _, c := range t.Name() {
		n = n*31 + int64(c)
	}
	if n < 0 {
		n = -n
	}
	return n % 1_000_000_000
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

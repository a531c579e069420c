package dbtest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/platform/dbtest"
)

func TestNewGivesMigratedIsolatedDatabases(t *testing.T) {
	t.Parallel()
	a, b := dbtest.New(t), dbtest.New(t)
	ctx := context.Background()
	var n int
	require.NoError(t, a.Pool.QueryRow(ctx, "SELECT count(*) FROM assets").Scan(&n))
	require.Equal(t, 3, n)
	_, err := a.Pool.Exec(ctx, "INSERT INTO worker_heartbeats VALUES ('w', now())")
	require.NoError(t, err)
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM worker_heartbeats").Scan(&n))
	require.Equal(t, 0, n, "databases must be isolated")
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM river_migration").Scan(&n))
	require.Positive(t, n)
}

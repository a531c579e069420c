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

func TestConditionsAndSpread(t *testing.T) {
	modes := []dbtest.Mode{{Name: "alone"}, {Name: "cadence"}, {Name: "back_to_back"}}
	t.Setenv("DBTEST_CONDITIONS", "")
	require.Len(t, dbtest.Conditions(t, "DBTEST_CONDITIONS", modes), 3)
	t.Setenv("DBTEST_CONDITIONS", "cadence, alone")
	got := dbtest.Conditions(t, "DBTEST_CONDITIONS", modes)
	require.Equal(t, []string{"alone", "cadence"}, []string{got[0].Name, got[1].Name}, "in the order of the modes")
	med, lo, hi := dbtest.Spread([]float64{3, 1, 2, 10})
	require.Equal(t, []float64{2.5, 1, 10}, []float64{med, lo, hi})
}

func TestBackendsCPU(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	pid := dbtest.BackendPID(t, d.Pool)
	if _, ok := dbtest.ProcessCPU(pid); !ok {
		t.Skipf("the server's process %d cannot be read here (a server on another host?)", pid)
	}
	read := dbtest.BackendsCPU(t, d)
	before, ok := read()
	require.True(t, ok)
	_, err := d.Pool.Exec(context.Background(), "SELECT count(*) FROM generate_series(1, 3000000)")
	require.NoError(t, err)
	after, ok := read()
	require.True(t, ok)
	require.Greater(t, after, before)
}

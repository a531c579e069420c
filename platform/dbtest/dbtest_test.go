package dbtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/platform/db"
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

// TestServerMeter: the meter counts the work of its database's backends
// and leaves out a backend of another database.
func TestServerMeter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ours, other := dbtest.New(t), dbtest.New(t)
	pidOurs, pidOther := dbtest.BackendPID(t, ours.Pool), dbtest.BackendPID(t, other.Pool)
	if _, ok := dbtest.ProcessCPU(pidOurs); !ok {
		t.Skipf("the server's process %d cannot be read here (a server on another host?)", pidOurs)
	}
	u := dbtest.AdminURLOf(t, ours.Pool.Config().ConnString())
	m := dbtest.NewServerMeter(t, u)
	require.NotNil(t, m)
	oursCPU, _ := dbtest.ProcessCPU(pidOurs)
	otherCPU, _ := dbtest.ProcessCPU(pidOther)
	m.Start()
	for _, d := range []*db.DB{ours, other} {
		_, err := d.Pool.Exec(ctx, "SELECT count(*) FROM generate_series(1, 3000000)")
		require.NoError(t, err)
	}
	use := m.Stop()
	oursAfter, _ := dbtest.ProcessCPU(pidOurs)
	otherAfter, _ := dbtest.ProcessCPU(pidOther)
	t.Logf("ours %s, other %s; meter: own %s, total %s, others %s (%d backends)", oursAfter-oursCPU, otherAfter-otherCPU,
		use.Own, use.Total, use.Others, use.OtherBackends)
	require.GreaterOrEqual(t, use.OtherBackends, 1)
	// The kernel's two clocks (schedstat, ticks) differ by a tick or so.
	require.Greater(t, use.Others, (otherAfter-otherCPU)/2, "the other database's backend is taken out")
	require.Greater(t, use.Own, (oursAfter-oursCPU)/2, "the database's backend counts")
	require.Less(t, use.Own, use.Total-(otherAfter-otherCPU)/2, "the other database's backend is not in Own")
	require.Greater(t, use.Rest(), (oursAfter-oursCPU)/2)
}

// TestPgbench: a short TPC-B run reports its transactions and what each
// cost the server and pgbench.
func TestPgbench(t *testing.T) {
	if !dbtest.UsePgbench(t) {
		t.Skip("no pgbench installed")
	}
	r := dbtest.Pgbench(t, 2, time.Second)
	t.Log(r)
	require.Positive(t, r.Transactions)
	require.Positive(t, r.TPS)
	require.Positive(t, r.Client)
	if r.CPUMeasured {
		require.Positive(t, r.Server)
		require.Positive(t, r.CPUPerTransaction())
	}
}

package metrics_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"svc/platform/dbtest"
	"svc/platform/metrics"
)

// TestRowCounterCountsLateCommitsOnceAndRollbacksNever: rows are counted
// when they become visible, whatever the order their ids were drawn in; a
// row whose id is below rows already counted is counted when its
// transaction commits, even after the watermark would otherwise have
// passed it; rolled-back ids are never counted; rows from before the first
// call are not counted.
func TestRowCounterCountsLateCommitsOnceAndRollbacksNever(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.NewEmptyURL(t)
	sqldb, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sqldb.Close() })
	_, err = sqldb.ExecContext(ctx, `CREATE TABLE entries (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind text NOT NULL);
		INSERT INTO entries (kind) SELECT 'old' FROM generate_series(1, 50)`)
	require.NoError(t, err)
	conn := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(ctx) })
		return c
	}
	insert := func(c *pgx.Conn, kind string) pgx.Tx {
		tx, err := c.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "INSERT INTO entries (kind) VALUES ($1)", kind)
		require.NoError(t, err)
		return tx
	}
	commit := func(tx pgx.Tx) { require.NoError(t, tx.Commit(ctx)) }

	rc := &metrics.RowCounter{DB: sqldb, Table: "entries", Label: "kind", Labels: []string{"a", "b"}, Baseline: 5}
	count := func() map[string]int64 {
		got, err := rc.Count(ctx)
		require.NoError(t, err)
		return got
	}

	// In flight at the first call, with an id below a committed one.
	late := insert(conn(), "a")
	commit(insert(conn(), "b"))
	require.Equal(t, map[string]int64{"a": 0, "b": 0}, count(), "nothing before the first call is counted")

	commit(late)
	commit(insert(conn(), "a"))
	require.Equal(t, map[string]int64{"a": 2, "b": 0}, count(), "the late row and the new one")
	for range 3 { // nothing running: the watermark moves up
		require.Equal(t, map[string]int64{"a": 2, "b": 0}, count())
	}

	// A transaction that draws its id now and commits after several calls,
	// while others commit above it; one that rolls back.
	slow := insert(conn(), "b")
	rolled := insert(conn(), "a")
	require.NoError(t, rolled.Rollback(ctx))
	for i := range 3 {
		commit(insert(conn(), "a"))
		require.Equal(t, map[string]int64{"a": int64(3 + i), "b": 0}, count(), "the slow row is not visible yet")
	}
	commit(slow)
	require.Equal(t, map[string]int64{"a": 5, "b": 1}, count(), "the slow row once, the rolled-back id never")
	for range 3 {
		require.Equal(t, map[string]int64{"a": 5, "b": 1}, count(), "counted once")
	}

	// More new rows than one call reads: the next calls catch up.
	rc2 := &metrics.RowCounter{DB: sqldb, Table: "entries", Label: "kind", Batch: 7}
	count2 := func() map[string]int64 {
		got, err := rc2.Count(ctx)
		require.NoError(t, err)
		return got
	}
	require.Empty(t, count2())
	_, err = sqldb.ExecContext(ctx, "INSERT INTO entries (kind) SELECT 'c' FROM generate_series(1, 20)")
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"c": 7}, count2())
	require.Equal(t, map[string]int64{"c": 14}, count2())
	require.Equal(t, map[string]int64{"c": 20}, count2())
	require.Equal(t, map[string]int64{"c": 20}, count2())
}

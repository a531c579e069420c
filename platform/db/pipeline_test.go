package db_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"svc/platform/db"
	"svc/platform/dbtest"
)

func openEmpty(t *testing.T) *db.DB {
	t.Helper()
	d, err := db.Open(context.Background(), dbtest.NewEmptyURL(t), 4)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

// TestPipeline: the statements of a batch commit together, or none of
// them when a later one fails; a pipeline needs the pool.
func TestPipeline(t *testing.T) {
	t.Parallel()
	d := openEmpty(t)
	ctx := context.Background()
	_, err := d.Bun.ExecContext(ctx, "CREATE TABLE p (n int PRIMARY KEY)")
	require.NoError(t, err)
	count := func() int {
		var n int
		require.NoError(t, d.Bun.NewRaw("SELECT count(*) FROM p").Scan(ctx, &n))
		return n
	}
	send := func(ns ...int) error {
		var b pgx.Batch
		for _, n := range ns {
			b.Queue("INSERT INTO p VALUES ($1)", n)
		}
		return db.Pipeline(ctx, d.Bun, &b, func(br pgx.BatchResults) error {
			for range ns {
				if _, err := br.Exec(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, send(1, 2))
	require.Equal(t, 2, count())
	err = send(3, 4, 1) // the last repeats a key
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "23505", pe.Code)
	require.Equal(t, 2, count(), "3 and 4 were rolled back with the failed statement")

	// A serialization failure is retried with the whole batch, whose first
	// attempt left nothing behind.
	_, err = d.Bun.ExecContext(ctx, `CREATE SEQUENCE attempts;
CREATE FUNCTION fail_first() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF nextval('attempts') = 1 THEN
        RAISE EXCEPTION 'first attempt' USING ERRCODE = 'serialization_failure';
    END IF;
    RETURN true;
END $$`)
	require.NoError(t, err)
	var b pgx.Batch
	b.Queue("INSERT INTO p VALUES ($1)", 5)
	b.Queue("SELECT fail_first()")
	reads := 0
	require.NoError(t, db.Pipeline(ctx, d.Bun, &b, func(br pgx.BatchResults) error {
		reads++
		if _, err := br.Exec(); err != nil {
			return err
		}
		_, err := br.Exec()
		return err
	}))
	require.Equal(t, 2, reads, "sent twice")
	require.Equal(t, 3, count(), "the row once")

	tx, err := d.Bun.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck // the test's own transaction
	require.Error(t, db.Pipeline(ctx, tx, &pgx.Batch{}, func(pgx.BatchResults) error { return nil }))
}

// TestQueriesWithoutArgumentsAreNotPrepared: bun's queries, whose values are
// in the text, are not prepared as named statements (one round trip, no
// statement cache churn); queries with arguments are, once per shape.
func TestQueriesWithoutArgumentsAreNotPrepared(t *testing.T) {
	t.Parallel()
	d := openEmpty(t)
	ctx := context.Background()
	conn, err := d.SQL.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	prepared := func() int {
		var n int
		require.NoError(t, conn.QueryRowContext(ctx, "SELECT count(*) FROM pg_prepared_statements WHERE $1", true).Scan(&n))
		return n
	}
	before := prepared()
	for i := range 3 {
		var n int
		require.NoError(t, conn.QueryRowContext(ctx, "SELECT "+string(rune('1'+i))).Scan(&n))
		require.Equal(t, i+1, n)
	}
	require.Equal(t, before, prepared(), "no statement without arguments was prepared, and the counting one only once")
}

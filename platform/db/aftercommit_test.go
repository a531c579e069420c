package db_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/platform/db"
)

// TestAfterCommit: a hook runs once its transaction has committed (its
// writes visible to another connection), never when it rolls back, only
// for the attempt that commits when RunInTx retries, and after the outer
// commit for a nested RunInTx; outside RunInTx and BatchTx none registers.
func TestAfterCommit(t *testing.T) {
	t.Parallel()
	d := openEmpty(t)
	ctx := context.Background()
	_, err := d.Bun.ExecContext(ctx, "CREATE TABLE h (n int PRIMARY KEY)")
	require.NoError(t, err)
	visible := func(n int) bool {
		var ok bool
		require.NoError(t, d.Bun.NewRaw("SELECT EXISTS (SELECT 1 FROM h WHERE n = ?)", n).Scan(ctx, &ok))
		return ok
	}

	require.False(t, db.AfterCommit(ctx, func() {}), "no transaction of RunInTx or BatchTx")

	var ran []string
	require.NoError(t, db.RunInTx(ctx, d.Bun, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO h VALUES (1)"); err != nil {
			return err
		}
		require.True(t, db.AfterCommit(ctx, func() {
			require.True(t, visible(1), "the hook runs after the commit")
			ran = append(ran, "committed")
		}))
		require.Empty(t, ran)
		return nil
	}))
	require.Equal(t, []string{"committed"}, ran)

	boom := errors.New("rolled back")
	require.ErrorIs(t, db.RunInTx(ctx, d.Bun, func(ctx context.Context, tx bun.Tx) error {
		require.True(t, db.AfterCommit(ctx, func() { ran = append(ran, "rolled back") }))
		return boom
	}), boom)
	require.Equal(t, []string{"committed"}, ran)

	// Retried: the first attempt's deadlock drops its hook.
	attempts := 0
	require.NoError(t, db.RunInTx(ctx, d.Bun, func(ctx context.Context, tx bun.Tx) error {
		attempts++
		n := attempts
		require.True(t, db.AfterCommit(ctx, func() { ran = append(ran, "attempt "+string(rune('0'+n))) }))
		if attempts == 1 {
			return &pgconn.PgError{Code: "40P01"}
		}
		return nil
	}))
	require.Equal(t, 2, attempts)
	require.Equal(t, []string{"committed", "attempt 2"}, ran)

	// Nested: the savepoint commits nothing, the outer commit runs it.
	require.NoError(t, db.RunInTx(ctx, d.Bun, func(ctx context.Context, tx bun.Tx) error {
		err := db.RunInTx(ctx, tx, func(ctx context.Context, tx bun.Tx) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO h VALUES (2)"); err != nil {
				return err
			}
			require.True(t, db.AfterCommit(ctx, func() {
				require.True(t, visible(2), "after the outer commit")
				ran = append(ran, "nested")
			}))
			return nil
		})
		require.Empty(t, ran[2:], "not at the savepoint's release")
		return err
	}))
	require.Equal(t, []string{"committed", "attempt 2", "nested"}, ran)

	// BatchTx: after its commit, not on its failure.
	require.NoError(t, db.BatchTx(ctx, d.Bun, func(ctx context.Context, tx *sql.Tx, _ db.SendBatch) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO h VALUES (3)"); err != nil {
			return err
		}
		require.True(t, db.AfterCommit(ctx, func() {
			require.True(t, visible(3))
			ran = append(ran, "batch")
		}))
		return nil
	}))
	require.ErrorIs(t, db.BatchTx(ctx, d.Bun, func(ctx context.Context, _ *sql.Tx, _ db.SendBatch) error {
		require.True(t, db.AfterCommit(ctx, func() { ran = append(ran, "batch rolled back") }))
		return boom
	}), boom)
	require.Equal(t, []string{"committed", "attempt 2", "nested", "batch"}, ran)
}

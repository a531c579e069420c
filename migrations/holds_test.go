package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestHoldsMigrationKeepsEventsAndTakesTheHoldTypes: migration 0041 on a
// database with events already written keeps them, accepts the three hold
// event types from then on, and still refuses a type nobody emits.
func TestHoldsMigrationKeepsEventsAndTakesTheHoldTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := migratedBefore(t, "0041_holds.tx.up.sql")
	insert := func(typ string) error {
		_, err := d.Pool.Exec(ctx, `INSERT INTO outbound_events (id, type, status, attempts, next_attempt_at, payload, created_at)
VALUES ($1, $2, 'pending', 0, now(), '{}', now())`, uuid.New(), typ)
		return err
	}
	require.NoError(t, insert("withdrawal.failed"))
	require.Error(t, insert("hold.captured"), "not before 0041")

	migrateAll(t, d)

	var n int
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM outbound_events WHERE type = 'withdrawal.failed'").Scan(&n))
	require.Equal(t, 1, n, "the events written before are kept")
	for _, typ := range []string{"hold.captured", "hold.voided", "hold.expired", "deposit.settled"} {
		require.NoError(t, insert(typ), typ)
	}
	require.Error(t, insert("hold.created"))
	var valid bool
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT convalidated FROM pg_constraint WHERE conname = 'outbound_events_type_check'`).Scan(&valid))
	require.False(t, valid, "added NOT VALID: no scan of the table under its lock")

	// An empty holds table is there, with its guards.
	_, err := d.Pool.Exec(ctx, `INSERT INTO holds (id, payer_platform, payer, asset, status, amount, expires_at, created_at, updated_at)
VALUES ($1, false, 'u', 'BTC', 'captured', 10, $2, $2, $2)`, uuid.New(), time.Now())
	require.Error(t, err, "a captured hold needs its captured amount")
}

package migrations_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTransfersMigration: an event written before 0040 is kept, and after
// it outbound_events accepts transfer.completed and still refuses a type
// it does not know; transfers, their legs and their parties refuse an
// update, a delete and a truncate even from the schema's owner, and a leg
// from an account to itself.
func TestTransfersMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := migratedBefore(t, "0040")
	event := `INSERT INTO outbound_events (id, type, status, attempts, next_attempt_at, payload, created_at, redeliveries)
VALUES (gen_random_uuid(), $1, 'pending', 0, now(), '{}', now(), 0)`
	_, err := d.Pool.Exec(ctx, event, "withdrawal.failed")
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, event, "transfer.completed")
	require.ErrorContains(t, err, "outbound_events_type_check", "not before 0040")

	migrateAll(t, d)
	var n int
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM outbound_events WHERE type = 'withdrawal.failed'").Scan(&n))
	require.Equal(t, 1, n)
	_, err = d.Pool.Exec(ctx, event, "transfer.completed")
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, event, "transfer.exploded")
	require.ErrorContains(t, err, "outbound_events_type_check")

	id := "01a20000-0000-7000-8000-0000000000a1"
	for _, q := range []string{
		`INSERT INTO transfers (id, leg_count, created_at) VALUES ('` + id + `', 1, now())`,
		`INSERT INTO transfer_legs (transfer_id, leg, asset, from_platform, from_owner, to_platform, to_owner, amount)
VALUES ('` + id + `', 0, 'BTC', false, 'ann', true, 'ann', 5)`,
		`INSERT INTO transfer_parties (platform, owner, created_at, transfer_id)
SELECT false, 'ann', created_at, id FROM transfers`,
	} {
		_, err := d.Pool.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	for _, q := range []string{
		"UPDATE transfers SET description = 'x'", "DELETE FROM transfers", "TRUNCATE transfers CASCADE",
		"UPDATE transfer_legs SET amount = 6", "DELETE FROM transfer_legs", "TRUNCATE transfer_legs",
		"UPDATE transfer_parties SET owner = 'bob'", "DELETE FROM transfer_parties", "TRUNCATE transfer_parties",
	} {
		_, err := d.Pool.Exec(ctx, q)
		require.ErrorContains(t, err, "append-only", q)
	}
	_, err = d.Pool.Exec(ctx, `INSERT INTO transfer_legs (transfer_id, leg, asset, from_platform, from_owner, to_platform, to_owner, amount)
VALUES ('`+id+`', 1, 'BTC', true, 'pool', true, 'pool', 5)`)
	require.ErrorContains(t, err, "transfer_legs_distinct_accounts")
}

package idempotency_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"svc/platform/db"
	"svc/platform/dbtest"
)

// The rules of a key's single columns are their types (migration 0029):
// the database still refuses a key that breaks one, under the rule's old
// name, whatever writes it.
func TestDatabaseRefusesBadKeyColumns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbtest.NewURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	const insert = `INSERT INTO idempotency_keys (key, method, path, request_hash, state) VALUES ($1, 'POST', '/v1/x', '\x00', $2)`
	for _, tc := range []struct{ name, key, state, rule string }{
		{"EmptyKey", "", "in_flight", "idempotency_keys_key_check"},
		{"LongKey", strings.Repeat("k", 301), "in_flight", "idempotency_keys_key_check"},
		{"UnknownState", "k-1", "forgotten", "idempotency_keys_state_check"},
	} {
		_, err := conn.Exec(ctx, insert, tc.key, tc.state)
		require.True(t, db.IsCheckViolation(err, tc.rule), "%s: %v", tc.name, err)
	}
	_, err = conn.Exec(ctx, insert, "k-ok", "in_flight")
	require.NoError(t, err, "a good key is kept")
}

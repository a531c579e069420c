package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/modules/liabilities"
)

// TestAdminLiabilitiesSnapshotKey: with --key a snapshot is requested by
// the operator the enrollment chain enrolled the key for (op:NAME); a key
// the chain does not know is refused before anything is taken.
func TestAdminLiabilitiesSnapshotKey(t *testing.T) {
	d := migratedDB(t)
	ctx := context.Background()
	dir := t.TempDir()
	key, _ := keygen(t, dir, "ops")
	other, _ := keygen(t, dir, "other")
	out, err := run(t, "admin", "operators", "init", "--name", "ops", "--key", key)
	require.NoError(t, err, out)

	out, err = run(t, "admin", "liabilities", "snapshot", "--key", other)
	require.ErrorContains(t, err, "is not an enrolled operator key", out)
	n, err := d.Bun.NewSelect().Table("liabilities_snapshots").Count(ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	out, err = run(t, "admin", "liabilities", "snapshot", "--key", key, "--json")
	require.NoError(t, err, out)
	var list liabilities.PublishedList
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.NotEmpty(t, list.Snapshots)
	var by string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT requested_by FROM liabilities_snapshots WHERE id = $1`, list.Snapshots[0].SnapshotID).Scan(&by))
	require.Equal(t, "op:ops", by)
}

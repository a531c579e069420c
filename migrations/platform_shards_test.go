package migrations_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPlatformShardsBackfill: a platform account created before its
// available balance was kept in shards has all 64 rows after 0046, with
// its balance still in shard 0 and no posting added; a user whose id looks
// like a platform account's name gets none.
func TestPlatformShardsBackfill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := migratedBefore(t, "0044")
	for _, q := range []string{
		`INSERT INTO ledger_accounts (asset, kind, owner, balance) VALUES ('BTC', 'platform_available', 'revenue', 0)`,
		`INSERT INTO ledger_accounts (asset, kind, owner, balance) VALUES ('BTC', 'user_available', 'prizes', 0)`,
	} {
		_, err := d.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	postings := textMap(t, d, `SELECT 'n', count(*)::text FROM ledger_postings`)
	migrateAll(t, d)
	require.Equal(t, map[string]string{"revenue": "64", "prizes": "1"}, textMap(t, d, `
SELECT split_part(owner, '#', 1), count(*)::text FROM ledger_accounts
 WHERE asset = 'BTC' AND owner IN ('prizes') OR (kind = 'platform_available' AND split_part(owner, '#', 1) = 'revenue')
 GROUP BY 1`))
	require.Equal(t, postings, textMap(t, d, `SELECT 'n', count(*)::text FROM ledger_postings`))
	require.Equal(t, map[string]string{"ledger_accounts_owner": "true"},
		textMap(t, d, `SELECT conname, convalidated::text FROM pg_constraint WHERE conname = 'ledger_accounts_owner'`))
}

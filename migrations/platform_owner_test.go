package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestPlatformOwner: 0042 lets a deposit or a withdrawal belong to a
// platform account instead of a user, exactly one of the two, without
// rewriting either table; the rows written before keep their user, and
// its rules are validated.
func TestPlatformOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := migratedBefore(t, "0042")
	for _, q := range []string{
		`INSERT INTO deposits (id, external_user_id, asset, status, created_at, updated_at)
         VALUES ('01a20000-0000-7000-8000-000000000001', 'ann', 'BTC', 'creating', now(), now())`,
		`INSERT INTO withdrawals (id, external_user_id, asset, status, destination, amount_gross, fee_mode, fee_estimate,
             approval_reason, volume_minute, created_at, updated_at)
         VALUES ('01a20000-0000-7000-8000-000000000002', 'ann', 'BTC', 'pending_approval', 'bcrt1qold', 1000, 'deduct', 10,
             'test', date_trunc('minute', now()), now(), now())`,
	} {
		_, err := d.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	files := textMap(t, d, `SELECT relname, relfilenode::text FROM pg_class WHERE relname IN ('deposits', 'withdrawals')`)

	migrateAll(t, d)
	require.Equal(t, files, textMap(t, d, `SELECT relname, relfilenode::text FROM pg_class WHERE relname IN ('deposits', 'withdrawals')`),
		"neither table was rewritten")
	require.Equal(t, map[string]string{
		"deposits_one_owner":                "true",
		"deposits_platform_account_name":    "true",
		"withdrawals_one_owner":             "true",
		"withdrawals_platform_account_name": "true",
	}, textMap(t, d, `SELECT conname, convalidated::text FROM pg_constraint
 WHERE conname LIKE '%one_owner' OR conname LIKE '%platform_account_name'`))
	require.Equal(t, map[string]string{"deposits": "ann", "withdrawals": "ann"},
		textMap(t, d, `SELECT 'deposits', external_user_id || coalesce(platform_account, '') FROM deposits
 UNION ALL SELECT 'withdrawals', external_user_id || coalesce(platform_account, '') FROM withdrawals`))

	insert := func(user, platform any) error {
		_, err := d.Pool.Exec(ctx, `INSERT INTO deposits (id, external_user_id, platform_account, asset, status, created_at, updated_at)
         VALUES (gen_random_uuid(), $1, $2, 'BTC', 'creating', now(), now())`, user, platform)
		return err
	}
	violates := func(err error, constraint string) {
		t.Helper()
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, constraint, pe.ConstraintName)
	}
	require.NoError(t, insert(nil, "prize.pool"))
	require.NoError(t, insert("bob", nil))
	violates(insert(nil, nil), "deposits_one_owner")
	violates(insert("bob", "prize.pool"), "deposits_one_owner")
	violates(insert(nil, "Prize Pool"), "deposits_platform_account_name")
	wd := func(user, platform any) error {
		_, err := d.Pool.Exec(ctx, `INSERT INTO withdrawals (id, external_user_id, platform_account, asset, status, destination,
             amount_gross, fee_mode, fee_estimate, approval_reason, volume_minute, created_at, updated_at)
         VALUES (gen_random_uuid(), $1, $2, 'BTC', 'pending_approval', 'bcrt1qnew', 1000, 'deduct', 10, 'test',
             date_trunc('minute', now()), now(), now())`, user, platform)
		return err
	}
	require.NoError(t, wd(nil, "revenue"))
	violates(wd(nil, nil), "withdrawals_one_owner")
	violates(wd("bob", "revenue"), "withdrawals_one_owner")
	violates(wd(nil, "rev enue"), "withdrawals_platform_account_name")
	// The owner is one of a withdrawal's instructions, which never change.
	_, err := d.Pool.Exec(ctx, `UPDATE withdrawals SET platform_account = 'other' WHERE platform_account = 'revenue'`)
	violates(err, "withdrawals_instructions_fixed")
	_, err = d.Pool.Exec(ctx, `UPDATE withdrawals SET external_user_id = 'bob' WHERE external_user_id = 'ann'`)
	violates(err, "withdrawals_instructions_fixed")
}

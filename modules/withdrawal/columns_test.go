package withdrawal_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/modules/withdrawal"
	"svc/platform/chain"
	"svc/platform/db"
)

// TestDatabaseRefusesBadWithdrawalColumns: the rules of the withdrawals
// table's single columns, domains since migration 0028, still refuse what
// they refused as CHECK constraints, whoever writes.
func TestDatabaseRefusesBadWithdrawalColumns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "d", asset.BTC, 1_000_000)
	w := e.create(t, "d", asset.BTC, 50_000, p2wpkh(t, chain.Regtest, "d"))
	for _, set := range []string{
		"status = 'paid'",
		"status = ''",
		"fee_mode = 'split'",
		"approval_mode = 'maybe'",
		"destination = ''",
		"destination = repeat('x', 2049)",
		"external_user_id = ''",
		"external_user_id = repeat('u', 256)",
		"amount_gross = 0",
		"amount_gross = -1",
		"fee_estimate = -1",
		"fee = -1, amount_net = 1",
		"fee = 1, amount_net = 0",
		"network_fee = -1",
		"submit_attempts = -1",
		"released_by = 'op', release_attestation = 'too short'",
	} {
		_, err := e.App.DB.Bun.ExecContext(context.Background(), "UPDATE withdrawals SET "+set+" WHERE id = ?", w.WithdrawalID)
		require.True(t, db.IsCheckViolation(err, ""), "%s: %v", set, err)
	}
	got := e.get(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusApproved, got.Status)
	require.Equal(t, "0.00050000", got.AmountGross)
}

package withdrawal_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
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

// TestDatabaseKeepsAQueuedPayoutsInstructions: what the submitter pays
// (the destination, the gross, the asset, the user, the fee mode, and the
// fee and net once fixed) cannot be changed by the runtime role the
// service runs as (migration 0032), before the fee is fixed or after; the
// fee is fixed once, by the submitter, to what the fee mode makes it, and
// the processor is asked for exactly what was requested.
func TestDatabaseKeepsAQueuedPayoutsInstructions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "q", asset.BTC, 1_000_000)
	dest := p2wpkh(t, chain.Regtest, "queued payout")
	w := e.create(t, "q", asset.BTC, 100_000, dest)
	require.Equal(t, withdrawal.StatusApproved, w.Status)
	ctx := context.Background()
	refused := func(want, set string) {
		t.Helper()
		_, err := e.App.DB.Bun.ExecContext(ctx, "UPDATE withdrawals SET "+set+" WHERE id = ?", w.WithdrawalID)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, set)
		require.Equal(t, want, pe.ConstraintName, "%s: %v", set, err)
	}
	mallory := p2wpkh(t, chain.Regtest, "mallory")
	for _, set := range []string{
		"destination = '" + mallory + "'",
		"amount_gross = amount_gross * 1000",
		"asset = 'BTC_LN'",
		"external_user_id = 'mallory'",
		"fee_mode = 'absorb'",
		"id = gen_random_uuid()",
	} {
		refused("withdrawals_instructions_fixed", set)
	}
	for _, set := range []string{
		"fee = 0, amount_net = amount_gross * 1000",
		"fee = 0, amount_net = amount_gross - 1",
		"fee = 10, amount_net = amount_gross",
		"amount_net = 1",
		"fee = 1",
	} {
		refused("withdrawals_fee_net", set)
	}

	// The submitter fixes the fee once: NULL to a value.
	e.pass(t)
	v := e.get(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusSubmitted, v.Status)
	row := e.row(t, w.WithdrawalID)
	require.Equal(t, int64(100_000), *row.Fee+*row.AmountNet)
	for _, set := range []string{
		"amount_net = amount_gross * 1000",
		"fee = 0, amount_net = amount_gross",
		"fee = fee + 1, amount_net = amount_net - 1",
		"fee = NULL, amount_net = NULL",
		"destination = '" + mallory + "'",
	} {
		refused("withdrawals_instructions_fixed", set)
	}
	// Nor deleted, to be inserted again with other instructions.
	_, err := e.App.DB.Bun.ExecContext(ctx, "DELETE FROM withdrawals WHERE id = ?", w.WithdrawalID)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "withdrawals_never_deleted", pe.ConstraintName, "%v", err)
	p := e.onePayout(t, w.WithdrawalID)
	require.Equal(t, dest, p.Destination)
	require.Equal(t, *v.AmountNet, p.Amount)
	require.Equal(t, row, e.row(t, w.WithdrawalID))
}

package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/btcsuite/btcd/btcutil"
	"github.com/stretchr/testify/require"

	"svc/modules/ledger"
	"svc/modules/withdrawal"
	"svc/platform/btcpay"
	"svc/platform/chain"
)

type fixedRate struct{}

func (fixedRate) FeeRate(context.Context, int) (btcpay.Amount, error) {
	return btcpay.AmountFromUnits(2, 0), nil
}

// TestAdminWithdrawals drives the approval queue from the command line:
// list, show, approve (which needs --as), reject and release, with the
// decisions named cli:NAME and the ledger check clean after each.
func TestAdminWithdrawals(t *testing.T) {
	d := migratedDB(t)
	ctx := context.Background()
	creditAlice(t, d, 10_000_000, 1)
	s := &withdrawal.Service{DB: d.Bun, Fees: fixedRate{}, Now: time.Now,
		Config: withdrawal.Config{Network: chain.Regtest, FeeMode: ledger.FeeDeduct, AssumedTxVBytes: 141}}
	dest := func(seed string) string {
		h := sha256.Sum256([]byte(seed))
		a, err := btcutil.NewAddressWitnessPubKeyHash(h[:20], chain.Regtest.Params())
		require.NoError(t, err)
		return a.EncodeAddress()
	}
	var ids []string
	for i, units := range []int64{2_000_000, 3_000_000, 4_000_000} { // above the 0.01 BTC auto limit
		v, _, err := s.Create(ctx, withdrawal.CreateParams{ExternalUserID: "alice", Asset: "BTC", Amount: units, Destination: dest(string(rune('a' + i)))}, nil)
		require.NoError(t, err)
		require.Equal(t, withdrawal.StatusPendingApproval, v.Status)
		ids = append(ids, v.WithdrawalID)
	}

	out, err := run(t, "admin", "withdrawals", "list", "--status", "pending_approval")
	require.NoError(t, err, out)
	for _, id := range ids {
		require.Contains(t, out, id)
	}
	require.Contains(t, out, "withdrawal_auto_limit")

	_, err = run(t, "admin", "withdrawals", "approve", ids[0])
	require.ErrorContains(t, err, "--as NAME is required")
	out, err = run(t, "admin", "withdrawals", "approve", ids[0], "--as", "alice-ops", "--note", "ok")
	require.NoError(t, err, out)
	require.Contains(t, out, "is approved (approved by cli:alice-ops)")
	_, err = run(t, "admin", "withdrawals", "approve", ids[0], "--as", "bob-ops")
	require.ErrorContains(t, err, "cannot approve a withdrawal that is approved")

	out, err = run(t, "admin", "withdrawals", "reject", ids[1], "--as", "bob-ops", "--reason", "fraud check")
	require.NoError(t, err, out)
	require.Contains(t, out, "is refunded: 0.03000000 BTC returned to alice")

	_, err = run(t, "admin", "withdrawals", "release", ids[0], "--as", "carol-ops", "--attestation", "short")
	require.ErrorContains(t, err, "attestation must have 10 to 2000 characters")
	out, err = run(t, "admin", "withdrawals", "release", ids[0], "--as", "carol-ops", "--attestation", "no payout was ever created for this withdrawal")
	require.NoError(t, err, out)
	require.Contains(t, out, "released by cli:carol-ops")

	out, err = run(t, "admin", "withdrawals", "show", ids[0], "--json")
	require.NoError(t, err, out)
	var v withdrawal.AdminView
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.Equal(t, withdrawal.StatusRefunded, v.Status)
	require.Equal(t, "cli:alice-ops", *v.ApprovedBy)
	require.Equal(t, "cli:carol-ops", *v.ReleasedBy)
	require.Equal(t, "no payout was ever created for this withdrawal", *v.ReleaseAttestation)

	out, err = run(t, "admin", "withdrawals", "show", ids[1])
	require.NoError(t, err, out)
	require.Contains(t, out, "cli:bob-ops")
	require.Contains(t, out, "rejected by an operator: fraud check")

	out, err = run(t, "admin", "audit", "--json")
	require.NoError(t, err, out)
	for _, want := range []string{`"withdrawal.approve"`, `"withdrawal.reject"`, `"withdrawal.release"`} {
		require.Contains(t, out, want)
	}

	out, err = run(t, "admin", "ledger", "check")
	require.NoError(t, err, out)
	require.Contains(t, out, "holds vs open withdrawals: 0")
	// A hold that no withdrawal explains is named.
	_, err = ledger.PlaceHold(ctx, d.Bun, "BTC", ledger.UserHolder("alice"), 1_000, "stray-hold", "test")
	require.NoError(t, err)
	out, err = run(t, "admin", "ledger", "check")
	require.ErrorIs(t, err, errLedgerInconsistent)
	require.True(t, strings.Contains(out, `user_hold of "alice"`), out)
}

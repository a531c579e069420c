package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/btcsuite/btcd/btcutil"
	"github.com/stretchr/testify/require"

	"svc/modules/ledger"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/modules/withdrawal"
	"svc/platform/btcpay"
	"svc/platform/chain"
)

type fixedRate struct{}

func (fixedRate) FeeRate(context.Context, int) (btcpay.Amount, error) {
	return btcpay.AmountFromUnits(2, 0), nil
}

// keyFiles writes the signers' private keys to files named after them in
// a temporary directory, as svc admin operators keygen would, and returns
// their paths by name.
func keyFiles(t *testing.T, signers map[string]*operator.Signer) map[string]string {
	t.Helper()
	dir := t.TempDir()
	out := map[string]string{}
	for name, s := range signers {
		out[name] = filepath.Join(dir, name+".key")
		require.NoError(t, s.WriteFile(out[name]))
	}
	return out
}

// TestAdminWithdrawals drives the approval queue from the command line:
// list, show, approve (which needs --key), reject and release, each
// signed with an enrolled operator's key file and recorded as op:NAME,
// four-eyes by two operators (not one operator's two keys), and the
// ledger check clean after each.
func TestAdminWithdrawals(t *testing.T) {
	d := migratedDB(t)
	ctx := context.Background()
	t.Setenv(KeyEnv, "")
	creditAlice(t, d, 20_000_000, 1)
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
	signers := operatortest.Team(t, d.Bun, time.Now,
		operatortest.Member{Name: "alice-ops", Role: operator.Admin}, operatortest.Member{Name: "bob-ops", Role: operator.Approver})
	// alice-ops' second key, and a key nobody enrolled.
	signers["alice-ops-2"], signers["stranger"] = operatortest.NewSigner(t), operatortest.NewSigner(t)
	opsvc := &operator.Service{DB: d.Bun, Now: time.Now}
	head, err := opsvc.Head(ctx, d.Bun)
	require.NoError(t, err)
	add := operator.Change{Action: operator.ActionAddKey, Name: "alice-ops", PublicKey: signers["alice-ops-2"].Public().String()}
	_, err = opsvc.Submit(ctx, operatortest.Sign(t, signers["alice-ops"], add.Statement(head, time.Now())))
	require.NoError(t, err)
	keys := keyFiles(t, signers)

	out, err := run(t, "admin", "withdrawals", "list", "--status", "pending_approval")
	require.NoError(t, err, out)
	for _, id := range ids {
		require.Contains(t, out, id)
	}
	require.Contains(t, out, "withdrawal_auto_limit")

	_, err = run(t, "admin", "withdrawals", "approve", ids[0])
	require.ErrorContains(t, err, "--key FILE")
	_, err = run(t, "admin", "withdrawals", "approve", ids[0], "--as", "alice-ops")
	require.ErrorContains(t, err, "unknown flag: --as")
	_, err = run(t, "admin", "withdrawals", "approve", ids[0], "--key", keys["stranger"])
	require.ErrorContains(t, err, "not an enrolled operator key")
	out, err = run(t, "admin", "withdrawals", "approve", ids[0], "--key", keys["alice-ops"], "--note", "ok")
	require.NoError(t, err, out)
	require.Contains(t, out, `signing withdrawal.approve of `+ids[0]+`: amount="0.02000000" asset="BTC" destination="`+dest("a")+`" note="ok"`)
	require.Contains(t, out, "is approved (approved by op:alice-ops)")
	_, err = run(t, "admin", "withdrawals", "approve", ids[0], "--key", keys["bob-ops"])
	require.ErrorContains(t, err, "cannot approve a withdrawal that is approved")

	// $SVC_OPERATOR_KEY names the key when --key does not.
	t.Setenv(KeyEnv, keys["bob-ops"])
	out, err = run(t, "admin", "withdrawals", "reject", ids[1], "--reason", "fraud check")
	require.NoError(t, err, out)
	require.Contains(t, out, "is refunded: 0.03000000 BTC returned to alice")
	t.Setenv(KeyEnv, "")

	_, err = run(t, "admin", "withdrawals", "release", ids[0], "--key", keys["bob-ops"], "--attestation", "short")
	require.ErrorContains(t, err, "attestation must have 10 to 2000 characters")
	out, err = run(t, "admin", "withdrawals", "release", ids[0], "--key", keys["bob-ops"], "--attestation", "no payout was ever created for this withdrawal")
	require.NoError(t, err, out)
	require.Contains(t, out, "released by op:bob-ops")

	out, err = run(t, "admin", "withdrawals", "show", ids[0], "--json")
	require.NoError(t, err, out)
	var v withdrawal.AdminView
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.Equal(t, withdrawal.StatusRefunded, v.Status)
	require.Equal(t, "op:alice-ops", *v.ApprovedBy)
	require.Equal(t, "op:bob-ops", *v.ReleasedBy)
	require.Equal(t, "no payout was ever created for this withdrawal", *v.ReleaseAttestation)
	require.Len(t, v.Approvals, 1)
	require.Equal(t, "alice-ops", *v.Approvals[0].Operator)
	require.True(t, v.Approvals[0].SignatureVerified)

	out, err = run(t, "admin", "withdrawals", "show", ids[1])
	require.NoError(t, err, out)
	require.Contains(t, out, "op:bob-ops")
	require.Contains(t, out, "rejected by an operator: fraud check")

	// Four-eyes above 0.03 BTC: alice-ops' second key is still alice-ops;
	// bob-ops is the second operator.
	_, err = d.Bun.ExecContext(ctx, "UPDATE assets SET withdrawal_four_eyes_threshold = 3000000 WHERE asset = 'BTC'")
	require.NoError(t, err)
	out, err = run(t, "admin", "withdrawals", "approve", ids[2], "--key", keys["alice-ops"])
	require.NoError(t, err, out)
	require.Contains(t, out, "approval by op:alice-ops recorded; 1 more approval by a different operator is needed (four-eyes)")
	_, err = run(t, "admin", "withdrawals", "approve", ids[2], "--key", keys["alice-ops-2"])
	require.ErrorContains(t, err, "four-eyes approval needs a different operator")
	out, err = run(t, "admin", "withdrawals", "approve", ids[2], "--key", keys["bob-ops"], "--json")
	require.NoError(t, err, out)
	var av withdrawal.ApprovedView
	require.NoError(t, json.Unmarshal([]byte(out), &av), out)
	require.Equal(t, withdrawal.StatusApproved, av.Status)
	require.Equal(t, "op:alice-ops, op:bob-ops", *av.ApprovedBy)
	out, err = run(t, "admin", "withdrawals", "show", ids[2])
	require.NoError(t, err, out)
	require.Contains(t, out, "op:alice-ops at ")
	require.Contains(t, out, "(signature verified, key "+signers["bob-ops"].Public().ID()+")")

	out, err = run(t, "admin", "audit", "--json")
	require.NoError(t, err, out)
	for _, want := range []string{`"withdrawal.approve"`, `"withdrawal.reject"`, `"withdrawal.release"`, `"op:alice-ops"`, `"op:bob-ops"`} {
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

package withdrawal_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/modules/ledger"
	"svc/modules/withdrawal"
	"svc/platform/chain"
)

// windowTotal is the asset's rolling 24-hour volume as the gate sees it.
func (e *env) windowTotal(t testing.TB, code string) int64 {
	t.Helper()
	var total int64
	require.NoError(t, e.App.DB.Bun.NewSelect().Table("withdrawal_windows").Column("total").Where("asset = ?", code).
		Scan(context.Background(), &total))
	return total
}

// TestRefusalsGiveTheVolumeBack: a request refused after its volume was
// reserved (402) gives it back, so refused requests never fill the cap;
// rejections give it back too.
func TestRefusalsGiveTheVolumeBack(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "v", asset.BTC, 100_000)
	e.create(t, "v", asset.BTC, 70_000, p2wpkh(t, chain.Regtest, "v1"))
	require.EqualValues(t, 70_000, e.windowTotal(t, asset.BTC))
	for i := 0; i < 3; i++ {
		r := e.request("v", asset.BTC, 50_000, p2wpkh(t, chain.Regtest, fmt.Sprint("v402-", i)))
		require.Equal(t, http.StatusPaymentRequired, r.Status, string(r.Body))
	}
	require.EqualValues(t, 70_000, e.windowTotal(t, asset.BTC), "402s leave no volume behind")
	e.limits(t, asset.BTC, asset.Limits{AutoLimit: n(10_000)})
	w := e.create(t, "v", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, "v2"))
	require.EqualValues(t, 90_000, e.windowTotal(t, asset.BTC))
	require.Equal(t, http.StatusOK, e.decide(w.WithdrawalID, "reject", nil).Status)
	require.EqualValues(t, 70_000, e.windowTotal(t, asset.BTC))
}

// TestBadInputNeverReachesTheDatabase: NUL characters, oversized amounts
// and over-long notes are 422 field errors, not 500s.
func TestBadInputNeverReachesTheDatabase(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "x", asset.BTC, 10_000_000)
	dest := p2wpkh(t, chain.Regtest, "x")
	for _, body := range []map[string]any{
		{"external_user_id": "a\u0000b", "asset": "BTC", "amount": "20000", "destination_address": dest},
		{"external_user_id": "x", "asset": "B\u0000TC", "amount": "20000", "destination_address": dest},
		{"external_user_id": "x", "asset": "BTC", "amount": "20000", "destination_address": dest + "\u0000"},
		{"external_user_id": "x", "asset": "BTC", "amount": "9223372036854775807", "destination_address": dest},
		{"external_user_id": "x", "asset": "BTC", "amount": "1000000000000001", "destination_address": dest},
	} {
		r := e.Post("/v1/withdrawals", body)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%v: %s", body, r.Body)
		r.FieldErrors(t)
	}
	require.Equal(t, http.StatusUnprocessableEntity, e.Get("/v1/users/a%00b/withdrawals").Status)
	w := e.pending(t, "x", 2_000_000)
	for _, tc := range []struct {
		action string
		body   map[string]any
	}{
		{"approve", map[string]any{"note": "ok\u0000"}},
		{"approve", map[string]any{"note": strings.Repeat("n", 2001)}},
		{"reject", map[string]any{"reason": "no\u0000"}},
		{"reject", map[string]any{"reason": strings.Repeat("r", 2001)}},
		{"release", map[string]any{"attestation": "checked everything\u0000"}},
	} {
		r := e.decide(w.WithdrawalID, tc.action, tc.body)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s %v: %s", tc.action, tc.body, r.Body)
		r.FieldErrors(t)
	}
	require.Equal(t, withdrawal.StatusPendingApproval, e.get(t, w.WithdrawalID).Status)
	require.Empty(t, e.auditRows(t, w.WithdrawalID))
}

// TestReleaseStates: release is allowed once a payout may exist
// (approved, submitted, broadcast, failed) and refused while the
// processor call is in flight (submitting); a hold the ledger paid out is
// never returned, whatever the row says.
func TestReleaseStates(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "r", asset.BTC, 10_000_000)
	ctx := context.Background()
	att := map[string]any{"attestation": "the processor shows no payout for this withdrawal"}
	for _, st := range []withdrawal.Status{withdrawal.StatusApproved, withdrawal.StatusSubmitted, withdrawal.StatusBroadcast, withdrawal.StatusFailed, withdrawal.StatusSubmitting} {
		w := e.create(t, "r", asset.BTC, 30_000, p2wpkh(t, chain.Regtest, string(st)))
		_, err := e.App.DB.Bun.ExecContext(ctx, "UPDATE withdrawals SET status = ? WHERE id = ?", st, w.WithdrawalID)
		require.NoError(t, err)
		r := e.decide(w.WithdrawalID, "release", att)
		if st == withdrawal.StatusSubmitting {
			require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
			require.Contains(t, detail(t, r), "being handed to the processor")
			continue
		}
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", st, r.Body)
		require.Equal(t, "refunded", r.Map(t)["status"])
	}
	// The row says broadcast, but the ledger already paid the hold out.
	w := e.create(t, "r", asset.BTC, 40_000, p2wpkh(t, chain.Regtest, "paid-broadcast"))
	_, err := e.App.DB.Bun.ExecContext(ctx, "UPDATE withdrawals SET status = 'broadcast' WHERE id = ?", w.WithdrawalID)
	require.NoError(t, err)
	settle(t, e, w.WithdrawalID, "r", 40_000, 39_718)
	r := e.decide(w.WithdrawalID, "release", att)
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "cannot be released")
	// Put the books back as the payout step would leave them.
	_, err = e.App.DB.Bun.ExecContext(ctx, "UPDATE withdrawals SET status = 'confirmed', fee = 282, amount_net = 39718 WHERE id = ?", w.WithdrawalID)
	require.NoError(t, err)
}

// TestRejectIsAManualDecision: a rejected withdrawal's approval_mode is
// manual.
func TestRejectIsAManualDecision(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "m", asset.BTC, 10_000_000)
	w := e.pending(t, "m", 2_000_000)
	require.Nil(t, w.ApprovalMode)
	require.Equal(t, http.StatusOK, e.decide(w.WithdrawalID, "reject", nil).Status)
	require.Equal(t, "manual", *e.get(t, w.WithdrawalID).ApprovalMode)
}

// TestCheckHoldsFindsMismatches: the ledger check names a hold no
// withdrawal explains, and a withdrawal whose entries do not fit its
// status.
func TestCheckHoldsFindsMismatches(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "c", asset.BTC, 10_000_000)
	ctx := context.Background()
	d := e.App.DB.Bun
	list, err := withdrawal.CheckHolds(ctx, d)
	require.NoError(t, err)
	require.Empty(t, list)
	w := e.create(t, "c", asset.BTC, 30_000, p2wpkh(t, chain.Regtest, "c"))
	_, err = ledger.PlaceHold(ctx, d, asset.BTC, ledger.UserHolder("c"), 1_000, "no-such-withdrawal", "test")
	require.NoError(t, err)
	_, err = d.ExecContext(ctx, "UPDATE withdrawals SET status = 'refunded', failure_reason = 'x' WHERE id = ?", w.WithdrawalID)
	require.NoError(t, err)
	list, err = withdrawal.CheckHolds(ctx, d)
	require.NoError(t, err)
	require.Len(t, list, 2, "%v", list)
	require.Contains(t, list[0], `user_hold of "c" is 31000 units, but its open withdrawals hold 0`)
	require.Contains(t, list[1], w.WithdrawalID+" (refunded): 1 hold entries (amount right: true), 0 releases")
	rep, err := ledger.Check(ctx, d, withdrawal.CheckHolds)
	require.NoError(t, err)
	require.False(t, rep.LedgerConsistent)
	require.Len(t, rep.HoldMismatches, 2)
	// Undo, so that the books every test ends with are whole again.
	_, err = d.ExecContext(ctx, "UPDATE withdrawals SET status = 'approved', failure_reason = NULL WHERE id = ?", w.WithdrawalID)
	require.NoError(t, err)
	_, err = ledger.ReleaseHold(ctx, d, asset.BTC, ledger.UserHolder("c"), 1_000, "no-such-withdrawal", "test")
	require.NoError(t, err)
}

// TestPrunedKeyWithAnotherDestination: a retry with a pruned key but
// another destination is 422, not the old withdrawal.
func TestPrunedKeyWithAnotherDestination(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "k", asset.BTC, 100_000)
	body := createBody{ExternalUserID: "k", Asset: asset.BTC, Amount: "40000", Destination: p2wpkh(t, chain.Regtest, "k1")}
	require.Equal(t, http.StatusCreated, e.Do(apptestReq(body, "k-key")).Status)
	_, err := e.App.DB.Bun.ExecContext(context.Background(), "DELETE FROM idempotency_keys WHERE key = 'platform:k-key'")
	require.NoError(t, err)
	body.Destination = strings.ToUpper(body.Destination) // the same address: replayed
	require.Equal(t, http.StatusCreated, e.Do(apptestReq(body, "k-key")).Status)
	_, err = e.App.DB.Bun.ExecContext(context.Background(), "DELETE FROM idempotency_keys WHERE key = 'platform:k-key'")
	require.NoError(t, err)
	body.Destination = p2wpkh(t, chain.Regtest, "k2")
	r := e.Do(apptestReq(body, "k-key"))
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
}

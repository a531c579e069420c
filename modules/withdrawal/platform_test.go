package withdrawal_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/modules/ledger"
	"svc/modules/withdrawal"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
)

// fundPlatform funds a platform account with a BTC deposit paid and
// confirmed at the processor, as a platform funds a prize pool.
func (e *env) fundPlatform(t testing.TB, name string, units int64) {
	t.Helper()
	r := e.Post("/v1/deposits", map[string]any{"platform_account": name, "asset": "BTC", "expected_amount": strconv.FormatInt(units, 10)})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	dep := r.Map(t)
	require.Nil(t, dep["external_user_id"])
	require.Equal(t, name, dep["platform_account"])
	id := dep["deposit_id"].(string)
	inv, ok := e.Sim.InvoiceByOrderID(id)
	require.True(t, ok)
	paid, err := e.Sim.Pay(inv.ID, btcpaysim.PayParams{})
	require.NoError(t, err)
	require.NoError(t, e.Sim.ConfirmPayment(inv.ID, paid[0].ID))
	require.NoError(t, e.App.Deposits.Reconcile(context.Background(), uuid.MustParse(id)))
	got := e.Get("/v1/deposits/" + id).Map(t)
	require.Equal(t, "settled", got["status"], got)
	e.platformFunded[[2]string{name, asset.BTC}] += units
}

// requireChecksClean runs the ledger check with the withdrawal check
// (holds match open withdrawals, platform holds included).
func (e *env) requireChecksClean(t testing.TB) {
	t.Helper()
	rep, err := ledger.Check(context.Background(), e.App.DB.Bun, withdrawal.CheckHolds)
	require.NoError(t, err)
	require.True(t, rep.LedgerConsistent, "ledger check: %+v", rep)
	findings, err := withdrawal.CheckHolds(context.Background(), e.App.DB.Bun)
	require.NoError(t, err)
	require.Empty(t, findings)
}

// A platform account funded by a deposit withdraws: the withdrawal holds
// the platform account's money, always waits for an operator whatever its
// size, and once approved is paid like a user's; the books and the
// withdrawal check stay clean throughout, and every read and event names
// the platform account with a null external_user_id.
func TestPlatformAccountWithdrawal(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fundPlatform(t, "prize.pool", 1_000_000)
	b := e.PlatformBalance(t, "prize.pool", asset.BTC)
	require.Equal(t, "0.01000000", b.Available)
	require.Equal(t, "0.00000000", b.Held)
	e.requireChecksClean(t)

	dest := p2wpkh(t, chain.Regtest, "prize-1")
	r := e.Post("/v1/withdrawals", map[string]any{"platform_account": "prize.pool", "asset": "BTC", "amount": "200000",
		"destination_address": dest, "client_reference": "prize-payout-1"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	w := r.Map(t)
	id := w["withdrawal_id"].(string)
	require.Equal(t, "pending_approval", w["status"])
	require.Nil(t, w["external_user_id"])
	require.Equal(t, "prize.pool", w["platform_account"])
	require.True(t, strings.HasPrefix(w["approval_reason"].(string), "platform_account:"), w["approval_reason"])
	b = e.PlatformBalance(t, "prize.pool", asset.BTC)
	require.Equal(t, "0.00800000", b.Available)
	require.Equal(t, "0.00200000", b.Held)
	ev := e.eventData(t, "withdrawal.pending_approval", id)
	require.Len(t, ev, 1)
	require.Nil(t, ev[0]["external_user_id"])
	require.Equal(t, "prize.pool", ev[0]["platform_account"])
	require.Equal(t, w["approval_reason"], ev[0]["approval_reason"])
	adm := e.admin(t, id)
	require.Equal(t, "prize.pool", adm["platform_account"])
	require.Nil(t, adm["external_user_id"])
	e.requireChecksClean(t)

	approved := e.decide(id, "approve", map[string]any{"note": "prize paid out"})
	require.Equal(t, http.StatusOK, approved.Status, string(approved.Body))
	require.Equal(t, "approved", approved.Map(t)["status"])
	e.pass(t)
	p := e.onePayout(t, id)
	require.Equal(t, dest, p.Destination)
	e.broadcastPayout(t, p.ID, "")
	e.pass(t)
	e.completePayout(t, p.ID)
	e.pass(t)
	e.pass(t)
	require.Equal(t, withdrawal.StatusConfirmed, e.get(t, id).Status)
	for _, typ := range []string{"withdrawal.broadcast", "withdrawal.completed"} {
		ev := e.eventData(t, typ, id)
		require.Len(t, ev, 1, typ)
		require.Nil(t, ev[0]["external_user_id"], typ)
		require.Equal(t, "prize.pool", ev[0]["platform_account"], typ)
	}
	b = e.PlatformBalance(t, "prize.pool", asset.BTC)
	require.Equal(t, "0.00800000", b.Available)
	require.Equal(t, "0.00000000", b.Held)
	e.requireChecksClean(t)

	// However small, and with no gate set, it waits; a rejection gives the
	// hold back to the platform account.
	r = e.Post("/v1/withdrawals", map[string]any{"platform_account": "prize.pool", "asset": "BTC", "amount": "20000",
		"destination_address": p2wpkh(t, chain.Regtest, "prize-2")})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Equal(t, "pending_approval", r.Map(t)["status"])
	small := r.Map(t)["withdrawal_id"].(string)
	e.requireChecksClean(t)
	require.Equal(t, http.StatusOK, e.decide(small, "reject", map[string]any{"reason": "not now"}).Status)
	require.Equal(t, "0.00800000", e.PlatformBalance(t, "prize.pool", asset.BTC).Available)
	e.requireChecksClean(t)

	// More than it has: 402, nothing held.
	r = e.Post("/v1/withdrawals", map[string]any{"platform_account": "prize.pool", "asset": "BTC", "amount": "900000",
		"destination_address": p2wpkh(t, chain.Regtest, "prize-3")})
	require.Equal(t, http.StatusPaymentRequired, r.Status, string(r.Body))
	require.Equal(t, "0.00000000", e.PlatformBalance(t, "prize.pool", asset.BTC).Held)
	// The platform account's money is not a user's of the same name.
	require.Equal(t, "0.00000000", e.UserBalance(t, "prize.pool", asset.BTC).Available)
}

// A withdrawal names exactly one of external_user_id and
// platform_account: both or neither is a 422 field error, as is a name
// that is not a platform account's, and nothing is created.
func TestWithdrawalOwnerIsExactlyOne(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTC, 1_000_000)
	base := func(extra map[string]any) map[string]any {
		b := map[string]any{"asset": "BTC", "amount": "20000", "destination_address": p2wpkh(t, chain.Regtest, "owner")}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	for name, tc := range map[string]struct {
		body map[string]any
		loc  []any
		typ  string
	}{
		"both":     {base(map[string]any{"external_user_id": "u", "platform_account": "revenue"}), []any{"body", "platform_account"}, "value_error"},
		"neither":  {base(nil), []any{"body", "external_user_id"}, "missing"},
		"bad name": {base(map[string]any{"platform_account": "Revenue"}), []any{"body", "platform_account"}, "string_pattern_mismatch"},
		"too long": {base(map[string]any{"platform_account": strings.Repeat("a", 65)}), []any{"body", "platform_account"}, ""},
	} {
		r := e.Post("/v1/withdrawals", tc.body)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", name, r.Body)
		fe := r.FieldErrors(t)
		require.Len(t, fe, 1, "%s: %s", name, r.Body)
		require.Equal(t, tc.loc, fe[0]["loc"], name)
		if tc.typ != "" {
			require.Equal(t, tc.typ, fe[0]["type"], name)
		}
	}
	n, err := e.App.DB.Bun.NewSelect().Table("withdrawals").Count(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
}

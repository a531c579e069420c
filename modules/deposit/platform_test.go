package deposit_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/modules/deposit"
	"svc/platform/btcpay/btcpaysim"
)

// A deposit for a platform account credits the platform account's
// balance, not a user's: every read and event names the platform account,
// with a null external_user_id.
func TestPlatformAccountDeposit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.Post("/v1/deposits", map[string]any{"platform_account": "prize.pool", "asset": "BTC", "expected_amount": "250000",
		"metadata": map[string]any{"purpose": "weekly prize pool"}})
	v := viewOf(t, r, http.StatusCreated)
	require.Nil(t, v.ExternalUserID)
	require.Equal(t, "prize.pool", *v.PlatformAccount)
	require.Contains(t, string(r.Body), `"external_user_id":null`)

	inv := e.invoice(t, v.DepositID)
	paid := e.pay(t, inv.ID, btcpaysim.PayParams{})
	e.reconcileTo(t, v.DepositID, deposit.StatusConfirming)
	require.NoError(t, e.Sim.ConfirmPayment(inv.ID, paid[0].ID))
	got := e.reconcileTo(t, v.DepositID, deposit.StatusSettled)
	require.Equal(t, "0.00250000", got.AmountCredited)
	require.Equal(t, 1, e.ledgerEntries(t, v.DepositID))
	// The credit check the reconciliation runs finds the platform
	// account's credit as it finds a user's: nothing to report.
	found, err := deposit.CheckCredits(context.Background(), e.App.DB.Bun)
	require.NoError(t, err)
	require.Empty(t, found)
	rep, err := e.App.Reconcile.RunFull(context.Background(), "on_demand")
	require.NoError(t, err)
	require.True(t, rep.LedgerConsistent, "the reconciliation's ledger check, with every module's check: %+v", rep)
	for _, a := range rep.Alerts {
		require.False(t, strings.HasPrefix(a, "deposits:") || strings.HasPrefix(a, "holds:"), "the reconciliation finds: %s", a)
	}
	for _, typ := range []string{"deposit.detected", "deposit.settled"} {
		ev := e.events(t, typ, v.DepositID)
		require.Len(t, ev, 1, typ)
		require.Nil(t, ev[0]["external_user_id"], typ)
		require.Equal(t, "prize.pool", ev[0]["platform_account"], typ)
	}

	b := e.Get("/v1/platform-accounts/prize.pool/balances")
	require.Equal(t, http.StatusOK, b.Status, string(b.Body))
	require.Contains(t, string(b.Body), `"available":"0.00250000"`)
	txs := e.Get("/v1/platform-accounts/prize.pool/transactions")
	require.Equal(t, http.StatusOK, txs.Status, string(txs.Body))
	require.Contains(t, string(txs.Body), `"kind":"deposit_credit"`)
	// No user of that name was credited.
	u := e.Get("/v1/users/prize.pool/balances")
	require.Equal(t, http.StatusOK, u.Status, string(u.Body))
	require.NotContains(t, string(u.Body), "0.00250000")
	// A user's deposit shows platform_account null.
	r = e.Post("/v1/deposits", createBody{ExternalUserID: "alice", Asset: "BTC"})
	viewOf(t, r, http.StatusCreated)
	require.Contains(t, string(r.Body), `"platform_account":null`)
}

// A deposit names exactly one of external_user_id and platform_account:
// both or neither is a 422 field error, as is a name that is not a
// platform account's, and nothing is created.
func TestDepositOwnerIsExactlyOne(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for name, tc := range map[string]struct {
		body map[string]any
		loc  []any
		typ  string
	}{
		"both":     {map[string]any{"asset": "BTC", "external_user_id": "u", "platform_account": "revenue"}, []any{"body", "platform_account"}, "value_error"},
		"neither":  {map[string]any{"asset": "BTC"}, []any{"body", "external_user_id"}, "missing"},
		"bad name": {map[string]any{"asset": "BTC", "platform_account": "Rev enue"}, []any{"body", "platform_account"}, "string_pattern_mismatch"},
		"too long": {map[string]any{"asset": "BTC", "platform_account": strings.Repeat("a", 65)}, []any{"body", "platform_account"}, ""},
	} {
		r := e.Post("/v1/deposits", tc.body)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", name, r.Body)
		fe := r.FieldErrors(t)
		require.Len(t, fe, 1, "%s: %s", name, r.Body)
		require.Equal(t, tc.loc, fe[0]["loc"], name)
		if tc.typ != "" {
			require.Equal(t, tc.typ, fe[0]["type"], name)
		}
	}
	require.Empty(t, e.Sim.Invoices(), "the processor was not called")
}

package reconcile_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/asset"
	"svc/modules/ledger"
	"svc/modules/reconcile"
	"svc/platform/db"
)

// TestObligationsCountPlatformAccountsAndEscrow: what the report says is
// owed (user_obligations) counts a user's escrow (reserved) and the
// platform accounts' balances, and platform_obligations is the platform
// accounts' part. Money that moves inside the platform (an escrow hold, a
// transfer to a platform account) changes nothing the wallet must cover;
// a platform account credited with money the wallet never received is a
// shortfall even though every user is covered. The hourly snapshot's
// total agrees with what is owed.
func TestObligationsCountPlatformAccountsAndEscrow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.deposit(t, "ann", asset.BTC, 1_000_000)
	post := func(fn func(ctx context.Context, tx bun.Tx) error) {
		t.Helper()
		require.NoError(t, db.RunInTx(ctx, e.App.DB.Bun, fn))
	}

	btc := line(t, e.report(t), asset.BTC)
	require.Equal(t, "0.01000000", btc.UserObligations)
	require.Equal(t, "0.00000000", btc.PlatformObligations)
	require.False(t, btc.Insolvent)

	// Inside the platform: 300,000 reserved by an escrow hold, 100,000
	// transferred to the platform account "revenue". Still 0.01 owed,
	// 0.001 of it to the platform, all covered.
	r := e.Post("/v1/holds", map[string]any{"from": map[string]string{"external_user_id": "ann"}, "asset": "BTC", "amount": "300000"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	r = e.Post("/v1/transfers", map[string]any{"legs": []map[string]any{{"from": map[string]string{"external_user_id": "ann"},
		"to": map[string]string{"platform_account": "revenue"}, "asset": "BTC", "amount": "100000"}}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	rep := e.report(t)
	btc = line(t, rep, asset.BTC)
	require.Equal(t, "0.01000000", btc.UserObligations, "the escrow and the platform account's balance are owed too")
	require.Equal(t, "0.00100000", btc.PlatformObligations)
	require.Equal(t, "0.00000000", *btc.Shortfall)
	require.False(t, btc.Insolvent)
	require.True(t, rep.Healthy, "%+v", rep)

	// A platform account credited with 50,000 the wallet never received:
	// the users are covered, the platform account is not.
	post(func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.CreditDeposit(ctx, tx, asset.BTC, ledger.PlatformHolder("prize.pool"), 50_000, "dep-prize", "")
		return err
	})
	rep, err := e.App.Reconcile.Run(ctx, reconcile.TriggerHourly)
	require.NoError(t, err)
	btc = line(t, rep, asset.BTC)
	require.Equal(t, "0.01050000", btc.UserObligations)
	require.Equal(t, "0.00150000", btc.PlatformObligations)
	require.Equal(t, "0.00050000", *btc.Shortfall)
	require.True(t, btc.Insolvent)
	require.Contains(t, strings.Join(rep.Alerts, "\n"), "BTC: insolvent")
	require.Contains(t, strings.Join(rep.Alerts, "\n"), "0.01050000 owed to users (of which 0.00150000 to platform accounts)")

	// The hourly snapshot's tree has the same total: users' leaves with
	// their escrow, and the platform accounts' leaves.
	require.Equal(t, btc.UserObligations, *btc.LiabilitiesTotal)
	require.NotContains(t, strings.Join(rep.Alerts, "\n"), "published liabilities total")
	require.Equal(t, btc.UserObligations, line(t, e.report(t), asset.BTC).UserObligations, "through the API")
}

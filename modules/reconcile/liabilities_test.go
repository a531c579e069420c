package reconcile_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/modules/reconcile"
	"svc/platform/sumtree"
)

// TestHourlyRunPublishesTheProofOfLiabilities: before any snapshot the
// liabilities fields are null; the hourly run takes a snapshot of every
// asset and its report carries each root and total, which agrees with what
// the ledger says users are owed; an on-demand report shows the latest
// snapshot and takes none.
func TestHourlyRunPublishesTheProofOfLiabilities(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.deposit(t, "ann", asset.BTC, 150_000)
	e.deposit(t, "ben", asset.BTC, 50_000)
	e.deposit(t, "ann", asset.USDTTRC20, 2_000_000)

	before := line(t, e.report(t), asset.BTC)
	require.Nil(t, before.LiabilitiesRoot)
	require.Nil(t, before.LiabilitiesTotal)

	rep, err := e.App.Reconcile.Run(ctx, reconcile.TriggerHourly)
	require.NoError(t, err)
	latest, err := e.App.Liabilities.Latest(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, latest)
	for _, p := range latest {
		require.Equal(t, reconcile.TriggerHourly, p.Trigger)
		l := line(t, rep, p.Asset)
		require.Equal(t, sumtree.HexOf(p.Root), *l.LiabilitiesRoot)
		require.Equal(t, p.ID, *l.LiabilitiesSnapshotID)
		require.Equal(t, l.UserObligations, *l.LiabilitiesTotal, "%s: the tree's total is what the ledger owes users", p.Asset)
	}
	require.Equal(t, "0.00200000", *line(t, rep, asset.BTC).LiabilitiesTotal)
	require.Equal(t, "2.000000", *line(t, rep, asset.USDTTRC20).LiabilitiesTotal)

	// On demand: the same snapshot, none taken.
	again := line(t, e.report(t), asset.BTC)
	require.Equal(t, *line(t, rep, asset.BTC).LiabilitiesSnapshotID, *again.LiabilitiesSnapshotID)
	r := e.AdminGet("/v1/admin/liabilities")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
}

package liabilities_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/liabilities"
	"svc/platform/dbtest"
	"svc/platform/sumtree"
)

// TestPublishedRootsForThePlatform: GET /v1/liabilities/roots, with the
// platform's readwrite key, returns each asset's latest root and total, the
// ones a user's proof leads to; none without a key. A snapshot dated 2999,
// written around liabilities_record_snapshot (by the owner here), is never
// the published one: not in the roots, not what proofs are made from.
func TestPublishedRootsForThePlatform(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()
	roots := func() map[string]liabilities.PublishedView {
		t.Helper()
		r := e.Get("/v1/liabilities/roots")
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		var list liabilities.PublishedList
		r.JSON(t, &list)
		out := map[string]liabilities.PublishedView{}
		for _, v := range list.Snapshots {
			out[v.Asset] = v
		}
		return out
	}
	require.Empty(t, roots())
	require.Equal(t, http.StatusUnauthorized, e.Do(apptest.Req{Method: "GET", Path: "/v1/liabilities/roots", Key: "-"}).Status)

	credit(t, e.App.DB.Bun, asset.BTC, "ana", 4000)
	credit(t, e.App.DB.Bun, asset.BTC, "bo", 2000)
	_, err := e.App.Liabilities.Snapshot(ctx, liabilities.TriggerOnDemand, "")
	require.NoError(t, err)
	btc := roots()[asset.BTC]
	require.Equal(t, "6000", btc.TotalUnits)
	require.EqualValues(t, 2, btc.Users)
	r := e.Get(proofPath("ana", asset.BTC))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var proof sumtree.Proof
	r.JSON(t, &proof)
	require.Equal(t, btc.Root, proof.Root.Hash)
	require.Equal(t, btc.SnapshotID, proof.SnapshotID)

	owner, err := pgx.Connect(ctx, dbtest.OwnerURL(e.DBURL))
	require.NoError(t, err)
	defer owner.Close(ctx)
	var forged int64
	require.NoError(t, owner.QueryRow(ctx, `INSERT INTO liabilities_snapshots (asset, taken_at, trigger, users, salt_key, root, total)
VALUES ('BTC', '2999-01-01', 'on_demand', 1, sha256('k'), sha256('r'), 1) RETURNING id`).Scan(&forged))
	require.Equal(t, btc, roots()[asset.BTC], "the forged snapshot is not published")
	r = e.Get(proofPath("bo", asset.BTC))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &proof)
	require.Equal(t, btc.SnapshotID, proof.SnapshotID)
	ignored, err := e.App.Liabilities.Ignored(ctx)
	require.NoError(t, err)
	require.Len(t, ignored, 1)
	require.Equal(t, forged, ignored[0].ID)

	// The next snapshot is published over it.
	credit(t, e.App.DB.Bun, asset.BTC, "cy", 1000)
	_, err = e.App.Liabilities.Snapshot(ctx, liabilities.TriggerOnDemand, "")
	require.NoError(t, err)
	require.Equal(t, "7000", roots()[asset.BTC].TotalUnits)
}

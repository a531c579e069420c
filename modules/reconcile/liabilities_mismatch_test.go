package reconcile_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/modules/reconcile"
	"svc/platform/dbtest"
)

// TestReconciliationComparesTheLiabilitiesTotal: the report compares each
// asset's latest published liabilities total with what the ledger owed its
// users at the snapshot it was read on. Deposits after the snapshot change
// nothing (they are not in it); a published total that differs, written
// around liabilities_record_snapshot (by the owner here), is a line of the
// report and one operator alert.
func TestReconciliationComparesTheLiabilitiesTotal(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.deposit(t, "ann", asset.BTC, 150_000)
	_, err := e.App.Reconcile.Run(ctx, reconcile.TriggerHourly)
	require.NoError(t, err)
	e.deposit(t, "ben", asset.BTC, 50_000)
	rep := e.report(t)
	for _, a := range rep.Alerts {
		require.NotContains(t, a, "liabilities total", "the ledger at the snapshot agrees: %q", rep.Alerts)
	}
	require.Empty(t, e.alerts(t, reconcile.AlertLiabilitiesMismatch))

	owner, err := pgx.Connect(ctx, dbtest.OwnerURL(e.DBURL))
	require.NoError(t, err)
	defer owner.Close(ctx)
	var forged int64
	require.NoError(t, owner.QueryRow(ctx, `INSERT INTO liabilities_snapshots (asset, taken_at, trigger, users, salt_key, root, total, ledger_snapshot)
VALUES ('BTC', now(), 'on_demand', 2, sha256('k'), sha256('r'), 150000, pg_current_snapshot()) RETURNING id`).Scan(&forged))

	rep = e.report(t)
	require.False(t, rep.Healthy)
	want := fmt.Sprintf("BTC: the published liabilities total 0.00150000 (snapshot %d) is not the 0.00200000 the ledger owed its users at that snapshot", forged)
	require.Contains(t, strings.Join(rep.Alerts, "\n"), want)
	got := e.alerts(t, reconcile.AlertLiabilitiesMismatch)
	require.Len(t, got, 1)
	require.Equal(t, fmt.Sprintf("BTC:snapshot-%d", forged), got[0].Subject)
	e.report(t)
	require.Len(t, e.alerts(t, reconcile.AlertLiabilitiesMismatch), 1, "raised once")
}

package reconcile_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/modules/reconcile"
)

// TestReconciliationRaisesUnprovenOperators: an operator row inserted by
// hand as the runtime role (the chain does not prove it) is a line of the
// report and one operators.unproven alert after a reconciliation run,
// raised once however often it is found again; so is an enrollment chain
// that no longer replays.
func TestReconciliationRaisesUnprovenOperators(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	operatortest.Team(t, e.App.DB.Bun, time.Now, operatortest.Member{Name: "alice", Role: operator.Admin})
	rep, err := e.App.Reconcile.Run(ctx, reconcile.TriggerHourly)
	require.NoError(t, err)
	for _, a := range rep.Alerts {
		require.NotContains(t, a, "operators:", "the enrolled team is proven: %q", rep.Alerts)
	}
	require.Empty(t, e.alerts(t, reconcile.AlertOperatorsUnproven))

	_, err = e.App.DB.Bun.ExecContext(ctx, "INSERT INTO operators (name, role, enrolled_seq) VALUES ('mallory', 'admin', 1)")
	require.NoError(t, err)
	rep, err = e.App.Reconcile.Run(ctx, reconcile.TriggerHourly)
	require.NoError(t, err)
	require.False(t, rep.Healthy)
	want := `operators: operator "mallory" is not enrolled by the chain (inserted by hand?)`
	require.Contains(t, strings.Join(rep.Alerts, "\n"), want)
	got := e.alerts(t, reconcile.AlertOperatorsUnproven)
	require.Len(t, got, 1)
	require.Equal(t, `operator "mallory" is not enrolled by the chain (inserted by hand?)`, got[0].Subject)
	require.Contains(t, got[0].Detail, "grants nothing")

	_, err = e.App.Reconcile.Run(ctx, reconcile.TriggerHourly)
	require.NoError(t, err)
	require.Len(t, e.alerts(t, reconcile.AlertOperatorsUnproven), 1, "raised once")

	// A record appended by hand: the chain no longer replays.
	_, err = e.App.DB.Bun.ExecContext(ctx, `INSERT INTO operator_records (seq, prev_hash, hash, change, signatures)
		SELECT 2, hash, sha256('forged'), '{"action":"operator.enroll","name":"mallory"}', '[{}]' FROM operator_records WHERE seq = 1`)
	require.NoError(t, err)
	rep, err = e.App.Reconcile.Run(ctx, reconcile.TriggerHourly)
	require.NoError(t, err)
	require.Contains(t, strings.Join(rep.Alerts, "\n"), "operators: operator enrollment chain fails verification: record 2")
	got = e.alerts(t, reconcile.AlertOperatorsUnproven)
	require.Len(t, got, 2)
	require.Contains(t, got[1].Subject, "record 2: its hash does not match its contents")
}

package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/modules/ledger"
	"svc/modules/reconcile"
)

// TestAdminReconciliation: the report from the command line (a table and
// JSON), kept in the history, and an acknowledgement refused when nothing
// is halted. Without a processor the chain balances are unknown, which the
// report says.
func TestAdminReconciliation(t *testing.T) {
	adminDB(t)
	out, err := run(t, "migrate")
	require.NoError(t, err, out)

	out, err = run(t, "admin", "reconciliation")
	require.NoError(t, err, out)
	require.Contains(t, out, "healthy false, ledger consistent true")
	require.Contains(t, out, "BTC: chain balance unknown")
	require.Contains(t, out, "null")
	require.Contains(t, out, "ledger check: full", "the first check, with none recorded before it")

	out, err = run(t, "admin", "reconciliation", "--json")
	require.NoError(t, err, out)
	var rep reconcile.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.True(t, rep.LedgerConsistent)
	require.NotEmpty(t, rep.Custody)
	require.Nil(t, rep.Custody[0].ChainBalance)
	require.Equal(t, ledger.ScopeIncremental, rep.LedgerCheck.Scope, "it continues the first")
	require.NotNil(t, rep.LedgerCheck.SinceCheck)

	out, err = run(t, "admin", "reconciliation", "--full", "--json")
	require.NoError(t, err, out)
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.Equal(t, ledger.ScopeFull, rep.LedgerCheck.Scope)

	out, err = run(t, "admin", "reconciliation", "--history")
	require.NoError(t, err, out)
	require.Contains(t, out, "on_demand")
	var hist []reconcile.Stored
	out, err = run(t, "admin", "reconciliation", "--history", "--json", "--limit", "1")
	require.NoError(t, err, out)
	require.NoError(t, json.Unmarshal([]byte(out), &hist))
	require.Len(t, hist, 1)

	_, err = run(t, "admin", "reconciliation", "ack")
	require.ErrorContains(t, err, "--as NAME is required")
	_, err = run(t, "admin", "reconciliation", "ack", "--as", "ops")
	require.ErrorContains(t, err, "nothing to acknowledge")
}

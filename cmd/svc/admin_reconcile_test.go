package main

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/ledger"
	"svc/modules/reconcile"
	"svc/platform/dbtest"
)

// TestAdminReconciliation: the report from the command line (a table and
// JSON), kept in the history, and an acknowledgement refused when nothing
// is halted. Without a processor the chain balances are unknown, which the
// report says.
func TestAdminReconciliation(t *testing.T) {
	migratedDB(t)

	out, err := run(t, "admin", "reconciliation")
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
	require.ErrorContains(t, err, "--key FILE", "a signed action")
	opsKey, _ := keygen(t, t.TempDir(), "ops")
	out, err = run(t, "admin", "operators", "init", "--name", "ops", "--key", opsKey)
	require.NoError(t, err, out)
	_, err = run(t, "admin", "reconciliation", "ack", "--key", opsKey)
	require.ErrorContains(t, err, "nothing to acknowledge")
}

// TestAdminReconciliationAckAcceptsFindings: an inconsistent ledger (an
// entry without postings, written with the triggers off) shows in the
// table, halts BTC with an alert; ack accepts the findings it saw and
// lifts the halt; one more finding halts again with a new alert.
func TestAdminReconciliationAckAcceptsFindings(t *testing.T) {
	super := dbtest.AdminURL(t) // before adminDB points DATABASE_URL at the runtime role
	d := adminDB(t)
	ctx := context.Background()
	creditAlice(t, d, 150000, 1)
	forge := func(ref string) {
		runtime := os.Getenv("DATABASE_URL")
		t.Setenv("DATABASE_URL", super) // ExecBehindTriggers connects as its user
		dbtest.ExecBehindTriggers(t, runtime,
			`INSERT INTO ledger_entries (kind, asset, source_ref, memo) VALUES ('correction', 'BTC', $1, 'no postings')`, ref)
		t.Setenv("DATABASE_URL", runtime)
	}
	halted := func() bool {
		var since *time.Time
		require.NoError(t, d.Bun.NewSelect().Table("assets").Column("withdrawals_halted_since").Where("asset = 'BTC'").Scan(ctx, &since))
		return since != nil
	}
	alerts := func() int64 {
		n, err := d.Bun.NewSelect().Table("operator_alerts").Where("type = ?", reconcile.AlertInconsistent).Count(ctx)
		require.NoError(t, err)
		return n
	}
	forge("forged-1")
	out, err := run(t, "admin", "reconciliation")
	require.NoError(t, err, out)
	require.Contains(t, out, "SHORTFALL")
	require.Contains(t, out, "true (1 findings)")
	require.Contains(t, out, "BTC: the ledger is inconsistent")
	require.True(t, halted())
	require.Equal(t, int64(1), alerts())

	// Signed with an admin's key: the operator the chain enrolled it for;
	// an unknown key is refused.
	dir := t.TempDir()
	opsKey, _ := keygen(t, dir, "ops")
	out, err = run(t, "admin", "reconciliation", "ack", "--key", opsKey, "--asset", "BTC")
	require.ErrorContains(t, err, "is not an enrolled operator key", out)
	out, err = run(t, "admin", "operators", "init", "--name", "ops", "--key", opsKey)
	require.NoError(t, err, out)
	out, err = run(t, "admin", "reconciliation", "ack", "--key", opsKey, "--asset", "BTC", "--note", "a test entry")
	require.NoError(t, err, out)
	require.Contains(t, out, "BTC: inconsistency since")
	require.Contains(t, out, "acknowledged by op:ops, accepting findings: 1")
	require.False(t, halted())
	var actor string
	require.NoError(t, d.Bun.NewSelect().Table("audit_log").Column("actor").Where("action = 'reconciliation.ack'").Scan(ctx, &actor))
	require.Equal(t, "op:ops", actor)
	out, err = run(t, "admin", "reconciliation")
	require.NoError(t, err, out)
	require.Contains(t, out, "true (1 findings, 1 accepted)")
	require.False(t, halted())

	forge("forged-2")
	out, err = run(t, "admin", "reconciliation")
	require.NoError(t, err, out)
	require.Contains(t, out, "true (2 findings, 1 accepted)")
	require.True(t, halted())
	require.Equal(t, int64(2), alerts())

	// Without a key nothing is lifted: the acknowledgement is signed.
	_, err = run(t, "admin", "reconciliation", "ack")
	require.ErrorContains(t, err, "--key FILE")
	require.True(t, halted())
	out, err = run(t, "admin", "reconciliation", "ack", "--key", opsKey)
	require.NoError(t, err, out)
	require.Contains(t, out, "acknowledged by op:ops, accepting findings: 2")
	require.False(t, halted())
}

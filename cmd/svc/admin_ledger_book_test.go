package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/modules/ledger"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
)

// TestAdminLedgerCorrect: svc admin ledger correct needs --memo and, to
// post, an admin's --key, shows the entry with every balance before and
// after and posts it only once the operator answers yes (or with --yes),
// signed, with its audit record as op:NAME; an approver's key is refused;
// unbalanced lines, an account a correction may not touch, and a balance
// that would go negative are refused with the reason, and nothing changes.
func TestAdminLedgerCorrect(t *testing.T) {
	d := migratedDB(t)
	ctx := context.Background()
	creditAlice(t, d, 10_000, 1)
	keys := operatorKeys(t, d, operatortest.Member{Name: "ops", Role: operator.Admin}, operatortest.Member{Name: "bob", Role: operator.Approver})
	ops := keys["ops"]
	state := func() (entries, audits int) {
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM ledger_entries`).Scan(&entries))
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'ledger.correct'`).Scan(&audits))
		return
	}
	e0, a0 := state()
	fee := []string{"admin", "ledger", "correct", "--asset", "BTC", "--debit", "network_fees=300", "--credit", "custody=300"}
	with := func(base []string, more ...string) []string { return append(append([]string{}, base...), more...) }

	_, err := run(t, with(fee, "--memo", "unreported fee", "--yes")...)
	require.ErrorContains(t, err, "--key FILE (or SVC_OPERATOR_KEY) is required")
	_, err = run(t, with(fee, "--key", ops, "--yes")...)
	require.ErrorContains(t, err, "--memo TEXT is required")
	_, err = run(t, with(fee, "--memo", "unreported fee", "--key", keys["bob"], "--yes")...)
	require.ErrorContains(t, err, "operator bob is approver; ledger.correct needs admin")

	// Shown, then asked: no (or no answer at all) posts nothing.
	var out string
	for _, answer := range []string{"n\n", ""} {
		out, err = runIn(t, answer, with(fee, "--memo", "unreported fee", "--key", ops)...)
		require.ErrorIs(t, err, errNotConfirmed, out)
		require.Contains(t, out, "BTC correction (correction:")
		require.Contains(t, out, "memo: unreported fee")
		require.Regexp(t, `network_fees\s+0\.00000300\s+0\.00000000\s+0\.00000300`, out)
		require.Regexp(t, `custody\s+0\.00000300\s+0\.00010000\s+0\.00009700`, out)
		require.Contains(t, out, "Post this correction? [y/N]")
		e, a := state()
		require.Equal(t, [2]int{e0, a0}, [2]int{e, a}, "nothing posted")
	}
	// A dry run shows it and stops; it needs no key.
	out, err = run(t, with(fee, "--memo", "unreported fee", "--dry-run")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "dry run: nothing was posted")

	// Yes: posted with its audit record.
	out, err = runIn(t, "yes\n", with(fee, "--memo", "unreported fee", "--key", ops, "--ref", "fee-1")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "posted by op:ops; audit record")
	require.Contains(t, out, "correction:fee-1")
	e, a := state()
	require.Equal(t, [2]int{e0 + 1, a0 + 1}, [2]int{e, a})
	var actor, target string
	var detail []byte
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT actor, target, detail::text FROM audit_log WHERE action = 'ledger.correct'`).Scan(&actor, &target, &detail))
	require.Equal(t, "op:ops", actor)
	require.Equal(t, "correction:fee-1", target)
	require.Contains(t, string(detail), `"memo": "unreported fee"`)
	require.Contains(t, string(detail), `"balance_after": 9700`)
	// The same reference again changes nothing.
	out, err = run(t, with(fee, "--memo", "unreported fee", "--key", ops, "--ref", "fee-1", "--yes")...)
	require.NoError(t, err, out)
	require.Contains(t, out, "posted before with the same lines; nothing changed")
	e, a = state()
	require.Equal(t, [2]int{e0 + 1, a0 + 1}, [2]int{e, a})

	// Refused, with the reason, nothing changed.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--debit", "network_fees=300", "--credit", "custody=200"}, "the lines do not balance: credits and debits differ by 100"},
		{[]string{"--debit", "user_available:alice=10001", "--credit", "fee_income=10001"}, `line 1 (BTC user_available("alice")): would leave a balance below zero: 10000 now, -1 after`},
		{[]string{"--debit", "network_fees=9701", "--credit", "custody=9701"}, "line 2 (BTC custody): would leave a balance below zero: 9700 now, -1 after"},
		{[]string{"--debit", "custody=300", "--credit", "user_hold:alice=300"}, "a correction may not post to it: user_hold belongs to the user's open withdrawals"},
		{[]string{"--debit", "in_flight=300", "--credit", "custody=300"}, "a correction may not post to it: in_flight"},
		{[]string{"--debit", "transfer=300", "--credit", "custody=300"}, "a correction may not post to it: transfer"},
		{[]string{"--debit", "vault=300", "--credit", "custody=300"}, `"vault" is not an account`},
		{[]string{"--debit", "custody=0.5", "--credit", "fee_income=1"}, "smallest units"},
	} {
		args := append([]string{"admin", "ledger", "correct", "--asset", "BTC", "--memo", "m", "--key", ops, "--yes"}, tc.args...)
		out, err := run(t, args...)
		require.Error(t, err, out)
		require.Contains(t, err.Error(), tc.want, "%v", tc.args)
		e, a := state()
		require.Equal(t, [2]int{e0 + 1, a0 + 1}, [2]int{e, a}, "%v: nothing posted", tc.args)
	}

	// --json: the result alone on standard output.
	cmd := newRootCmd()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"admin", "ledger", "correct", "--asset", "BTC", "--memo", "deposit the processor missed", "--key", ops, "--yes", "--json",
		"--debit", "custody=500", "--credit", "user_available:alice=500"})
	require.NoError(t, cmd.Execute(), stderr.String())
	var v ledger.BookingView
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &v), stdout.String())
	require.NotNil(t, v.AuditID)
	require.Equal(t, "0.00010500", *v.Lines[1].BalanceAfter)
	require.Contains(t, stderr.String(), "user_available(\"alice\")")

	out, err = run(t, "admin", "ledger", "check")
	require.NoError(t, err, out)
}

// TestAdminLedgerTransfer: svc admin ledger transfer books a channel open
// as two entries, shown and confirmed like a correction, signed by an
// admin's --key (an approver's is refused).
func TestAdminLedgerTransfer(t *testing.T) {
	d := migratedDB(t)
	ctx := context.Background()
	creditAlice(t, d, 1_000_000, 1)
	keys := operatorKeys(t, d, operatortest.Member{Name: "ops", Role: operator.Admin}, operatortest.Member{Name: "bob", Role: operator.Approver})
	args := []string{"admin", "ledger", "transfer", "--from", "BTC", "--to", "BTC_LN", "--amount", "600000", "--network-fee", "250",
		"--ref", "fundingtx1", "--memo", "channel to the hub"}
	_, err := run(t, args...)
	require.ErrorContains(t, err, "--key FILE (or SVC_OPERATOR_KEY) is required")
	_, err = run(t, append(args, "--key", keys["bob"], "--yes")...)
	require.ErrorContains(t, err, "operator bob is approver; ledger.transfer needs admin")
	out, err := runIn(t, "y\n", append(args, "--key", keys["ops"])...)
	require.NoError(t, err, out)
	require.Contains(t, out, "BTC correction (transfer-out:fundingtx1)")
	require.Contains(t, out, "BTC_LN correction (transfer-in:fundingtx1)")
	require.Regexp(t, `BTC_LN\s+custody\s+0\.00600000\s+0\.00000000\s+0\.00600000`, out)
	require.Regexp(t, `BTC_LN\s+transfer\s+0\.00600000\s+0\.00000000\s+-0\.00600000`, out)
	require.Contains(t, out, "posted by op:ops; audit record")
	var n int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'ledger.transfer' AND actor = 'op:ops'`).Scan(&n))
	require.Equal(t, 1, n)
	out, err = run(t, "admin", "ledger", "transfer", "--from", "BTC", "--to", "BTC_LN", "--amount", "500000", "--ref", "fundingtx2",
		"--memo", "too much", "--key", keys["ops"], "--yes")
	require.ErrorContains(t, err, "would leave a balance below zero", out)
	out, err = run(t, "admin", "ledger", "check")
	require.NoError(t, err, out)
}

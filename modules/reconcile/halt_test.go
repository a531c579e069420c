package reconcile_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/modules/reconcile"
	"svc/platform/chain"
	"svc/platform/chain/chaintest"
	"svc/platform/dbtest"
	"svc/platform/fault"
)

// forgeCredit writes, with the database's triggers off, a one-sided entry
// crediting units to user's available balance of code: the balance, the
// posting's running balance and its copies all agree, and the entry does
// not balance (unbacked money).
func (e *env) forgeCredit(t *testing.T, user, code string, units int64) {
	t.Helper()
	require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, e.DBURL, `
WITH a AS (SELECT id, balance FROM ledger_accounts WHERE asset = $1::text AND kind = 'user_available' AND owner = $2::text),
     e AS (INSERT INTO ledger_entries (kind, asset, source_ref, memo) VALUES ('correction', $1::text, 'forged ' || gen_random_uuid(), 'forged credit')
           RETURNING id, kind, source_ref, memo, created_at),
     p AS (INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after, entry_kind, entry_ref, entry_memo, entry_at)
           SELECT e.id, a.id, $3::bigint, a.balance + $3::bigint, e.kind, e.source_ref, e.memo, e.created_at FROM e, a RETURNING 1)
UPDATE ledger_accounts SET balance = balance + $3::bigint WHERE id = (SELECT id FROM a)`, code, user, units))
}

// shiftHold moves units of user's hold of code back to available with a
// balanced entry written with the triggers off: the ledger balances, but
// the hold is no longer the gross of the user's open withdrawals.
func (e *env) shiftHold(t *testing.T, user, code string, units int64) {
	t.Helper()
	require.Equal(t, int64(2), dbtest.ExecBehindTriggers(t, e.DBURL, `
WITH e AS (INSERT INTO ledger_entries (kind, asset, source_ref, memo) VALUES ('correction', $1::text, 'shift ' || gen_random_uuid(), 'hold shifted')
           RETURNING id, kind, source_ref, memo, created_at),
     a AS (SELECT id, balance, CASE kind WHEN 'user_hold' THEN -$3::bigint ELSE $3::bigint END AS amount
             FROM ledger_accounts WHERE asset = $1::text AND owner = $2::text AND kind IN ('user_hold', 'user_available')),
     p AS (INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after, entry_kind, entry_ref, entry_memo, entry_at)
           SELECT e.id, a.id, a.amount, a.balance + a.amount, e.kind, e.source_ref, e.memo, e.created_at FROM e, a RETURNING 1)
UPDATE ledger_accounts l SET balance = l.balance + a.amount FROM a WHERE l.id = a.id`, code, user, units))
}

// TestInconsistencyHaltsTheAsset: an unbalanced entry, a balance that
// drifted from its postings, or a hold that is not its open withdrawals'
// gross halts the withdrawals of that asset as an insolvency does (new
// ones wait for an operator with reason inconsistency, approvals answer
// 409, nothing is submitted, /readyz says why), with one alert per
// episode; another asset flows on. The chain covers everything: it is the
// ledger alone that halts.
func TestInconsistencyHaltsTheAsset(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		tamper func(e *env, t *testing.T)
		undo   func(e *env, t *testing.T)
		list   func(rep reconcile.Report) []string
	}{
		{name: "unbalanced entry", tamper: func(e *env, t *testing.T) { e.forgeCredit(t, "ann", asset.BTC, 1_000) },
			list: func(rep reconcile.Report) []string { return rep.UnbalancedEntries }},
		{name: "drift", tamper: func(e *env, t *testing.T) {
			dbtest.ExecBehindTriggers(t, e.DBURL, `UPDATE ledger_accounts SET balance = balance + 1 WHERE owner = 'ann' AND asset = 'BTC' AND kind = 'user_available'`)
		}, undo: func(e *env, t *testing.T) {
			dbtest.ExecBehindTriggers(t, e.DBURL, `UPDATE ledger_accounts SET balance = balance - 1 WHERE owner = 'ann' AND asset = 'BTC' AND kind = 'user_available'`)
		}, list: func(rep reconcile.Report) []string { return rep.MaterializedVsDerivedDrifts }},
		{name: "hold mismatch", tamper: func(e *env, t *testing.T) { e.shiftHold(t, "ann", asset.BTC, 1_000) },
			list: func(rep reconcile.Report) []string { return holdAlerts(rep) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.deposit(t, "ann", asset.BTC, 2_000_000)
			e.deposit(t, "ann", asset.BTCLN, 500_000)
			e.deposit(t, "bea", asset.BTC, 100_000)
			pending := e.withdraw(t, "ann", asset.BTC, 1_500_000, btcAddr(t, "pending"))
			approved := e.withdraw(t, "ann", asset.BTC, 100_000, btcAddr(t, "approved"))
			e.requireStatus(t, pending, "pending_approval")
			e.requireStatus(t, approved, "approved")
			require.True(t, e.report(t).Healthy)

			c.tamper(e, t)
			require.NoError(t, e.Sim.SetWalletBalance("0.02200000", "0")) // the chain covers more than is owed
			rep := e.report(t)
			require.False(t, rep.Healthy)
			require.False(t, rep.LedgerConsistent)
			require.NotEmpty(t, c.list(rep), "%+v", rep)
			btc := line(t, rep, asset.BTC)
			require.True(t, btc.Inconsistent, "%+v", btc)
			require.Positive(t, btc.LedgerFindings)
			require.False(t, btc.Insolvent, "%+v", btc)
			require.False(t, line(t, rep, asset.BTCLN).Inconsistent, "the findings are of BTC only")
			require.Contains(t, strings.Join(rep.Alerts, "\n"), "BTC: the ledger is inconsistent")
			e.report(t) // still inconsistent: the same episode
			alerts := e.alerts(t, reconcile.AlertInconsistent)
			require.Len(t, alerts, 1)
			require.Contains(t, alerts[0].Detail, "BTC ledger is inconsistent")
			require.Empty(t, e.alerts(t, reconcile.AlertInsolvent))

			// Nothing of BTC leaves: the approved one is not submitted, the
			// pending one cannot be approved, a new one waits.
			e.pass(t)
			e.requireStatus(t, approved, "approved", "nothing is submitted while halted")
			require.Empty(t, e.Sim.Payouts())
			r := e.AdminPost("/v1/admin/withdrawals/"+pending+"/approve", nil)
			require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
			require.Contains(t, string(r.Body), "inconsistency: reconciliation found the BTC ledger inconsistent")
			e.requireStatus(t, pending, "pending_approval")
			requireWaits(t, e, "bea", asset.BTC, "inconsistency: ")
			r = e.Get("/readyz")
			require.Equal(t, http.StatusServiceUnavailable, r.Status)
			require.Contains(t, string(r.Body), "withdrawals halted: BTC inconsistent since")

			// BTC_LN is not concerned: it flows.
			ln := e.withdraw(t, "ann", asset.BTCLN, 20_000, chaintest.BOLT11(t, chain.Regtest, e.Clock.Now(), 0, 2*time.Hour))
			e.requireStatus(t, ln, "approved")

			if c.undo == nil {
				return
			}
			// Repaired: the next report ends the episode and lifts the halt.
			c.undo(e, t)
			rep = e.report(t)
			require.True(t, rep.LedgerConsistent, "%+v", rep)
			require.False(t, line(t, rep, asset.BTC).Inconsistent)
			r = e.Get("/readyz")
			require.NotContains(t, string(r.Body), "withdrawals halted")
			r = e.AdminPost("/v1/admin/withdrawals/"+pending+"/approve", nil)
			require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			e.pass(t)
			e.requireStatus(t, approved, "submitted")
		})
	}
}

// requireWaits: a new withdrawal of user's waits for an operator with a
// reason that starts with reason.
func requireWaits(t *testing.T, e *env, user, code, reason string) {
	t.Helper()
	r := e.Post("/v1/withdrawals", map[string]any{"external_user_id": user, "asset": code, "amount": "20000", "destination_address": btcAddr(t, "halted")})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	m := r.Map(t)
	require.Equal(t, "pending_approval", m["status"])
	require.True(t, strings.HasPrefix(m["approval_reason"].(string), reason), m["approval_reason"])
}

func holdAlerts(rep reconcile.Report) []string {
	var out []string
	for _, a := range rep.Alerts {
		if strings.HasPrefix(a, "holds: BTC ") {
			out = append(out, a)
		}
	}
	return out
}

// TestUnbackedCreditMaskedByInFlightIsHalted: a one-sided credit to a
// user, while another user's payout is in the processor's hands, leaves
// the chain covering what is owed less what is expected to be leaving:
// not insolvent. The unbalanced entry halts the asset all the same, and
// the withdrawal of the forged money is not handed to the processor.
func TestUnbackedCreditMaskedByInFlightIsHalted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.deposit(t, "lee", asset.BTC, 1_000_000)
	e.deposit(t, "mal", asset.BTC, 10_000)
	leaving := e.withdraw(t, "lee", asset.BTC, 100_000, btcAddr(t, "lee's payee"))
	e.pass(t)
	e.requireStatus(t, leaving, "submitted")

	e.forgeCredit(t, "mal", asset.BTC, 90_000)
	forged := e.withdraw(t, "mal", asset.BTC, 95_000, btcAddr(t, "mal's payee"))
	e.requireStatus(t, forged, "approved", "created before any report")
	rep := e.report(t)
	btc := line(t, rep, asset.BTC)
	require.False(t, btc.Insolvent, "the payout in the processor's hands covers the forged credit: %+v", btc)
	require.Equal(t, "-0.00010000", *btc.Shortfall)
	require.True(t, btc.Inconsistent)
	require.Len(t, rep.UnbalancedEntries, 1)
	require.Len(t, e.alerts(t, reconcile.AlertInconsistent), 1)

	e.pass(t)
	e.requireStatus(t, forged, "approved", "halted: not handed to the processor")
	for _, p := range e.Sim.Payouts() {
		require.NotEqual(t, forged, p.WithdrawalID, "the forged credit was not paid")
	}
}

// TestAckAcceptsAShortfall: an acknowledgement accepts the shortfall the
// latest report found and lifts the halt; a report with the same
// shortfall changes nothing, and a larger one (the wallet drained) halts
// the asset again with a new alert.
func TestAckAcceptsAShortfall(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.deposit(t, "ivy", asset.BTC, 1_000_000)
	require.NoError(t, e.Sim.SetWalletBalance("0.00999900", "0")) // 100 sat short
	btc := line(t, e.report(t), asset.BTC)
	require.True(t, btc.Insolvent)
	require.Equal(t, "0.00000100", *btc.Shortfall)
	require.Nil(t, btc.AcknowledgedShortfall)
	// A signed acknowledgement states what it accepts: a signature over
	// another shortfall, or an approver's, is refused and lifts nothing.
	ops := operatortest.Team(t, e.App.DB.Bun, time.Now,
		operatortest.Member{Name: "alice", Role: operator.Admin}, operatortest.Member{Name: "bob", Role: operator.Approver})
	note := "100 sat of fees, booked tomorrow"
	open, err := e.App.Reconcile.Unacknowledged(ctx, asset.BTC)
	require.NoError(t, err)
	require.Len(t, open, 1)
	x := reconcile.AckExpect(open, note)
	require.Equal(t, map[string]string{"BTC.insolvency": "100", "note": note}, x.Facts)
	sign := func(s *operator.Signer, facts map[string]string) *operator.Envelope {
		env := operatortest.Sign(t, s, operator.NewStatement(x.Action, x.Resource, facts, time.Now()))
		return &env
	}
	_, err = e.App.Reconcile.Ack(ctx, audit.CLI("ops"), sign(ops["alice"], map[string]string{"BTC.insolvency": "50", "note": note}), asset.BTC, note)
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "%v", err)
	_, err = e.App.Reconcile.Ack(ctx, audit.CLI("ops"), sign(ops["bob"], x.Facts), asset.BTC, note)
	require.Equal(t, fault.Forbidden, fault.KindOf(err), "%v", err)
	require.True(t, line(t, e.report(t), asset.BTC).Insolvent)
	eps, err := e.App.Reconcile.Ack(ctx, audit.CLI("ops"), sign(ops["alice"], x.Facts), asset.BTC, note)
	require.NoError(t, err)
	require.Len(t, eps, 1)
	require.Equal(t, int64(100), *eps[0].AckedShortfall)
	require.Equal(t, "op:alice", *eps[0].AckedBy)

	btc = line(t, e.report(t), asset.BTC)
	require.True(t, btc.Insolvent)
	require.Equal(t, "0.00000100", *btc.AcknowledgedShortfall)
	before := e.withdraw(t, "ivy", asset.BTC, 20_000, btcAddr(t, "accepted"))
	e.requireStatus(t, before, "approved")
	require.Len(t, e.alerts(t, reconcile.AlertInsolvent), 1)

	// 90% of the wallet leaves: more than was accepted.
	require.NoError(t, e.Sim.SetWalletBalance("0.00100000", "0"))
	btc = line(t, e.report(t), asset.BTC)
	require.True(t, btc.Insolvent)
	require.Equal(t, "0.00900000", *btc.Shortfall) // 1,000,000 owed, 100,000 held
	require.Equal(t, "0.00000100", *btc.AcknowledgedShortfall, "what was accepted, less than the shortfall now")
	alerts := e.alerts(t, reconcile.AlertInsolvent)
	require.Len(t, alerts, 2)
	require.Contains(t, alerts[1].Detail, "more than the shortfall of 0.00000100 BTC that op:alice accepted")
	e.pass(t)
	e.requireStatus(t, before, "approved", "halted again: nothing is submitted")
	require.Empty(t, e.Sim.Payouts())
	requireWaits(t, e, "ivy", asset.BTC, "insolvency: ")
	r := e.Get("/readyz")
	require.Contains(t, string(r.Body), "withdrawals halted: BTC insolvent since")
	btc = line(t, e.report(t), asset.BTC)
	require.Nil(t, btc.AcknowledgedShortfall, "a new episode, not acknowledged")
	require.Len(t, e.alerts(t, reconcile.AlertInsolvent), 2, "one alert per episode")
}

// TestAckAcceptsTheFindings: an acknowledged inconsistency lifts the halt;
// a later report with more findings of the asset halts it again, with a
// new alert.
func TestAckAcceptsTheFindings(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.deposit(t, "jo", asset.BTC, 1_000_000)
	e.forgeCredit(t, "jo", asset.BTC, 1)
	require.NoError(t, e.Sim.SetWalletBalance("0.02", "0"))
	btc := line(t, e.report(t), asset.BTC)
	require.True(t, btc.Inconsistent)
	eps, err := e.App.Reconcile.Ack(ctx, audit.CLI("ops"), nil, "", "a test entry, corrected")
	require.NoError(t, err)
	require.Len(t, eps, 1)
	require.Equal(t, reconcile.KindInconsistency, eps[0].Kind)
	btc = line(t, e.report(t), asset.BTC)
	require.Equal(t, btc.LedgerFindings, *btc.AcknowledgedFindings)
	id := e.withdraw(t, "jo", asset.BTC, 20_000, btcAddr(t, "accepted"))
	e.requireStatus(t, id, "approved")

	e.forgeCredit(t, "jo", asset.BTC, 1)
	btc = line(t, e.report(t), asset.BTC)
	require.Greater(t, btc.LedgerFindings, *eps[0].AckedFindings)
	require.Len(t, e.alerts(t, reconcile.AlertInconsistent), 2)
	requireWaits(t, e, "jo", asset.BTC, "inconsistency: ")
}

// TestHaltRefusesUSDTApprovalAndMarkBroadcast: while USDT_TRC20 is halted
// (an insolvency here), an operator can neither approve a USDT withdrawal
// nor mark one broadcast: 409 with the reason. Once the halt ends, both
// go through.
func TestHaltRefusesUSDTApprovalAndMarkBroadcast(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.deposit(t, "kim", asset.USDTTRC20, 100_000_000)
	dest, err := chain.ParseTronAddress(chaintest.Tron("kim's payee"))
	require.NoError(t, err)
	sent := e.withdraw(t, "kim", asset.USDTTRC20, 25_000_000, dest.String())
	r := e.AdminPost("/v1/admin/withdrawals/"+sent+"/approve", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	waiting := e.withdraw(t, "kim", asset.USDTTRC20, 10_000_000, dest.String())

	e.Node.SetUSDTBalance(e.Pool[0], 50_000_000) // half the pool is gone
	require.True(t, line(t, e.report(t), asset.USDTTRC20).Insolvent)
	r = e.AdminPost("/v1/admin/withdrawals/"+waiting+"/approve", nil)
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), "approval refused: USDT_TRC20 withdrawals are halted: insolvency: ")
	txid := e.Node.AddUSDTTransfer("", e.Hot, dest, 23_000_000, true)
	r = e.AdminPost("/v1/admin/withdrawals/"+sent+"/mark-broadcast", map[string]any{"txid": txid})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), "mark-broadcast refused: USDT_TRC20 withdrawals are halted: insolvency: ")
	e.requireStatus(t, sent, "approved")

	e.Node.SetUSDTBalance(e.Pool[0], 100_000_000)
	require.False(t, line(t, e.report(t), asset.USDTTRC20).Insolvent)
	r = e.AdminPost("/v1/admin/withdrawals/"+sent+"/mark-broadcast", map[string]any{"txid": txid})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r = e.AdminPost("/v1/admin/withdrawals/"+waiting+"/approve", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
}

// TestFullCheckFindingEndsAtAFullCheck: a finding below the incremental
// check's boundary (a posting's copy of its entry changed with the
// triggers off), which only the full check reads, halts the asset; the
// next incremental report, which cannot see it, does not end the episode;
// a consistent full check does.
func TestFullCheckFindingEndsAtAFullCheck(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.deposit(t, "lou", asset.BTC, 1_000_000)
	require.True(t, e.report(t).Healthy)
	require.True(t, e.report(t).Healthy)
	tamper := func(memo string) {
		require.Equal(t, int64(1), dbtest.ExecBehindTriggers(t, e.DBURL, `UPDATE ledger_postings SET entry_memo = $1
 WHERE entry_kind = 'deposit_credit' AND account_id = (SELECT id FROM ledger_accounts WHERE owner = 'lou' AND kind = 'user_available')`, memo))
	}
	var memo string
	require.NoError(t, e.App.DB.Bun.NewSelect().Table("ledger_entries").Column("memo").Where("kind = 'deposit_credit'").Scan(context.Background(), &memo))
	tamper("not the entry's")
	full := func() reconcile.Report {
		r := e.AdminGet("/v1/admin/reconciliation?ledger_check=full")
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var rep reconcile.Report
		r.JSON(t, &rep)
		return rep
	}
	require.True(t, line(t, full(), asset.BTC).Inconsistent)
	require.Len(t, e.alerts(t, reconcile.AlertInconsistent), 1)
	// The incremental check does not read below its boundary (unless a
	// transaction of another database held the boundary back since).
	if rep := e.report(t); !rep.LedgerConsistent {
		t.Logf("the incremental check read the tampered posting too: %q", rep.MaterializedVsDerivedDrifts)
	}
	r := e.Get("/readyz")
	require.Contains(t, string(r.Body), "withdrawals halted: BTC inconsistent since", "still halted")

	tamper(memo)
	require.True(t, full().LedgerConsistent)
	r = e.Get("/readyz")
	require.NotContains(t, string(r.Body), "withdrawals halted")
}

package reconcile_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/alert"
	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/ledger"
	"svc/modules/reconcile"
	"svc/modules/withdrawal"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
	"svc/platform/chain/chaintest"
	"svc/platform/clock"
	"svc/platform/config"
	"svc/platform/dbtest"
	"svc/platform/tron/tronsim"
)

const hookSecret = "test-processor-webhook-secret"

// env is the service against the BTCPay and TronGrid simulators, on a
// fake clock.
type env struct {
	*apptest.Env
	Sim   *btcpaysim.Sim
	Node  *tronsim.Sim
	Clock *clock.Fake
	Hot   chain.TronAddress
	Pool  []chain.TronAddress
	usdt  int64 // USDT paid into the pool by the tests
}

func setup(t *testing.T) *env {
	t.Helper()
	sim, fake := apptest.StartProcessor(t, btcpaysim.Options{})
	return start(t, sim, fake, nil)
}

// start is the service against the BTCPay simulator sim and a TRON node
// whose hot wallet has 1,000 TRX of gas, with every asset enabled: on the
// fake clock when one is given, and with cfg's changes to the
// configuration when it is set.
func start(tb testing.TB, sim *btcpaysim.Sim, fake *clock.Fake, cfg func(*config.Config)) *env {
	tb.Helper()
	node := tronsim.Start(tb)
	hot, err := chain.ParseTronAddress(chaintest.Tron("hot wallet"))
	require.NoError(tb, err)
	e := &env{Sim: sim, Node: node, Clock: fake, Hot: hot}
	for _, p := range sim.TronPool() {
		a, err := chain.ParseTronAddress(p)
		require.NoError(tb, err)
		e.Pool = append(e.Pool, a)
	}
	var opts []apptest.Option
	if cfg != nil {
		opts = append(opts, apptest.WithConfig(cfg))
	}
	opts = append(opts, apptest.WithProcessor(sim, hookSecret), apptest.WithConfig(func(c *config.Config) {
		c.Deposits.USDTPool = sim.TronPool()
		c.Tron.URL, c.Tron.HotWallet = node.URL, hot.String()
	}))
	if fake != nil {
		opts = append(opts, apptest.WithClock(fake))
	}
	e.Env = apptest.New(tb, opts...)
	e.EnableAssets(asset.BTCLN, asset.USDTTRC20)
	node.SetTRXBalance(hot, 1_000_000_000) // 1,000 TRX of gas
	return e
}

// report reads the report through the API (validated against openapi.json).
func (e *env) report(t *testing.T) reconcile.Report {
	t.Helper()
	r := e.AdminGet("/v1/admin/reconciliation")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var rep reconcile.Report
	r.JSON(t, &rep)
	return rep
}

func line(t *testing.T, rep reconcile.Report, code string) reconcile.CustodyLine {
	t.Helper()
	for _, l := range rep.Custody {
		if l.Asset == code {
			return l
		}
	}
	t.Fatalf("no custody line for %s in %+v", code, rep.Custody)
	return reconcile.CustodyLine{}
}

// deposit pays a deposit of units to user at the processor and settles it
// (for USDT_TRC20 the simulated chain's pool balance follows).
func (e *env) deposit(t *testing.T, user, code string, units int64) {
	t.Helper()
	r := e.Post("/v1/deposits", map[string]any{"external_user_id": user, "asset": code, "expected_amount": fmt.Sprint(units)})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	id := r.Map(t)["deposit_id"].(string)
	inv, ok := e.Sim.InvoiceByOrderID(id)
	require.True(t, ok)
	_, err := e.Sim.Pay(inv.ID, btcpaysim.PayParams{Settled: true})
	require.NoError(t, err)
	require.NoError(t, e.App.Deposits.Reconcile(context.Background(), uuid.MustParse(id)))
	r = e.Get("/v1/deposits/" + id)
	require.Equal(t, "settled", r.Map(t)["status"], string(r.Body))
	if code == asset.USDTTRC20 {
		e.usdt += units
		e.Node.SetUSDTBalance(e.Pool[0], e.usdt)
	}
}

func (e *env) withdraw(t *testing.T, user, code string, units int64, dest string) string {
	t.Helper()
	r := e.Post("/v1/withdrawals", map[string]any{"external_user_id": user, "asset": code, "amount": fmt.Sprint(units), "destination_address": dest})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	return r.Map(t)["withdrawal_id"].(string)
}

func (e *env) status(t *testing.T, id string) (string, map[string]any) {
	t.Helper()
	r := e.Get("/v1/withdrawals/" + id)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	m := r.Map(t)
	return m["status"].(string), m
}

// requireStatus requires the withdrawal's status through the API.
func (e *env) requireStatus(t *testing.T, id, want string, msgAndArgs ...any) {
	t.Helper()
	st, _ := e.status(t, id)
	require.Equal(t, want, st, msgAndArgs...)
}

// completePayout has the processor complete the withdrawal's payout.
func (e *env) completePayout(t *testing.T, id string) {
	t.Helper()
	_, err := e.Sim.CompletePayout(e.payoutOf(t, id).ID, "")
	require.NoError(t, err)
}

// broadcastPayout has the processor's wallet send the withdrawal's payout.
func (e *env) broadcastPayout(t *testing.T, id string) {
	t.Helper()
	_, err := e.Sim.BroadcastPayout(e.payoutOf(t, id).ID, "")
	require.NoError(t, err)
}

func (e *env) pass(t *testing.T) {
	t.Helper()
	require.NoError(t, e.App.Withdrawals.ProcessPayouts(context.Background()))
}

func (e *env) payoutOf(t *testing.T, id string) btcpaysim.PayoutInfo {
	t.Helper()
	for _, p := range e.Sim.Payouts() {
		if p.WithdrawalID == id {
			return p
		}
	}
	t.Fatalf("no payout for %s", id)
	return btcpaysim.PayoutInfo{}
}

func (e *env) alerts(t *testing.T, typ string) []alert.Alert {
	t.Helper()
	var out []alert.Alert
	require.NoError(t, e.App.DB.Bun.NewSelect().Model(&out).Where("type = ?", typ).Order("id").Scan(context.Background()))
	return out
}

func btcAddr(t *testing.T, seed string) string {
	t.Helper()
	return chaintest.P2WPKH(t, chain.Regtest, seed)
}

// TestCleanReport: after deposits in every asset and withdrawals in every
// state, the report is healthy, the chain matches the ledger's custody
// exactly, and the report is kept in the history.
func TestCleanReport(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.deposit(t, "ann", asset.BTC, 5_000_000)
	e.deposit(t, "ann", asset.BTCLN, 500_000)
	e.deposit(t, "ann", asset.USDTTRC20, 100_000_000)
	rep := e.report(t)
	require.True(t, rep.Healthy, "%+v", rep)

	// Withdrawals: pending, submitted, broadcast, confirmed, failed,
	// refunded; a Lightning one paid; a USDT one approved.
	pending := e.withdraw(t, "ann", asset.BTC, 1_500_000, btcAddr(t, "pending"))
	submitted := e.withdraw(t, "ann", asset.BTC, 100_000, btcAddr(t, "submitted"))
	broadcast := e.withdraw(t, "ann", asset.BTC, 200_000, btcAddr(t, "broadcast"))
	confirmed := e.withdraw(t, "ann", asset.BTC, 300_000, btcAddr(t, "confirmed"))
	failed := e.withdraw(t, "ann", asset.BTC, 50_000, btcAddr(t, "failed"))
	ln := e.withdraw(t, "ann", asset.BTCLN, 20_000, chaintest.BOLT11(t, chain.Regtest, e.Clock.Now(), 0, 2*time.Hour))
	usdt := e.withdraw(t, "ann", asset.USDTTRC20, 20_000_000, chaintest.Tron("payee"))
	e.pass(t)
	e.broadcastPayout(t, broadcast)
	e.completePayout(t, confirmed)
	require.NoError(t, e.Sim.FailPayout(e.payoutOf(t, failed).ID))
	e.completePayout(t, ln)
	e.pass(t)
	r := e.AdminPost("/v1/admin/withdrawals/"+failed+"/release", map[string]any{"attestation": "the processor cancelled it; nothing was sent"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r = e.AdminPost("/v1/admin/withdrawals/"+usdt+"/approve", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	for id, want := range map[string]string{pending: "pending_approval", submitted: "submitted", broadcast: "broadcast",
		confirmed: "confirmed", failed: "refunded", ln: "confirmed", usdt: "approved"} {
		e.requireStatus(t, id, want, id)
	}

	rep = e.report(t)
	require.True(t, rep.Healthy, "%+v", rep)
	require.True(t, rep.LedgerConsistent)
	require.Empty(t, rep.Alerts)
	for _, l := range rep.Custody {
		require.False(t, l.Insolvent, l.Asset)
		require.NotNil(t, l.ChainBalance, l.Asset)
		require.Equal(t, zero(l.Asset), *l.Difference, "%s: chain matches the ledger's custody: %+v", l.Asset, l)
	}
	btc := line(t, rep, asset.BTC)
	require.Equal(t, "0.00200000", btc.LedgerInFlight[:10]) // the broadcast payout: its net plus the fee
	// Expected to be leaving: in flight, plus the submitted payout's gross
	// (the processor may have sent it before the tracker sees it).
	require.Equal(t, "0.00300000", btc.ExpectedShortfall)
	require.Equal(t, "20.000000", line(t, rep, asset.USDTTRC20).ExpectedShortfall) // the approved USDT one
	require.Equal(t, "0.04700000", btc.UserObligations)                            // 0.05 less the confirmed 0.003
	require.Contains(t, btc.ChainSource, "on-chain wallet")
	require.Contains(t, line(t, rep, asset.USDTTRC20).ChainSource, "TronGrid")

	hist, err := e.App.Reconcile.History(context.Background(), 10)
	require.NoError(t, err)
	require.Len(t, hist, 2)
	require.Equal(t, reconcile.TriggerOnDemand, hist[0].Trigger)
	require.True(t, hist[0].Healthy)
}

func zero(code string) string {
	if code == asset.USDTTRC20 {
		return "0.000000"
	}
	return "0.00000000"
}

// TestDrift: a materialized balance changed behind the ledger's back makes
// the report inconsistent and unhealthy, naming the account.
func TestDrift(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.deposit(t, "bob", asset.BTC, 100_000)
	// The database refuses this from the service's own role (migration
	// 0014), so only a superuser with the triggers off can do it.
	dbtest.ExecBehindTriggers(t, e.DBURL,
		`UPDATE ledger_accounts SET balance = balance + 1 WHERE owner = 'bob' AND kind = 'user_available'`)
	rep := e.report(t)
	require.False(t, rep.Healthy)
	require.False(t, rep.LedgerConsistent)
	require.Len(t, rep.MaterializedVsDerivedDrifts, 1)
	require.Contains(t, rep.MaterializedVsDerivedDrifts[0], `"bob"`)
	require.Contains(t, strings.Join(rep.Alerts, "\n"), "materialized_vs_derived_drifts")
	dbtest.ExecBehindTriggers(t, e.DBURL,
		`UPDATE ledger_accounts SET balance = balance - 1 WHERE owner = 'bob' AND kind = 'user_available'`)
	require.True(t, e.report(t).Healthy)
}

// TestReportLedgerCheck: the report's ledger check is the full one the
// first time (nothing recorded before), then incremental from the last
// consistent one; ?ledger_check=full asks for the full one.
func TestReportLedgerCheck(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.deposit(t, "cid", asset.BTC, 100_000)
	first := e.report(t)
	require.True(t, first.LedgerConsistent)
	require.Equal(t, ledger.ScopeFull, first.LedgerCheck.Scope)
	require.NotNil(t, first.LedgerCheck.CheckID)

	e.deposit(t, "cid", asset.BTC, 200_000)
	next := e.report(t)
	require.True(t, next.Healthy, "%+v", next)
	c := next.LedgerCheck
	require.Equal(t, ledger.ScopeIncremental, c.Scope)
	require.Equal(t, *first.LedgerCheck.CheckID, *c.SinceCheck)
	require.Equal(t, first.LedgerCheck.ToXid, c.FromXid)
	require.NotNil(t, c.SinceCheckedAt)
	require.NotNil(t, c.LastEntry, "the second deposit's entry")

	r := e.AdminGet("/v1/admin/reconciliation?ledger_check=full")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var full reconcile.Report
	r.JSON(t, &full)
	require.Equal(t, ledger.ScopeFull, full.LedgerCheck.Scope)
	r = e.AdminGet("/v1/admin/reconciliation?ledger_check=incremental")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	for _, q := range []string{"?ledger_check=partial", "?full=1"} {
		r = e.AdminGet("/v1/admin/reconciliation" + q)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", q, r.Body)
	}
}

// TestInsolvencyHaltsWithdrawals: a wallet short of what users are owed
// makes the asset insolvent: new withdrawals wait for an operator with
// reason insolvency, none is submitted, /readyz is degraded, one alert;
// a clean report lifts it all.
func TestInsolvencyHaltsWithdrawals(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.deposit(t, "cat", asset.BTC, 1_000_000)
	approved := e.withdraw(t, "cat", asset.BTC, 100_000, btcAddr(t, "before"))
	require.NoError(t, e.Sim.SetWalletBalance("0.00900000", "0")) // 100,000 sat missing
	rep := e.report(t)
	require.False(t, rep.Healthy)
	btc := line(t, rep, asset.BTC)
	require.True(t, btc.Insolvent)
	require.Equal(t, "-0.00100000", *btc.Difference)
	require.Contains(t, strings.Join(rep.Alerts, "\n"), "BTC: insolvent")
	e.report(t) // still insolvent: the same episode
	require.Len(t, e.alerts(t, reconcile.AlertInsolvent), 1)
	// A halt lost while its episode is open (as a race between two reports
	// once could) is set again by the next insolvent report.
	_, err := e.App.DB.Bun.ExecContext(context.Background(), "UPDATE assets SET withdrawals_halted_since = NULL WHERE asset = 'BTC'")
	require.NoError(t, err)
	e.report(t)
	require.Len(t, e.alerts(t, reconcile.AlertInsolvent), 1)

	halted := e.withdraw(t, "cat", asset.BTC, 20_000, btcAddr(t, "halted"))
	e.requireStatus(t, halted, "pending_approval")
	r := e.AdminGet("/v1/admin/withdrawals?status=pending_approval")
	require.Contains(t, string(r.Body), "insolvency: reconciliation found BTC custody short")
	e.pass(t)
	e.requireStatus(t, approved, "approved", "nothing is submitted while halted")
	require.Empty(t, e.Sim.Payouts())
	r = e.Get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, r.Status)
	require.Contains(t, string(r.Body), "withdrawals halted: BTC insolvent since")

	require.NoError(t, e.Sim.SetWalletBalance("0.01000000", "0"))
	require.True(t, e.report(t).Healthy)
	r = e.Get("/readyz")
	require.NotContains(t, string(r.Body), "withdrawals halted")
	e.pass(t)
	e.requireStatus(t, approved, "submitted")
	after := e.withdraw(t, "cat", asset.BTC, 20_000, btcAddr(t, "after"))
	e.requireStatus(t, after, "approved")
}

// TestAckLiftsTheHalt: an operator's acknowledgement lifts the halt at
// once; the episode stays open without new alerts until a clean report,
// and a later insolvency is a new episode with its own alert.
func TestAckLiftsTheHalt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.deposit(t, "dan", asset.BTC, 1_000_000)
	ctx := context.Background()
	_, err := e.App.Reconcile.Ack(ctx, audit.CLI("ops"), nil, "", "nothing to ack")
	require.ErrorIs(t, err, reconcile.ErrNothingToAck)
	require.NoError(t, e.Sim.SetWalletBalance("0.00500000", "0"))
	require.True(t, line(t, e.report(t), asset.BTC).Insolvent)
	eps, err := e.App.Reconcile.Ack(ctx, audit.CLI("ops"), nil, asset.BTC, "the cold wallet holds the rest")
	require.NoError(t, err)
	require.Len(t, eps, 1)
	id := e.withdraw(t, "dan", asset.BTC, 20_000, btcAddr(t, "acked"))
	e.requireStatus(t, id, "approved")
	require.True(t, line(t, e.report(t), asset.BTC).Insolvent) // still, but acknowledged
	id = e.withdraw(t, "dan", asset.BTC, 20_000, btcAddr(t, "acked 2"))
	e.requireStatus(t, id, "approved")
	require.Len(t, e.alerts(t, reconcile.AlertInsolvent), 1)

	require.NoError(t, e.Sim.SetWalletBalance("0.01000000", "0"))
	require.True(t, e.report(t).Healthy)
	require.NoError(t, e.Sim.SetWalletBalance("0.00500000", "0"))
	require.True(t, line(t, e.report(t), asset.BTC).Insolvent)
	require.Len(t, e.alerts(t, reconcile.AlertInsolvent), 2)
	id = e.withdraw(t, "dan", asset.BTC, 20_000, btcAddr(t, "halted again"))
	e.requireStatus(t, id, "pending_approval")
	n, err := e.App.DB.Bun.NewSelect().Table("audit_log").Where("action = ?", audit.ReconciliationAck).Count(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}

// TestSourcesUnreachable: a processor and a TRON node that cannot be read
// give null balances (not zero) and an unhealthy report with the reasons,
// and change no halt.
func TestSourcesUnreachable(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.deposit(t, "eve", asset.BTC, 100_000)
	e.Sim.GoDown(btcpaysim.DownError)
	e.Node.SetMode(tronsim.Errors)
	rep := e.report(t)
	require.False(t, rep.Healthy)
	for _, code := range []string{asset.BTC, asset.BTCLN, asset.USDTTRC20} {
		l := line(t, rep, code)
		require.Nil(t, l.ChainBalance, code)
		require.Nil(t, l.Difference, code)
		require.False(t, l.Insolvent, code)
		require.Contains(t, strings.Join(rep.Alerts, "\n"), code+": chain balance unknown")
	}
	e.Sim.Up()
	e.Node.SetMode(tronsim.Up)
	require.True(t, e.report(t).Healthy)
}

// TestPayoutInFlight: a payout broadcast and not yet confirmed is an
// expected shortfall, not an insolvency.
func TestPayoutInFlight(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.deposit(t, "fay", asset.BTC, 1_000_000)
	id := e.withdraw(t, "fay", asset.BTC, 400_000, btcAddr(t, "in flight"))
	e.pass(t)
	e.broadcastPayout(t, id)
	e.pass(t)
	e.requireStatus(t, id, "broadcast")
	rep := e.report(t)
	require.True(t, rep.Healthy, "%+v", rep)
	btc := line(t, rep, asset.BTC)
	require.Equal(t, "0.00400000", btc.ExpectedShortfall) // 399,718 net + 282 network fee
	require.Equal(t, "0.01000000", btc.UserObligations)   // still held for fay
	require.Equal(t, "0.00600000", *btc.ChainBalance)
	require.False(t, btc.Insolvent)
}

// TestGasAlertOncePerEpisode: the hot wallet's TRX below the threshold
// raises one alert per episode, shows in the report, and re-arms when it
// recovers.
func TestGasAlertOncePerEpisode(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	require.NoError(t, e.App.Reconcile.CheckGas(ctx))
	require.Empty(t, e.alerts(t, reconcile.AlertGasLow))
	e.Node.SetTRXBalance(e.Hot, 150_000_000) // 150 TRX < 200
	require.NoError(t, e.App.Reconcile.CheckGas(ctx))
	require.NoError(t, e.App.Reconcile.CheckGas(ctx))
	require.Len(t, e.alerts(t, reconcile.AlertGasLow), 1)
	rep := e.report(t)
	require.False(t, rep.Healthy)
	require.Contains(t, strings.Join(rep.Alerts, "\n"), "150 TRX, below TRX_ALERT_THRESHOLD")
	e.Node.SetTRXBalance(e.Hot, 500_000_000)
	require.NoError(t, e.App.Reconcile.CheckGas(ctx))
	require.True(t, e.report(t).Healthy)
	e.Node.SetTRXBalance(e.Hot, 10_000_000)
	require.NoError(t, e.App.Reconcile.CheckGas(ctx))
	require.Len(t, e.alerts(t, reconcile.AlertGasLow), 2)
}

// TestWithdrawalGateNamesInsolvency is the gate's reason as the platform
// sees it in the 201.
func TestWithdrawalGateNamesInsolvency(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.deposit(t, "gil", asset.BTC, 1_000_000)
	require.NoError(t, e.Sim.SetWalletBalance("0", "0"))
	e.report(t)
	r := e.Post("/v1/withdrawals", map[string]any{"external_user_id": "gil", "asset": asset.BTC, "amount": "20000", "destination_address": btcAddr(t, "gate")})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	m := r.Map(t)
	require.Equal(t, string(withdrawal.StatusPendingApproval), m["status"])
	require.True(t, strings.HasPrefix(m["approval_reason"].(string), "insolvency: "), m["approval_reason"])
}

// TestHistoryIsPruned: the hourly run deletes reports past the retention,
// except those an episode names.
func TestHistoryIsPruned(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.deposit(t, "hal", asset.BTC, 100_000)
	require.NoError(t, e.Sim.SetWalletBalance("0", "0"))
	e.report(t) // insolvent: an episode names this report
	require.NoError(t, e.Sim.SetWalletBalance("0.001", "0"))
	e.report(t)
	e.Clock.Advance(reconcile.HistoryRetention + time.Hour)
	_, err := e.App.Reconcile.Run(ctx, reconcile.TriggerHourly)
	require.NoError(t, err)
	hist, err := e.App.Reconcile.History(ctx, 10)
	require.NoError(t, err)
	require.Len(t, hist, 2, "the new report and the one the episode names")
	require.Equal(t, reconcile.TriggerHourly, hist[0].Trigger)
	require.False(t, hist[1].Healthy)
}

// TestHourlyRunChecksTheWholeLedgerWhenDue: the hourly run uses the
// incremental ledger check, and the full one when the last full check is
// older than LEDGER_FULL_CHECK_INTERVAL (a week by default) or none was
// recorded.
func TestHourlyRunChecksTheWholeLedgerWhenDue(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.deposit(t, "dan", asset.BTC, 100_000)
	scopes := func() string {
		t.Helper()
		rep, err := e.App.Reconcile.RunHourly(ctx)
		require.NoError(t, err)
		require.True(t, rep.Healthy, "%+v", rep)
		return rep.LedgerCheck.Scope
	}
	require.Equal(t, ledger.ScopeFull, scopes(), "no full check recorded yet")
	e.deposit(t, "dan", asset.BTC, 1_000)
	require.Equal(t, ledger.ScopeIncremental, scopes())
	e.Clock.Advance(6 * 24 * time.Hour)
	require.Equal(t, ledger.ScopeIncremental, scopes(), "six days after the full check")
	e.Clock.Advance(24*time.Hour + time.Minute)
	require.Equal(t, ledger.ScopeFull, scopes(), "a week after it")
	require.Equal(t, ledger.ScopeIncremental, scopes(), "and the week starts again")

	// An operator's report is incremental unless asked otherwise, and a
	// full one asked for counts.
	e.Clock.Advance(8 * 24 * time.Hour)
	require.Equal(t, ledger.ScopeIncremental, e.report(t).LedgerCheck.Scope)
	r := e.AdminGet("/v1/admin/reconciliation?ledger_check=full")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, ledger.ScopeIncremental, scopes(), "the operator's full check was just now")

	// Off: never by itself.
	e.Clock.Advance(8 * 24 * time.Hour)
	e.App.Reconcile.Config.FullCheckEvery = 0
	require.Equal(t, ledger.ScopeIncremental, scopes())
}

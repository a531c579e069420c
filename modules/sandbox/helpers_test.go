package sandbox_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/deposit"
	"svc/modules/event/eventtest"
	"svc/modules/ledger"
	"svc/modules/withdrawal"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
	"svc/platform/chain/chaintest"
	"svc/platform/clock"
	"svc/platform/config"
	"svc/platform/platformsim"
	"svc/platform/tron/tronsim"
)

const (
	hookSecret     = "test-processor-webhook-secret"
	platformSecret = "test-platform-webhook-secret"
)

// env is a test-mode deployment on the simulator, as make run starts it:
// the simulator's webhooks reach the ingress, the worker runs (payouts
// every second), a TRON node simulator with a hot wallet, and the
// platform's webhook receiver. Every scenario ends with its books checked.
type env struct {
	*apptest.Env
	Sim      *btcpaysim.Sim
	Clock    *clock.Fake
	Node     *tronsim.Sim
	Hot      string
	Receiver *platformsim.Receiver
}

func setup(t *testing.T, cfg ...func(*config.Config)) *env {
	t.Helper()
	sim, fake := apptest.StartProcessor(t, btcpaysim.Options{})
	node := tronsim.Start(t)
	rcv := platformsim.New(platformSecret)
	rs := httptest.NewServer(rcv)
	t.Cleanup(rs.Close)
	hot := chaintest.Tron("sandbox hot wallet")
	e := &env{Sim: sim, Clock: fake, Node: node, Hot: hot, Receiver: rcv}
	e.Env = apptest.New(t, apptest.WithClock(fake), apptest.WithProcessor(sim, hookSecret), apptest.WithWorker(),
		apptest.WithConfig(func(c *config.Config) {
			c.Deposits.USDTPool = sim.TronPool()
			c.Tron.URL, c.Tron.HotWallet = node.URL, hot
			c.Webhooks.URL, c.Webhooks.Secret = rs.URL+"/webhooks", platformSecret
			c.Payouts.PollInterval = time.Second
			for _, fn := range cfg {
				fn(c)
			}
		}))
	sim.SetWebhook(e.URL+"/webhooks/processor", hookSecret)
	e.EnableAssets(asset.BTCLN, asset.USDTTRC20)
	apptest.CheckAtEnd(t, e.requireBooks)
	return e
}

// requireBooks: the ledger check and the reconciliation's ledger check
// are clean, the holds match the open withdrawals, every user's available
// plus held is what their deposits credited less what their confirmed
// withdrawals spent, and every event fits the published schema.
func (e *env) requireBooks(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	rep, err := ledger.Check(ctx, e.App.DB.Bun, withdrawal.CheckHolds)
	require.NoError(t, err)
	require.True(t, rep.LedgerConsistent, "ledger check: %+v", rep)
	r := e.AdminGet("/v1/admin/reconciliation")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var rec struct {
		LedgerConsistent bool     `json:"ledger_consistent"`
		Unbalanced       []string `json:"unbalanced_entries"`
		Drifts           []string `json:"materialized_vs_derived_drifts"`
	}
	r.JSON(t, &rec)
	require.True(t, rec.LedgerConsistent, string(r.Body))
	require.Empty(t, rec.Unbalanced)
	require.Empty(t, rec.Drifts)
	var rows []struct {
		User  string `bun:"external_user_id"`
		Asset string `bun:"asset"`
		Net   int64  `bun:"net"`
	}
	require.NoError(t, e.App.DB.Bun.NewRaw(`SELECT external_user_id, asset, sum(units)::bigint AS net FROM (
   SELECT d.external_user_id, d.asset, p.units FROM deposit_payments p JOIN deposits d ON d.id = p.deposit_id WHERE p.credited
   UNION ALL
   SELECT external_user_id, asset, -amount_gross FROM withdrawals WHERE status = 'confirmed') x GROUP BY 1, 2`).Scan(ctx, &rows))
	for _, row := range rows {
		var total int64
		require.NoError(t, e.App.DB.Bun.NewSelect().Table("ledger_accounts").ColumnExpr("coalesce(sum(balance), 0)").
			Where("owner = ? AND asset = ? AND kind IN ('user_available', 'user_hold')", row.User, row.Asset).Scan(ctx, &total))
		require.Equal(t, row.Net, total, "%s %s: available plus held", row.User, row.Asset)
	}
	eventtest.RequireAllValid(t, e.App.DB.Bun)
}

// helper posts to a test helper with the readwrite key.
func (e *env) helper(path string, body any) *apptest.Response {
	e.T.Helper()
	return e.Post("/v1/test_helpers/"+path, body)
}

// depositOf requires status and decodes the deposit.
func depositOf(t testing.TB, r *apptest.Response, status int) deposit.View {
	t.Helper()
	return apptest.Decode[deposit.View](t, r, status)
}

// withdrawalOf requires status and decodes the withdrawal.
func withdrawalOf(t testing.TB, r *apptest.Response, status int) withdrawal.View {
	t.Helper()
	return apptest.Decode[withdrawal.View](t, r, status)
}

// createDeposit creates a deposit through the API; expected is in
// smallest units ("" for none).
func (e *env) createDeposit(t testing.TB, user, code, expected string) deposit.View {
	t.Helper()
	body := map[string]any{"external_user_id": user, "asset": code}
	if expected != "" {
		body["expected_amount"] = expected
	}
	return depositOf(t, e.Post("/v1/deposits", body), http.StatusCreated)
}

// fund credits user through a deposit paid and confirmed by the helper.
func (e *env) fund(t testing.TB, user, code, units string) {
	t.Helper()
	d := e.createDeposit(t, user, code, units)
	v := depositOf(t, e.helper("deposits/"+d.DepositID+"/pay", map[string]any{"confirmed": true}), http.StatusOK)
	require.Equal(t, deposit.StatusSettled, v.Status)
}

// createWithdrawal requests a withdrawal through the API.
func (e *env) createWithdrawal(t testing.TB, user, code string, units, dest string) withdrawal.View {
	t.Helper()
	return withdrawalOf(t, e.Post("/v1/withdrawals", map[string]any{"external_user_id": user, "asset": code, "amount": units,
		"destination_address": dest}), http.StatusCreated)
}

// submitted waits for the worker to submit withdrawal id.
func (e *env) submitted(t testing.TB, id string) withdrawal.View {
	t.Helper()
	var v withdrawal.View
	apptest.Eventually(t, 20*time.Second, func() bool {
		v = withdrawalOf(t, e.Get("/v1/withdrawals/"+id), http.StatusOK)
		return v.Status == withdrawal.StatusSubmitted
	}, "the worker submits withdrawal "+id)
	return v
}

// submittedWithdrawal funds user with 0.01 BTC and has them withdraw
// 0.002 BTC, auto-approved, which it waits for the worker to submit.
func (e *env) submittedWithdrawal(t testing.TB, user string) withdrawal.View {
	t.Helper()
	e.fund(t, user, asset.BTC, "1000000")
	w := e.createWithdrawal(t, user, asset.BTC, "200000", btcAddress(t, user+"'s wallet"))
	require.Equal(t, withdrawal.StatusApproved, w.Status)
	return e.submitted(t, w.WithdrawalID)
}

// received waits for an event of typ about the resource whose data field
// key is id to reach the platform's receiver, and returns its data.
func (e *env) received(t testing.TB, typ, key, id string) map[string]any {
	t.Helper()
	var data map[string]any
	apptest.Eventually(t, 20*time.Second, func() bool {
		for _, ev := range e.Receiver.Events() {
			var m map[string]any
			if ev.Type == typ && json.Unmarshal(ev.Data, &m) == nil && m[key] == id {
				data = m
				return true
			}
		}
		return false
	}, "the receiver gets "+typ+" of "+id)
	return data
}

// webhooksProcessed waits until the simulator has delivered every webhook
// it queued, each answered 200, and the ingress has processed them all.
func (e *env) webhooksProcessed(t testing.TB) {
	t.Helper()
	apptest.Eventually(t, 20*time.Second, func() bool {
		if e.Sim.PendingWebhooks() > 0 || len(e.Sim.Deliveries()) == 0 {
			return false
		}
		for _, d := range e.Sim.Deliveries() {
			if d.Status != http.StatusOK {
				return false
			}
		}
		n, err := e.App.DB.Bun.NewSelect().Table("processor_webhooks").Where("processed_at IS NULL").Count(context.Background())
		return err == nil && n == 0
	}, "the processor's webhooks processed")
}

// detail decodes an error body's string detail.
func detail(t testing.TB, r *apptest.Response) string {
	t.Helper()
	var b struct {
		Detail string `json:"detail"`
	}
	r.JSON(t, &b)
	return b.Detail
}

func btcAddress(t testing.TB, seed string) string {
	t.Helper()
	return chaintest.P2WPKH(t, chain.Regtest, seed)
}

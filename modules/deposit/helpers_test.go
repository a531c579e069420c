package deposit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/deposit"
	"svc/modules/event/eventtest"
	"svc/modules/ledger"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/clock"
	"svc/platform/config"
	"svc/platform/money"
)

const hookSecret = "test-processor-webhook-secret"

// env is the service against a simulated processor, on a fake clock
// shared by both.
type env struct {
	*apptest.Env
	Sim   *btcpaysim.Sim
	Clock *clock.Fake
	Svc   *deposit.Service
}

type settings struct {
	simPool  []string // the simulator's USDT pool (default 20 addresses)
	ourPool  []string // USDT_POOL_ADDRESSES (default: the simulator's)
	webhooks bool     // deliver the simulator's webhooks to the service's ingress (starts the worker)
	worker   bool
	cfg      []func(*config.Config)
}

type option func(*settings)

func withPools(sim, ours []string) option {
	return func(s *settings) { s.simPool, s.ourPool = sim, ours }
}
func withWebhooks() option { return func(s *settings) { s.webhooks = true } }
func withWorker() option   { return func(s *settings) { s.worker = true } }
func withConfig(fn func(*config.Config)) option {
	return func(s *settings) { s.cfg = append(s.cfg, fn) }
}

func setup(t testing.TB, opts ...option) *env {
	t.Helper()
	var s settings
	for _, o := range opts {
		o(&s)
	}
	sim, fake := apptest.StartProcessor(t, btcpaysim.Options{TronPool: s.simPool,
		WebhookRetryDelays: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}})
	if s.ourPool == nil {
		s.ourPool = sim.TronPool()
	}
	aopts := []apptest.Option{apptest.WithClock(fake), apptest.WithProcessor(sim, hookSecret), apptest.WithConfig(func(c *config.Config) {
		c.Deposits.USDTPool = s.ourPool
		for _, fn := range s.cfg {
			fn(c)
		}
	})}
	if s.worker || s.webhooks {
		aopts = append(aopts, apptest.WithWorker())
	}
	e := &env{Env: apptest.New(t, aopts...), Sim: sim, Clock: fake}
	e.Svc = e.App.Deposits
	if s.webhooks {
		sim.SetWebhook(e.URL+"/webhooks/processor", hookSecret)
	}
	// Discovery turns these on from the store's payment methods; the tests
	// start with every method the simulator has.
	e.EnableAssets(asset.BTCLN, asset.USDTTRC20)
	apptest.CheckAtEnd(t, e.requireBooks)
	return e
}

// requireBooks is the money check every scenario ends with: the ledger is
// consistent, each user's available balance is exactly the sum of their
// credited deposit payments (through the API too), and every event fits
// the published schema.
func (e *env) requireBooks(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	rep, err := ledger.Check(ctx, e.App.DB.Bun)
	require.NoError(t, err)
	require.True(t, rep.LedgerConsistent, "ledger check: %+v", rep)

	type key struct{ user, asset string }
	var credited []struct {
		User  string `bun:"external_user_id"`
		Asset string `bun:"asset"`
		Sum   int64  `bun:"sum"`
	}
	require.NoError(t, e.App.DB.Bun.NewSelect().TableExpr("deposit_payments AS p").Join("JOIN deposits AS d ON d.id = p.deposit_id").
		ColumnExpr("d.external_user_id, d.asset, sum(p.units) AS sum").Where("p.credited AND d.platform_account IS NULL").
		GroupExpr("d.external_user_id, d.asset").Scan(ctx, &credited))
	want := map[key]int64{}
	for _, c := range credited {
		want[key{c.User, c.Asset}] = c.Sum
	}
	var accounts []struct {
		Owner   string `bun:"owner"`
		Asset   string `bun:"asset"`
		Balance int64  `bun:"balance"`
	}
	require.NoError(t, e.App.DB.Bun.NewSelect().Table("ledger_accounts").Column("owner", "asset", "balance").
		Where("kind = 'user_available' AND balance <> 0").Scan(ctx, &accounts))
	got := map[key]int64{}
	for _, a := range accounts {
		got[key{a.Owner, a.Asset}] = a.Balance
	}
	require.Equal(t, want, got, "available balances equal the credited payments")
	decimals := map[string]int{asset.BTC: 8, asset.BTCLN: 8, asset.USDTTRC20: 6}
	for k, units := range want {
		r := e.Get("/v1/users/" + url.PathEscape(k.user) + "/balances")
		require.Equal(t, http.StatusOK, r.Status)
		var b struct {
			Balances []struct {
				Asset, Available string
			} `json:"balances"`
		}
		r.JSON(t, &b)
		found := false
		for _, x := range b.Balances {
			if x.Asset == k.asset {
				found = true
				require.Equal(t, money.Format(units, decimals[k.asset]), x.Available, "%s %s", k.user, k.asset)
			}
		}
		require.True(t, found, "balance of %s in %s", k.user, k.asset)
	}
	// A platform account's balance is its credited deposits, through the
	// API too.
	var platform []struct {
		Name  string `bun:"platform_account"`
		Asset string `bun:"asset"`
		Sum   int64  `bun:"sum"`
	}
	require.NoError(t, e.App.DB.Bun.NewSelect().TableExpr("deposit_payments AS p").Join("JOIN deposits AS d ON d.id = p.deposit_id").
		ColumnExpr("d.platform_account, d.asset, sum(p.units) AS sum").Where("p.credited AND d.platform_account IS NOT NULL").
		GroupExpr("d.platform_account, d.asset").Scan(ctx, &platform))
	for _, p := range platform {
		r := e.Get("/v1/platform-accounts/" + url.PathEscape(p.Name) + "/balances")
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var b struct {
			Balances []struct {
				Asset, Available string
			} `json:"balances"`
		}
		r.JSON(t, &b)
		found := false
		for _, x := range b.Balances {
			if x.Asset == p.Asset {
				found = true
				require.Equal(t, money.Format(p.Sum, decimals[p.Asset]), x.Available, "platform account %s %s", p.Name, p.Asset)
			}
		}
		require.True(t, found, "balance of platform account %s in %s", p.Name, p.Asset)
	}
	eventtest.RequireAllValid(t, e.App.DB.Bun)
}

type createBody struct {
	ExternalUserID string  `json:"external_user_id"`
	Asset          string  `json:"asset"`
	ExpectedAmount *string `json:"expected_amount,omitempty"`
}

func units(s string) *string { return &s }

// create makes a deposit through the API and requires a 201.
func (e *env) create(t testing.TB, user, code string, expected *string) deposit.View {
	t.Helper()
	return viewOf(t, e.Post("/v1/deposits", createBody{ExternalUserID: user, Asset: code, ExpectedAmount: expected}), http.StatusCreated)
}

func (e *env) deposit(t testing.TB, id string) deposit.View {
	t.Helper()
	return viewOf(t, e.Get("/v1/deposits/"+id), http.StatusOK)
}

// viewOf requires an answer's status and decodes the deposit it carries.
func viewOf(t testing.TB, r *apptest.Response, status int) deposit.View {
	t.Helper()
	require.Equal(t, status, r.Status, string(r.Body))
	var v deposit.View
	r.JSON(t, &v)
	return v
}

// reconcile runs the same reconcile the poller and the webhooks run.
func (e *env) reconcile(t testing.TB, id string) deposit.View {
	t.Helper()
	require.NoError(t, e.Svc.Reconcile(context.Background(), uuid.MustParse(id)))
	return e.deposit(t, id)
}

// invoice is the simulator's invoice of a deposit.
func (e *env) invoice(t testing.TB, id string) btcpaysim.InvoiceInfo {
	t.Helper()
	inv, ok := e.Sim.InvoiceByOrderID(id)
	require.True(t, ok, "the processor has an invoice for deposit %s", id)
	return inv
}

// advance moves both clocks and lets the simulator apply expiries.
func (e *env) advance(d time.Duration) {
	e.Clock.Advance(d)
	e.Sim.Tick()
}

// events returns the payloads of the events of one type for a deposit.
func (e *env) events(t testing.TB, typ, depositID string) []map[string]any {
	t.Helper()
	var payloads []json.RawMessage
	require.NoError(t, e.App.DB.Bun.NewSelect().Table("outbound_events").Column("payload").
		Where("type = ? AND payload->'data'->>'deposit_id' = ?", typ, depositID).OrderExpr("created_at, id").
		Scan(context.Background(), &payloads))
	out := make([]map[string]any, 0, len(payloads))
	for _, p := range payloads {
		var m map[string]any
		require.NoError(t, json.Unmarshal(p, &m))
		out = append(out, m["data"].(map[string]any))
	}
	return out
}

// resolve posts a resolution with the admin key.
func (e *env) resolve(t testing.TB, id string, body any) *apptest.Response {
	t.Helper()
	return e.AdminPost("/v1/admin/deposits/"+id+"/resolve", body)
}

// ledgerEntries counts deposit_credit entries whose source_ref names the
// deposit.
func (e *env) ledgerEntries(t testing.TB, id string) int {
	t.Helper()
	n, err := e.App.DB.Bun.NewSelect().Table("ledger_entries").
		Where("kind = 'deposit_credit' AND source_ref LIKE ?", "deposit:"+id+":%").Count(context.Background())
	require.NoError(t, err)
	return int(n)
}

// pay has the simulator pay the invoice invoiceID and requires that it
// took the payment.
func (e *env) pay(t testing.TB, invoiceID string, p btcpaysim.PayParams) []btcpaysim.PaymentInfo {
	t.Helper()
	paid, err := e.Sim.Pay(invoiceID, p)
	require.NoError(t, err)
	return paid
}

// payDeposit pays the simulator's invoice of a deposit, as pay does.
func (e *env) payDeposit(t testing.TB, depositID string, p btcpaysim.PayParams) []btcpaysim.PaymentInfo {
	t.Helper()
	return e.pay(t, e.invoice(t, depositID).ID, p)
}

// reviewEvent returns the data of the deposit.review_required event of a
// deposit, and requires that there is exactly one.
func (e *env) reviewEvent(t testing.TB, depositID string) map[string]any {
	t.Helper()
	ev := e.events(t, "deposit.review_required", depositID)
	require.Len(t, ev, 1)
	return ev[0]
}

// adminList reads an admin list with the admin key, requires a 200, and
// returns the list the body holds under key, which must be a list (empty,
// never null or missing).
func adminList[T any](t testing.TB, e *env, path, key string) []T {
	t.Helper()
	r := e.AdminGet(path)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var body map[string]json.RawMessage
	r.JSON(t, &body)
	var list []T
	if raw, ok := body[key]; ok {
		require.NoError(t, json.Unmarshal(raw, &list))
	}
	require.NotNil(t, list)
	return list
}

// reconcileTo reconciles a deposit and requires the status it reads after.
func (e *env) reconcileTo(t testing.TB, id string, want deposit.Status, msgAndArgs ...any) deposit.View {
	t.Helper()
	v := e.reconcile(t, id)
	require.Equal(t, want, v.Status, msgAndArgs...)
	return v
}

// requireReviewReason requires the one deposit.review_required event of a
// deposit, with a review_reason that contains reason.
func (e *env) requireReviewReason(t testing.TB, depositID, reason string) {
	t.Helper()
	ev := e.reviewEvent(t, depositID)
	require.Contains(t, ev["review_reason"], reason)
}

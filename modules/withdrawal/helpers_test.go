package withdrawal_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/btcsuite/btcd/btcutil"
	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/apikey"
	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/event/eventtest"
	"svc/modules/ledger"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/modules/withdrawal"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
	"svc/platform/chain/chaintest"
	"svc/platform/clock"
	"svc/platform/config"
	"svc/platform/money"
)

const hookSecret = "test-processor-webhook-secret"

// env is the service against a simulated processor (which gives the BTC
// fee rate: 2 sat/vB by default, so the estimate is 282 sat), on a fake
// clock. Every scenario ends with the books checked.
type env struct {
	*apptest.Env
	Sim    *btcpaysim.Sim
	Clock  *clock.Fake
	Svc    *withdrawal.Service
	funded map[[2]string]int64 // (user, asset) -> credited in the test
	// platformFunded is, per (platform account, asset), what deposits
	// credited to platform accounts in the test.
	platformFunded map[[2]string]int64
	fundMu         sync.Mutex
}

func setup(t testing.TB, cfg ...func(*config.Config)) *env {
	t.Helper()
	return setupSim(t, btcpaysim.Options{}, cfg...)
}

// setupSim is setup with more of the simulator's options (its clock and
// tick are the env's).
func setupSim(t testing.TB, o btcpaysim.Options, cfg ...func(*config.Config)) *env {
	t.Helper()
	sim, fake := apptest.StartProcessor(t, o)
	e := &env{Sim: sim, Clock: fake, funded: map[[2]string]int64{}, platformFunded: map[[2]string]int64{}}
	e.Env = apptest.New(t, apptest.WithClock(fake), apptest.WithProcessor(sim, hookSecret), apptest.WithConfig(func(c *config.Config) {
		c.Deposits.USDTPool = sim.TronPool()
		for _, fn := range cfg {
			fn(c)
		}
	}))
	e.Svc = e.App.Withdrawals
	e.EnableAssets(asset.BTCLN, asset.USDTTRC20)
	apptest.CheckAtEnd(t, e.requireBooks)
	return e
}

// fund credits units to a user's available balance, as a settled deposit
// would.
func (e *env) fund(t testing.TB, user, code string, units int64) {
	t.Helper()
	_, err := ledger.CreditDeposit(context.Background(), e.App.DB.Bun, code, ledger.UserHolder(user), units,
		fmt.Sprintf("test-funding:%s:%s:%d:%d", user, code, units, len(e.funded)+int(time.Now().UnixNano()%1e9)), "test funding")

	require.NoError(t, err)
	e.funded[[2]string{user, code}] += units
}

// limits changes an asset's limits as an operator would.
func (e *env) limits(t testing.TB, code string, l asset.Limits) {
	t.Helper()
	_, err := e.App.Assets.SetLimits(context.Background(), code, l, audit.CLI("test"))
	require.NoError(t, err)
}

func n(v int64) *int64 { return &v }

// requireBooks: the ledger is consistent and its holds match the open
// withdrawals; every user's available plus held is what was funded less
// the gross of their confirmed withdrawals, and the API says the same;
// custody moved by exactly the net plus the network fee of every payout
// on chain; the processor has at most one payout per withdrawal, cancelled
// ones included; every event fits the published schema.
func (e *env) requireBooks(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	rep, err := ledger.Check(ctx, e.App.DB.Bun, withdrawal.CheckHolds)
	require.NoError(t, err)
	require.True(t, rep.LedgerConsistent, "ledger check: %+v", rep)
	funded := map[string]int64{}
	for k, units := range e.funded {
		user, code := k[0], k[1]
		funded[code] += units
		var open, spent int64
		require.NoError(t, e.App.DB.Bun.NewSelect().Table("withdrawals").
			ColumnExpr("coalesce(sum(amount_gross) FILTER (WHERE status NOT IN ('refunded', 'confirmed')), 0)").
			ColumnExpr("coalesce(sum(amount_gross) FILTER (WHERE status = 'confirmed'), 0)").
			Where("external_user_id = ? AND asset = ?", user, code).Scan(ctx, &open, &spent))
		b := e.UserBalance(t, user, code)
		dec := map[string]int{asset.BTC: 8, asset.BTCLN: 8, asset.USDTTRC20: 6}[code]
		require.Equal(t, money.Format(units-open-spent, dec), b.Available, "%s %s available", user, code)
		require.Equal(t, money.Format(open, dec), b.Held, "%s %s held", user, code)
	}
	for k, units := range e.platformFunded {
		name, code := k[0], k[1]
		funded[code] += units
		var open, spent int64
		require.NoError(t, e.App.DB.Bun.NewSelect().Table("withdrawals").
			ColumnExpr("coalesce(sum(amount_gross) FILTER (WHERE status NOT IN ('refunded', 'confirmed')), 0)").
			ColumnExpr("coalesce(sum(amount_gross) FILTER (WHERE status = 'confirmed'), 0)").
			Where("platform_account = ? AND asset = ?", name, code).Scan(ctx, &open, &spent))
		b := e.PlatformBalance(t, name, code)
		dec := map[string]int{asset.BTC: 8, asset.BTCLN: 8, asset.USDTTRC20: 6}[code]
		require.Equal(t, money.Format(units-open-spent, dec), b.Available, "platform account %s %s available", name, code)
		require.Equal(t, money.Format(open, dec), b.Held, "platform account %s %s held", name, code)
	}
	totals, err := ledger.AssetTotals(ctx, e.App.DB.Bun)
	require.NoError(t, err)
	for _, tot := range totals {
		// Confirmed: the net and the network fee the withdrawal records.
		// Broadcast, or failed after it: what its payout_broadcast put in
		// flight, until a release takes it back (refunded: nothing).
		var left, inFlight int64
		require.NoError(t, e.App.DB.Bun.NewSelect().Table("withdrawals").
			ColumnExpr("coalesce(sum(amount_net + coalesce(network_fee, 0)), 0)").
			Where("asset = ? AND status = 'confirmed'", tot.Asset).Scan(ctx, &left))
		require.NoError(t, e.App.DB.Bun.NewRaw(`SELECT coalesce(sum(p.amount), 0) FROM ledger_entries le
  JOIN ledger_postings p ON p.entry_id = le.id JOIN ledger_accounts a ON a.id = p.account_id AND a.kind = 'custody'
  JOIN withdrawals w ON w.id::text = le.source_ref
 WHERE le.kind = 'payout_broadcast' AND w.asset = ? AND w.status IN ('broadcast', 'failed')`, tot.Asset).Scan(ctx, &inFlight))
		left += inFlight
		require.Equal(t, funded[tot.Asset]-left, tot.Custody, "%s custody: funded %d, paid out %d", tot.Asset, funded[tot.Asset], left)
	}
	per := map[string]int{}
	all := e.Sim.Payouts()
	for _, p := range all {
		per[p.WithdrawalID]++
		require.Equal(t, 1, per[p.WithdrawalID], "withdrawal %s has more than one payout: %+v", p.WithdrawalID, all)
	}
	eventtest.RequireAllValid(t, e.App.DB.Bun)
}

type createBody struct {
	ExternalUserID string `json:"external_user_id"`
	Asset          string `json:"asset"`
	Amount         string `json:"amount"`
	Destination    string `json:"destination_address"`
}

// request posts a withdrawal.
func (e *env) request(user, code string, units int64, dest string) *apptest.Response {
	e.T.Helper()
	return e.Post("/v1/withdrawals", createBody{ExternalUserID: user, Asset: code, Amount: fmt.Sprint(units), Destination: dest})
}

// created is a decoded 201 body.
type created struct {
	withdrawal.View
	ApprovalReason *string `json:"approval_reason"`
	raw            map[string]any
}

func (e *env) create(t testing.TB, user, code string, units int64, dest string) created {
	t.Helper()
	r := e.request(user, code, units, dest)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var c created
	r.JSON(t, &c)
	c.raw = r.Map(t)
	return c
}

func (e *env) get(t testing.TB, id string) withdrawal.View {
	t.Helper()
	r := e.Get("/v1/withdrawals/" + id)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var v withdrawal.View
	r.JSON(t, &v)
	return v
}

// adminPage is one page of the admin list of withdrawals.
type adminPage struct {
	Withdrawals []map[string]any `json:"withdrawals"`
	NextCursor  *string          `json:"next_cursor"`
}

// adminPage reads one page of the admin list with the query given and
// requires a 200.
func (e *env) adminPage(t testing.TB, query string) adminPage {
	t.Helper()
	r := e.AdminGet("/v1/admin/withdrawals?" + query)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var page adminPage
	r.JSON(t, &page)
	return page
}

// admin reads a withdrawal's admin view through the admin list.
func (e *env) admin(t testing.TB, id string) map[string]any {
	t.Helper()
	cursor := ""
	for {
		page := e.adminPage(t, "limit=200"+cursor)
		for _, w := range page.Withdrawals {
			if w["withdrawal_id"] == id {
				return w
			}
		}
		if page.NextCursor == nil {
			t.Fatalf("withdrawal %s is not in the admin list", id)
		}
		cursor = "&cursor=" + *page.NextCursor
	}
}

// decide posts an operator decision with the admin key (or key).
func (e *env) decide(id, action string, body any, key ...string) *apptest.Response {
	e.T.Helper()
	k := e.Admin
	if len(key) > 0 {
		k = key[0]
	}
	return e.Do(apptest.Req{Method: http.MethodPost, Path: "/v1/admin/withdrawals/" + id + "/" + action, Body: body, Key: k})
}

// detail decodes an error body's string detail.
func detail(t testing.TB, r *apptest.Response) string {
	t.Helper()
	var b struct {
		Detail json.RawMessage `json:"detail"`
	}
	r.JSON(t, &b)
	var s string
	require.NoError(t, json.Unmarshal(b.Detail, &s), "detail is a string: %s", r.Body)
	return s
}

// Destinations. seed makes each call's value distinct.
func hash20(seed string) []byte { h := sha256.Sum256([]byte(seed)); return h[:20] }
func hash32(seed string) []byte { h := sha256.Sum256([]byte(seed)); return h[:] }

func p2wpkh(t testing.TB, n chain.Network, seed string) string { return chaintest.P2WPKH(t, n, seed) }

func p2tr(t testing.TB, n chain.Network, seed string) string {
	t.Helper()
	a, err := btcutil.NewAddressTaproot(hash32(seed), n.Params())
	require.NoError(t, err)
	return a.EncodeAddress()
}

func p2pkh(t testing.TB, n chain.Network, seed string) string {
	t.Helper()
	a, err := btcutil.NewAddressPubKeyHash(hash20(seed), n.Params())
	require.NoError(t, err)
	return a.EncodeAddress()
}

func p2sh(t testing.TB, n chain.Network, seed string) string {
	t.Helper()
	a, err := btcutil.NewAddressScriptHashFromHash(hash20(seed), n.Params())
	require.NoError(t, err)
	return a.EncodeAddress()
}

func tron(seed string) string { return chaintest.Tron(seed) }

// bolt11 mints a signed invoice on n created at created, with sats (0: no
// amount) and an expiry.
func bolt11(t testing.TB, n chain.Network, created time.Time, sats int64, expiry time.Duration) string {
	return chaintest.BOLT11(t, n, created, sats, expiry)
}

// auditRows returns the audit rows of a target, oldest first.
func (e *env) auditRows(t testing.TB, target string) []audit.Entry {
	t.Helper()
	var out []audit.Entry
	require.NoError(t, e.App.DB.Bun.NewSelect().Model(&out).Where("target = ?", target).Order("id").Scan(context.Background()))
	return out
}

// mintAdmin mints another admin key (a second operator).
func (e *env) mintAdmin(t testing.TB, label string) string {
	t.Helper()
	_, plain, err := e.App.Keys.Mint(context.Background(), mintParams(label))
	require.NoError(t, err)
	return plain
}

func mintParams(label string) apikey.MintParams {
	return apikey.MintParams{Scope: apikey.ScopeAdmin, Label: label, Actor: audit.CLI("test")}
}

// apptestReq is a readwrite POST /v1/withdrawals with a chosen key.
func apptestReq(body createBody, key string) apptest.Req {
	return apptest.Req{Method: http.MethodPost, Path: "/v1/withdrawals", Body: body, Idem: key}
}

// settle spends a withdrawal's hold as a confirmed payout would.
func settle(t testing.TB, e *env, id, user string, gross, net int64) {
	t.Helper()
	_, err := ledger.SettlePayout(context.Background(), e.App.DB.Bun, ledger.Settlement{Asset: asset.BTC, ExternalUserID: user,
		SourceRef: id, Mode: ledger.FeeDeduct, Gross: gross, Net: net, ServiceFee: gross - net, NetworkFee: 0})
	require.NoError(t, err)
}

// fundQuiet is fund, safe for concurrent use.
func (e *env) fundQuiet(t testing.TB, user, code string, units int64) {
	t.Helper()
	_, err := ledger.CreditDeposit(context.Background(), e.App.DB.Bun, code, ledger.UserHolder(user), units,
		fmt.Sprintf("test-funding:%s:%s:%d", user, code, units), "test funding")

	require.NoError(t, err)
	e.fundMu.Lock()
	e.funded[[2]string{user, code}] += units
	e.fundMu.Unlock()
}

// team enrolls operators through the enrollment chain (the first must be
// an admin), on the env's clock, and returns their signers by name.
func (e *env) team(t testing.TB, members ...operatortest.Member) map[string]*operator.Signer {
	t.Helper()
	return operatortest.Team(t, e.App.DB.Bun, e.Clock.Now, members...)
}

// adminView reads GET /v1/admin/withdrawals/{id}.
func (e *env) adminView(t testing.TB, id string) withdrawal.AdminView {
	t.Helper()
	r := e.AdminGet("/v1/admin/withdrawals/" + id)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var v withdrawal.AdminView
	r.JSON(t, &v)
	return v
}

// actions are the audit actions of the decisions' paths.
var actions = map[string]string{"approve": audit.WithdrawalApprove, "reject": audit.WithdrawalReject,
	"release": audit.WithdrawalRelease, "mark-broadcast": audit.WithdrawalMarkBroadcast}

// expect is what an operator signs to post decision (a path's last
// segment) with body on withdrawal id, as its admin view reads now.
func (e *env) expect(t testing.TB, id, decision string, body map[string]any) operator.Expect {
	t.Helper()
	var p withdrawal.DecideParams
	str := func(k string) *string {
		if v, ok := body[k].(string); ok {
			return &v
		}
		return nil
	}
	p.Note, p.Reason = str("note"), str("reason")
	if v := str("attestation"); v != nil {
		p.Attestation = *v
	}
	if v := str("txid"); v != nil {
		p.Txid = strings.TrimSpace(*v)
	}
	return withdrawal.DecisionExpect(actions[decision], e.adminView(t, id), p)
}

// signed is the Svc-Operator-Signature header of s signing x now.
func (e *env) signed(t testing.TB, s *operator.Signer, x operator.Expect) map[string]string {
	t.Helper()
	return operatortest.Header(t, s, x, e.Clock.Now())
}

// decideSigned posts a decision signed by s, over the withdrawal as it
// reads now, with the admin key (or key).
func (e *env) decideSigned(t testing.TB, s *operator.Signer, id, decision string, body map[string]any, key ...string) *apptest.Response {
	t.Helper()
	h := e.signed(t, s, e.expect(t, id, decision, body))
	if body == nil {
		return e.decideWith(id, decision, nil, h, key...)
	}
	return e.decideWith(id, decision, body, h, key...)
}

// decideWith posts a decision with the headers h and the admin key (or
// key).
func (e *env) decideWith(id, decision string, body any, h map[string]string, key ...string) *apptest.Response {
	e.T.Helper()
	k := e.Admin
	if len(key) > 0 {
		k = key[0]
	}
	return e.Do(apptest.Req{Method: http.MethodPost, Path: "/v1/admin/withdrawals/" + id + "/" + decision, Body: body, Key: k, Header: h})
}

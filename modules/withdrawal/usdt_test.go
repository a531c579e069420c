package withdrawal_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/withdrawal"
	"svc/platform/chain"
	"svc/platform/config"
	"svc/platform/tron/tronsim"
)

// usdtEnv is the service with a TRON node simulator and a hot wallet.
type usdtEnv struct {
	*env
	Node *tronsim.Sim
	Hot  chain.TronAddress
}

func setupUSDT(t *testing.T) *usdtEnv {
	t.Helper()
	node := tronsim.Start(t)
	hot, err := chain.ParseTronAddress(tron("hot wallet"))
	require.NoError(t, err)
	e := setup(t, func(c *config.Config) {
		c.Tron.URL, c.Tron.HotWallet = node.URL, hot.String()
	})
	return &usdtEnv{env: e, Node: node, Hot: hot}
}

// approvedUSDT creates and approves a USDT withdrawal of 25 USDT (net 23
// under the default 2 USDT flat fee) and returns it with its destination.
func (u *usdtEnv) approvedUSDT(t *testing.T, user string) (string, chain.TronAddress) {
	t.Helper()
	dest, err := chain.ParseTronAddress(tron("payee of " + user))
	require.NoError(t, err)
	w := u.create(t, user, asset.USDTTRC20, 25_000_000, dest.String())
	r := u.decide(w.WithdrawalID, "approve", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "23.000000", r.Map(t)["amount_to_send"])
	return w.WithdrawalID, dest
}

// broadcastUSDT funds user with 100 USDT, has a withdrawal of 25 USDT of
// theirs approved, and marks it broadcast with a 23 USDT transfer the node
// shows as successful; it returns the withdrawal, its destination and the
// transfer's txid.
func (u *usdtEnv) broadcastUSDT(t *testing.T, user string) (string, chain.TronAddress, string) {
	t.Helper()
	u.fund(t, user, asset.USDTTRC20, 100_000_000)
	id, dest := u.approvedUSDT(t, user)
	txid := u.Node.AddUSDTTransfer("", u.Hot, dest, 23_000_000, true)
	require.Equal(t, http.StatusOK, u.markBroadcast(id, txid).Status)
	return id, dest, txid
}

func (u *usdtEnv) markBroadcast(id, txid string) *apptest.Response {
	u.T.Helper()
	return u.decide(id, "mark-broadcast", map[string]any{"txid": txid})
}

// TestMarkBroadcastAndConfirm: the operator's transfer is verified on
// chain, the withdrawal becomes broadcast with the txid (ledger:
// custody to in-flight), and once its block is solidified the worker's
// pass confirms it: the hold is spent, custody lost exactly the net, the
// fee became income, and the platform got withdrawal.broadcast and
// withdrawal.completed.
func TestMarkBroadcastAndConfirm(t *testing.T) {
	t.Parallel()
	u := setupUSDT(t)
	u.fund(t, "ua", asset.USDTTRC20, 100_000_000)
	id, dest := u.approvedUSDT(t, "ua")
	txid := u.Node.AddUSDTTransfer("", u.Hot, dest, 23_000_000, true)

	r := u.markBroadcast(id, txid)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	m := r.Map(t)
	require.Equal(t, "broadcast", m["status"])
	require.Equal(t, txid, m["txid"])
	require.Equal(t, "2.000000", m["fee"])
	require.Equal(t, "23.000000", m["amount_net"])
	rows := u.auditRows(t, id)
	require.Equal(t, audit.WithdrawalMarkBroadcast, rows[len(rows)-1].Action)
	require.Equal(t, "25.000000", u.UserBalance(t, "ua", asset.USDTTRC20).Held, "held until confirmed")

	// Not solidified yet: nothing happens.
	n, err := u.Svc.ConfirmUSDT(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
	u.Node.MineBlocks(20)
	n, err = u.Svc.ConfirmUSDT(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	v := u.get(t, id)
	require.Equal(t, withdrawal.StatusConfirmed, v.Status)
	b := u.UserBalance(t, "ua", asset.USDTTRC20)
	require.Equal(t, "0.000000", b.Held)
	require.Equal(t, "75.000000", b.Available)

	var sums []struct {
		Kind string `bun:"kind"`
		Sum  int64  `bun:"sum"`
	}
	require.NoError(t, u.App.DB.Bun.NewRaw(`SELECT a.kind, sum(p.amount) AS sum FROM ledger_postings p
  JOIN ledger_accounts a ON a.id = p.account_id WHERE a.asset = 'USDT_TRC20' AND a.owner = '' GROUP BY a.kind ORDER BY 1`).
		Scan(context.Background(), &sums))
	got := map[string]int64{}
	for _, s := range sums {
		got[s.Kind] = s.Sum
	}
	// custody: -100 credited +23 paid out; fee income +2; in-flight cleared.
	require.Equal(t, map[string]int64{"custody": -100_000_000 + 23_000_000, "fee_income": 2_000_000, "in_flight": 0}, got)
	require.Len(t, u.payoutEvents(t, "withdrawal.broadcast", id), 1)
	require.Len(t, u.payoutEvents(t, "withdrawal.completed", id), 1)
	// Confirming again changes nothing.
	n, err = u.Svc.ConfirmUSDT(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
	// A confirmed withdrawal cannot be released.
	r = u.decide(id, "release", map[string]any{"attestation": "the transfer never happened at all"})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
}

func (u *usdtEnv) payoutEvents(t *testing.T, typ, id string) []string {
	t.Helper()
	var ids []string
	require.NoError(t, u.App.DB.Bun.NewSelect().Table("outbound_events").Column("id").
		Where("type = ? AND payload->'data'->>'withdrawal_id' = ?", typ, id).Scan(context.Background(), &ids))
	return ids
}

// TestMarkBroadcastMismatches: each field the server checks refuses a
// transfer that does not pay the withdrawal, with a 422 naming it, and
// changes nothing.
func TestMarkBroadcastMismatches(t *testing.T) {
	t.Parallel()
	u := setupUSDT(t)
	u.fund(t, "ub", asset.USDTTRC20, 100_000_000)
	id, dest := u.approvedUSDT(t, "ub")
	other, err := chain.ParseTronAddress(tron("someone else"))
	require.NoError(t, err)
	otherToken, err := chain.ParseTronAddress(tron("another token"))
	require.NoError(t, err)
	for _, tc := range []struct {
		name, txid, want string
	}{
		{"unknown", strings.Repeat("ab", 32), "txid: transaction"},
		{"another token", u.Node.AddTx(tronsim.Tx{Owner: u.Hot, Contract: otherToken, Logs: []tronsim.Log{{Contract: otherToken, From: u.Hot, To: dest, Amount: 23_000_000}}}), "contract:"},
		{"another sender", u.Node.AddUSDTTransfer("", other, dest, 23_000_000, true), "sender:"},
		{"another recipient", u.Node.AddUSDTTransfer("", u.Hot, other, 23_000_000, true), "recipient:"},
		{"the gross", u.Node.AddUSDTTransfer("", u.Hot, dest, 25_000_000, true), "amount: the Transfer moved 25.000000 USDT_TRC20, not the net 23.000000"},
		{"reverted", u.Node.AddUSDTTransfer("", u.Hot, dest, 23_000_000, false), "receipt:"},
		{"pending", u.Node.AddTx(tronsim.Tx{Owner: u.Hot, Logs: []tronsim.Log{{From: u.Hot, To: dest, Amount: 23_000_000}}, Pending: true}), "not in a block yet"},
		{"two transfers", u.Node.AddTx(tronsim.Tx{Owner: u.Hot, Logs: []tronsim.Log{{From: u.Hot, To: dest, Amount: 23_000_000}, {From: u.Hot, To: dest, Amount: 1}}}), "transfer:"},
	} {
		r := u.markBroadcast(id, tc.txid)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", tc.name, r.Body)
		require.Contains(t, detail(t, r), tc.want, tc.name)
	}
	require.Equal(t, withdrawal.StatusApproved, u.get(t, id).Status)
	for _, body := range []any{nil, map[string]any{}, map[string]any{"txid": "short"}, map[string]any{"txid": strings.Repeat("a", 129)}} {
		r := u.decide(id, "mark-broadcast", body)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%v: %s", body, r.Body)
		r.FieldErrors(t)
	}
}

// TestMarkBroadcastRules: only an approved USDT withdrawal (409
// otherwise); a txid already used for another withdrawal is 422;
// concurrent reports of one transfer: one wins; the TRON node down is 503.
func TestMarkBroadcastRules(t *testing.T) {
	t.Parallel()
	u := setupUSDT(t)
	u.fund(t, "uc", asset.USDTTRC20, 100_000_000)
	u.fund(t, "uc", asset.BTC, 10_000_000)
	btc := u.create(t, "uc", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, "uc"))
	r := u.markBroadcast(btc.WithdrawalID, strings.Repeat("cd", 32))
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	pending := u.create(t, "uc", asset.USDTTRC20, 25_000_000, tron("pending payee"))
	r = u.markBroadcast(pending.WithdrawalID, strings.Repeat("cd", 32))
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "only an approved USDT_TRC20 withdrawal")

	id1, dest1 := u.approvedUSDT(t, "uc")
	txid := u.Node.AddUSDTTransfer("", u.Hot, dest1, 23_000_000, true)
	var wg sync.WaitGroup
	codes := make([]int, 6)
	for i := range codes {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			codes[i] = u.markBroadcast(id1, txid).Status
		}(i)
	}
	wg.Wait()
	ok := 0
	for _, c := range codes {
		if c == http.StatusOK {
			ok++
		} else {
			require.Equal(t, http.StatusConflict, c)
		}
	}
	require.Equal(t, 1, ok)
	// Another withdrawal to the same payee with the same amount cannot
	// claim the same transfer.
	id2, _ := u.approvedUSDTTo(t, "uc", dest1)
	r = u.markBroadcast(id2, txid)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "already reported for withdrawal "+id1)

	// The node's answers fail: 503, retry with the same key.
	u.Node.SetMode(tronsim.Errors)
	r = u.markBroadcast(id2, strings.Repeat("ef", 32))
	require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
	u.Node.SetMode(tronsim.Up)
	// Leave the books whole: the first one is still broadcast and held.
}

func (u *usdtEnv) approvedUSDTTo(t *testing.T, user string, dest chain.TronAddress) (string, chain.TronAddress) {
	t.Helper()
	w := u.create(t, user, asset.USDTTRC20, 25_000_000, dest.String())
	require.Equal(t, http.StatusOK, u.decide(w.WithdrawalID, "approve", nil).Status)
	return w.WithdrawalID, dest
}

// TestUSDTTransferThatDisappears: a reported transfer the node no longer
// shows as successful stays broadcast and held; once the node has missed
// it on consecutive checks over ten minutes, one operator alert; the
// operator can release it with an attestation.
func TestUSDTTransferThatDisappears(t *testing.T) {
	t.Parallel()
	u := setupUSDT(t)
	id, _, txid := u.broadcastUSDT(t, "ud")
	u.Node.Forget(txid)
	// Missed on consecutive checks a minute apart: the alert once the
	// misses span ten minutes, not before.
	for i := 0; i <= 10; i++ {
		if i > 0 {
			u.Clock.Advance(time.Minute)
		}
		n, err := u.Svc.ConfirmUSDT(context.Background())
		require.NoError(t, err)
		require.Zero(t, n)
		want := 0
		if i == 10 {
			want = 1
		}
		require.Len(t, u.alerts(t, withdrawal.AlertUSDTTransferMissing, id), want, "after %d minutes", i)
	}
	n, err := u.Svc.ConfirmUSDT(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
	require.Len(t, u.alerts(t, withdrawal.AlertUSDTTransferMissing, id), 1)
	require.Equal(t, withdrawal.StatusBroadcast, u.get(t, id).Status)
	r := u.decide(id, "release", map[string]any{"attestation": "the transfer was dropped from the chain; nothing left the hot wallet"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "0.000000", u.UserBalance(t, "ud", asset.USDTTRC20).Held)
	// What the broadcast put in flight is back in custody.
	var inFlight, custody int64
	require.NoError(t, u.App.DB.Bun.NewRaw(`SELECT
  coalesce(sum(p.amount) FILTER (WHERE a.kind = 'in_flight'), 0), coalesce(sum(p.amount) FILTER (WHERE a.kind = 'custody'), 0)
  FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id WHERE a.asset = 'USDT_TRC20' AND a.owner = ''`).
		Scan(context.Background(), &inFlight, &custody))
	require.Zero(t, inFlight)
	require.EqualValues(t, -100_000_000, custody)
}

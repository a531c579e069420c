package withdrawal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/modules/ledger"
	"svc/modules/operator"
	"svc/modules/operator/operatortest"
	"svc/modules/withdrawal"
	"svc/platform/chain"
	"svc/platform/randtest"
)

var withdrawalFlags = randtest.NewFlags("withdrawal", 150,
	"steps of TestRandomWithdrawals (more: go test ./modules/withdrawal -run TestRandomWithdrawals -withdrawal.ops=2000)", "TestRandomWithdrawals")

// TestRandomWithdrawals interleaves funding, withdrawal requests (some
// in parallel bursts), signed approvals by two operators under four-eyes,
// rejections, releases, USDT transfers reported and confirmed, and the
// clock moving across the 24-hour window, and checks after every step:
// the ledger check with holds against open withdrawals, every user's
// available plus held plus paid out equal to what they were funded, and
// each asset's rolling volume equal to the withdrawals of the window whose
// money was not returned.
func TestRandomWithdrawals(t *testing.T) {
	rng := seededRand(t, withdrawalFlags, 0x9e3779b97f4a7c15)
	u := setupUSDT(t)
	ctx := context.Background()
	second := u.mintAdmin(t, "second operator")
	keys := []string{u.Admin, second}
	ops := u.team(t, operatortest.Member{Name: "alice", Role: operator.Admin}, operatortest.Member{Name: "bob", Role: operator.Approver})
	signers := []*operator.Signer{ops["alice"], ops["bob"]}
	u.limits(t, asset.BTC, asset.Limits{Min: n(1_000), AutoLimit: n(60_000), DailyCap: n(300_000),
		UserDailyCap: &asset.Optional{Value: 200_000}, FourEyesThreshold: &asset.Optional{Value: 100_000}})
	users := []string{"r0", "r1", "r2", "r3"}
	paid := map[[2]string]int64{}
	var mu sync.Mutex
	dests := map[string]chain.TronAddress{}

	// create sends one request; r1 and r2 are drawn by the caller (the
	// generator is not safe for the burst's goroutines).
	create := func(user, code string, r1, r2 int) {
		amount := int64(1_000 + r1%150_000)
		dest := p2wpkh(t, chain.Regtest, fmt.Sprint("rnd", r2))
		if code == asset.USDTTRC20 {
			amount = int64(10_000_000 + r1%30_000_000)
			a, err := chain.ParseTronAddress(tron(fmt.Sprint("rnd", r2)))
			require.NoError(t, err)
			dest = a.String()
		}
		r := u.request(user, code, amount, dest)
		require.Contains(t, []int{http.StatusCreated, http.StatusPaymentRequired, http.StatusUnprocessableEntity}, r.Status, string(r.Body))
		if r.Status == http.StatusCreated && code == asset.USDTTRC20 {
			var v withdrawal.View
			r.JSON(t, &v)
			a, err := chain.ParseTronAddress(v.DestinationAddress)
			require.NoError(t, err)
			mu.Lock()
			dests[v.WithdrawalID] = a
			mu.Unlock()
		}
	}
	pick := func(status withdrawal.Status) (withdrawal.Withdrawal, bool) {
		var ws []withdrawal.Withdrawal
		require.NoError(t, u.App.DB.Bun.NewSelect().Model(&ws).Where("status = ?", status).Scan(ctx))
		if len(ws) == 0 {
			return withdrawal.Withdrawal{}, false
		}
		return ws[rng.IntN(len(ws))], true
	}
	for step := 0; step < withdrawalFlags.Ops(); step++ {
		user := users[rng.IntN(len(users))]
		code := []string{asset.BTC, asset.BTC, asset.USDTTRC20}[rng.IntN(3)]
		switch op := rng.IntN(100); {
		case op < 15:
			units := int64(50_000 + rng.IntN(200_000))
			if code == asset.USDTTRC20 {
				units = int64(20_000_000 + rng.IntN(50_000_000))
			}
			u.fund(t, user, code, units)
		case op < 40:
			create(user, code, rng.IntN(1<<30), rng.IntN(1000))
		case op < 48: // a parallel burst
			var wg sync.WaitGroup
			for i := 0; i < 6; i++ {
				wg.Add(1)
				bu, bc := users[rng.IntN(len(users))], []string{asset.BTC, asset.USDTTRC20}[rng.IntN(2)]
				r1, r2 := rng.IntN(1<<30), rng.IntN(1000)
				go func() { defer wg.Done(); create(bu, bc, r1, r2) }()
			}
			wg.Wait()
		case op < 62:
			if w, ok := pick(withdrawal.StatusPendingApproval); ok {
				// Four-eyes counts operators: each approval is signed by
				// one of two, through either admin key; the same operator
				// twice is 409.
				r := u.decideSigned(t, signers[rng.IntN(2)], w.ID.String(), "approve", nil, keys[rng.IntN(2)])
				require.Contains(t, []int{http.StatusOK, http.StatusConflict}, r.Status, string(r.Body))
			}
		case op < 70:
			if w, ok := pick(withdrawal.StatusPendingApproval); ok {
				require.Equal(t, http.StatusOK, u.decide(w.ID.String(), "reject", nil, keys[rng.IntN(2)]).Status)
			}
		case op < 76:
			st := []withdrawal.Status{withdrawal.StatusApproved, withdrawal.StatusBroadcast}[rng.IntN(2)]
			if w, ok := pick(st); ok {
				r := u.decide(w.ID.String(), "release", map[string]any{"attestation": "random test: checked, nothing was sent"})
				require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			}
		case op < 88:
			var ws []withdrawal.Withdrawal
			require.NoError(t, u.App.DB.Bun.NewSelect().Model(&ws).Where("status = 'approved' AND asset = 'USDT_TRC20'").Scan(ctx))
			if len(ws) > 0 {
				w := ws[rng.IntN(len(ws))]
				txid := u.Node.AddUSDTTransfer("", u.Hot, dests[w.ID.String()], *w.AmountNet, true)
				r := u.markBroadcast(w.ID.String(), txid)
				require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			}
		case op < 94:
			u.Node.MineBlocks(rng.IntN(30))
			_, err := u.Svc.ConfirmUSDT(ctx)
			require.NoError(t, err)
		default:
			u.Clock.Advance(time.Duration(rng.IntN(8*60)) * time.Minute)
		}
		// What left for good: the gross of confirmed withdrawals.
		var conf []struct {
			User  string `bun:"external_user_id"`
			Asset string `bun:"asset"`
			Sum   int64  `bun:"sum"`
		}
		require.NoError(t, u.App.DB.Bun.NewRaw(`SELECT external_user_id, asset, sum(amount_gross) AS sum FROM withdrawals
 WHERE status = 'confirmed' GROUP BY 1, 2`).Scan(ctx, &conf))
		for k := range paid {
			delete(paid, k)
		}
		for _, c := range conf {
			paid[[2]string{c.User, c.Asset}] = c.Sum
		}
		u.requireStep(t, step, paid)
	}
	var counts []struct {
		Status string `bun:"status"`
		N      int    `bun:"n"`
	}
	require.NoError(t, u.App.DB.Bun.NewRaw(`SELECT status, count(*) AS n FROM withdrawals GROUP BY 1 ORDER BY 1`).Scan(ctx, &counts))
	t.Logf("withdrawals by status at the end: %v", counts)
}

// requireStep checks the invariants of TestRandomWithdrawals.
func (u *usdtEnv) requireStep(t *testing.T, step int, paid map[[2]string]int64) {
	t.Helper()
	ctx := context.Background()
	rep, err := ledger.Check(ctx, u.App.DB.Bun, withdrawal.CheckHolds)
	require.NoError(t, err)
	require.True(t, rep.LedgerConsistent, "step %d: %s", step, mustJSON(rep))
	var bal []struct {
		Owner string `bun:"owner"`
		Asset string `bun:"asset"`
		Sum   int64  `bun:"sum"`
	}
	require.NoError(t, u.App.DB.Bun.NewRaw(`SELECT owner, asset, sum(balance) AS sum FROM ledger_accounts
 WHERE kind IN ('user_available', 'user_hold') GROUP BY 1, 2`).Scan(ctx, &bal))
	got := map[[2]string]int64{}
	for _, b := range bal {
		got[[2]string{b.Owner, b.Asset}] = b.Sum
	}
	for k, funded := range u.funded {
		require.Equal(t, funded-paid[k], got[k], "step %d: %s %s: available + held = funded - paid out", step, k[0], k[1])
	}
	now := u.Clock.Now()
	for _, code := range []string{asset.BTC, asset.USDTTRC20} {
		var lo int64
		require.NoError(t, u.App.DB.Bun.NewRaw(`SELECT coalesce(sum(amount_gross), 0)
  FROM withdrawals WHERE asset = ? AND status <> 'refunded' AND created_at > ?`, code, now.Add(-24*time.Hour)).
			Scan(ctx, &lo))
		total := u.windowTotal(t, code)
		// The total is exact as of the last reservation; buckets leave it
		// at the next one, so it may still hold some older than 24 hours.
		require.GreaterOrEqual(t, total, lo, "step %d: %s volume covers every counted withdrawal of the last 24 hours", step, code)
		var all int64
		require.NoError(t, u.App.DB.Bun.NewRaw(`SELECT coalesce(sum(amount_gross), 0) FROM withdrawals WHERE asset = ? AND status <> 'refunded'`, code).
			Scan(ctx, &all))
		require.LessOrEqual(t, total, all, "step %d: %s volume counts nothing that was returned", step, code)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

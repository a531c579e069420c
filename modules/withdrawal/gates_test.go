package withdrawal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/modules/withdrawal"
	"svc/platform/chain"
)

// pendingEvents returns the data of the withdrawal.pending_approval events
// of a withdrawal.
func (e *env) pendingEvents(t testing.TB, id string) []map[string]any {
	t.Helper()
	var raw []json.RawMessage
	require.NoError(t, e.App.DB.Bun.NewSelect().Table("outbound_events").ColumnExpr("payload->'data'").
		Where("type = 'withdrawal.pending_approval' AND payload->'data'->>'withdrawal_id' = ?", id).
		Scan(context.Background(), &raw))
	out := make([]map[string]any, 0, len(raw))
	for _, r := range raw {
		var m map[string]any
		require.NoError(t, json.Unmarshal(r, &m))
		out = append(out, m)
	}
	return out
}

// autoApprovedInParallel sends n withdrawal requests of units at once, the
// i-th for user(i), and returns how many were auto-approved; any answer
// but a 201, approved or pending, fails the test.
func (e *env) autoApprovedInParallel(t *testing.T, n int, units int64, user func(i int) string) int {
	t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		auto int
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := e.request(user(i), asset.BTC, units, p2wpkh(t, chain.Regtest, fmt.Sprint(user(i), "-", i)))
			if r.Status != http.StatusCreated {
				t.Errorf("request %d: %d %s", i, r.Status, r.Body)
				return
			}
			var v withdrawal.View
			r.JSON(t, &v)
			mu.Lock()
			defer mu.Unlock()
			switch v.Status {
			case withdrawal.StatusApproved:
				auto++
			case withdrawal.StatusPendingApproval:
			default:
				t.Errorf("request %d: status %s", i, v.Status)
			}
		}(i)
	}
	wg.Wait()
	return auto
}

// TestGateAutoLimit: a gross above withdrawal_auto_limit waits for an
// operator with approval_reason naming the limit and one
// withdrawal.pending_approval event; at the limit it is auto.
func TestGateAutoLimit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTC, 10_000_000)
	e.limits(t, asset.BTC, asset.Limits{AutoLimit: n(50_000)})
	w := e.create(t, "u", asset.BTC, 50_000, p2wpkh(t, chain.Regtest, "a"))
	require.Equal(t, withdrawal.StatusApproved, w.Status)
	require.Empty(t, e.pendingEvents(t, w.WithdrawalID))
	w = e.create(t, "u", asset.BTC, 50_001, p2wpkh(t, chain.Regtest, "b"))
	require.Equal(t, withdrawal.StatusPendingApproval, w.Status)
	require.Nil(t, w.ApprovalMode)
	require.NotNil(t, w.ApprovalReason)
	require.True(t, strings.HasPrefix(*w.ApprovalReason, "withdrawal_auto_limit:"), *w.ApprovalReason)
	require.NotContains(t, *w.ApprovalReason, "daily_cap")
	ev := e.pendingEvents(t, w.WithdrawalID)
	require.Len(t, ev, 1)
	require.Equal(t, *w.ApprovalReason, ev[0]["approval_reason"])
	require.Equal(t, "0.00050001", ev[0]["amount_gross"])
	require.Equal(t, "pending_approval", ev[0]["status"])
}

// TestGateDailyCap: once the asset's rolling 24-hour total would pass
// withdrawal_daily_cap, every withdrawal waits, small ones included, and
// pending ones count; rejected ones stop counting; after 24 hours (and at
// most a minute) the volume has left the window.
func TestGateDailyCap(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTC, 10_000_000)
	e.fund(t, "v", asset.BTC, 10_000_000)
	e.limits(t, asset.BTC, asset.Limits{Min: n(1_000), AutoLimit: n(1_000_000), DailyCap: n(100_000)})
	a := e.create(t, "u", asset.BTC, 60_000, p2wpkh(t, chain.Regtest, "a"))
	require.Equal(t, withdrawal.StatusApproved, a.Status)
	b := e.create(t, "v", asset.BTC, 40_000, p2wpkh(t, chain.Regtest, "b"))
	require.Equal(t, withdrawal.StatusApproved, b.Status, "exactly at the cap is still auto")
	c := e.create(t, "u", asset.BTC, 1_000, p2wpkh(t, chain.Regtest, "c"))
	require.Equal(t, withdrawal.StatusPendingApproval, c.Status)
	require.True(t, strings.HasPrefix(*c.ApprovalReason, "withdrawal_daily_cap:"), *c.ApprovalReason)
	require.Contains(t, *c.ApprovalReason, "would be 0.00101000")
	require.Len(t, e.pendingEvents(t, c.WithdrawalID), 1)

	// Rejecting the pending one gives its place back, but the others still
	// fill the cap.
	r := e.decide(c.WithdrawalID, "reject", map[string]any{})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	d := e.create(t, "u", asset.BTC, 1_000, p2wpkh(t, chain.Regtest, "d"))
	require.Equal(t, withdrawal.StatusPendingApproval, d.Status)
	require.Contains(t, *d.ApprovalReason, "would be 0.00101000")

	// 23h59m later everything still counts; 24h01m later it has left.
	e.Clock.Advance(23*time.Hour + 59*time.Minute)
	x := e.create(t, "v", asset.BTC, 1_000, p2wpkh(t, chain.Regtest, "x"))
	require.Equal(t, withdrawal.StatusPendingApproval, x.Status)
	e.Clock.Advance(2*time.Minute + time.Second)
	y := e.create(t, "v", asset.BTC, 1_000, p2wpkh(t, chain.Regtest, "y"))
	require.Equal(t, withdrawal.StatusApproved, y.Status, "the day-old volume left the window; x (1000) and y (1000) remain")
}

// TestGateUserCap: the optional per-user rolling 24-hour cap sends only
// that user's withdrawals to an operator; unset, it is off.
func TestGateUserCap(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTC, 10_000_000)
	e.fund(t, "v", asset.BTC, 10_000_000)
	e.limits(t, asset.BTC, asset.Limits{AutoLimit: n(1_000_000), DailyCap: n(100_000_000)})
	for i := 0; i < 3; i++ {
		require.Equal(t, withdrawal.StatusApproved, e.create(t, "u", asset.BTC, 100_000, p2wpkh(t, chain.Regtest, fmt.Sprint("off", i))).Status)
	}
	e.limits(t, asset.BTC, asset.Limits{UserDailyCap: &asset.Optional{Value: 350_000}})
	w := e.create(t, "u", asset.BTC, 50_000, p2wpkh(t, chain.Regtest, "u-ok"))
	require.Equal(t, withdrawal.StatusApproved, w.Status, "300000 + 50000 is at the cap")
	w = e.create(t, "u", asset.BTC, 10_000, p2wpkh(t, chain.Regtest, "u-over"))
	require.Equal(t, withdrawal.StatusPendingApproval, w.Status)
	require.True(t, strings.HasPrefix(*w.ApprovalReason, "withdrawal_user_daily_cap:"), *w.ApprovalReason)
	require.Equal(t, withdrawal.StatusApproved, e.create(t, "v", asset.BTC, 300_000, p2wpkh(t, chain.Regtest, "v")).Status)
	r := e.Get("/v1/assets")
	require.Contains(t, string(r.Body), `"withdrawal_user_daily_cap":"0.00350000"`)
	e.limits(t, asset.BTC, asset.Limits{UserDailyCap: &asset.Optional{Off: true}})
	require.Equal(t, withdrawal.StatusApproved, e.create(t, "u", asset.BTC, 10_000, p2wpkh(t, chain.Regtest, "u-off")).Status)
}

// TestGateUSDTAlwaysManual: USDT_TRC20 never auto-approves, whatever the
// limits.
func TestGateUSDTAlwaysManual(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.USDTTRC20, 100_000_000)
	w := e.create(t, "u", asset.USDTTRC20, 20_000_000, tron("usdt"))
	require.Equal(t, withdrawal.StatusPendingApproval, w.Status)
	require.Equal(t, "USDT_TRC20: every USDT_TRC20 withdrawal is sent by an operator", *w.ApprovalReason)
	require.Len(t, e.pendingEvents(t, w.WithdrawalID), 1)
}

// TestGatesStrictUnderConcurrency: 50 parallel requests from 50 users that
// together cross the daily cap never auto-approve more than the cap
// allows, and every one is either approved or pending.
func TestGatesStrictUnderConcurrency(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const each, capUnits, parallel = 20_000, 333_000, 50 // room for 16 of the 50
	e.limits(t, asset.BTC, asset.Limits{AutoLimit: n(1_000_000), DailyCap: n(capUnits)})
	for i := 0; i < parallel; i++ {
		e.fund(t, fmt.Sprint("user-", i), asset.BTC, 100_000)
	}
	auto := e.autoApprovedInParallel(t, parallel, each, func(i int) string { return fmt.Sprint("user-", i) })
	require.Equal(t, capUnits/each, auto, "exactly as many as fit under the cap are auto-approved")
}

// TestGatesUserCapStrictUnderConcurrency: one user's parallel requests
// cannot together slip past the per-user cap.
func TestGatesUserCapStrictUnderConcurrency(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.limits(t, asset.BTC, asset.Limits{AutoLimit: n(1_000_000), DailyCap: n(1_000_000_000), UserDailyCap: &asset.Optional{Value: 100_000}})
	e.fund(t, "one", asset.BTC, 10_000_000)
	auto := e.autoApprovedInParallel(t, 30, 20_000, func(int) string { return "one" })
	require.Equal(t, 5, auto)
}

// TestParallelWithdrawalsNeverOverdraw: N parallel withdrawals over one
// balance hold at most the balance; the rest are 402 and hold nothing.
func TestParallelWithdrawalsNeverOverdraw(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.limits(t, asset.BTC, asset.Limits{AutoLimit: n(1_000_000), DailyCap: n(1_000_000_000)})
	e.fund(t, "shared", asset.BTC, 100_000)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := e.request("shared", asset.BTC, 30_000, p2wpkh(t, chain.Regtest, fmt.Sprint("s", i)))
			mu.Lock()
			defer mu.Unlock()
			codes[r.Status]++
		}(i)
	}
	wg.Wait()
	require.Equal(t, map[int]int{http.StatusCreated: 3, http.StatusPaymentRequired: 37}, codes)
	b := e.UserBalance(t, "shared", asset.BTC)
	require.Equal(t, "0.00010000", b.Available)
	require.Equal(t, "0.00090000", b.Held)
}

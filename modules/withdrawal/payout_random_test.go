package withdrawal_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/modules/withdrawal"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
	"svc/platform/randtest"
)

var payoutFlags = randtest.NewFlags("payout", 150, "steps of TestRandomPayouts", "TestRandomPayouts")

// TestRandomPayouts interleaves deposits, BTC and Lightning withdrawals
// (a few destinations shared, so the processor's duplicate-destination
// comes up), approvals and rejections, payout passes, everything the
// processor can do to a payout (send, confirm, bounce, stall, cancel,
// confirm after cancelling), processor outages (including a create that
// takes effect with its answer lost), workers killed after the processor
// call, releases and the clock moving, and after every step checks the
// books (requireBooks: the ledger check with holds against open
// withdrawals, balances, custody moved by exactly net plus network fee,
// at most one live payout per withdrawal). At the end every payout is let
// through and every withdrawal must reach confirmed, failed or refunded.
func TestRandomPayouts(t *testing.T) {
	t.Parallel()
	rng := seededRand(t, payoutFlags, 0x51ed270b27f4a7c1)
	e := setup(t)
	ctx := context.Background()
	users := []string{"q0", "q1", "q2"}
	for _, u := range users {
		e.fund(t, u, asset.BTC, 3_000_000)
		e.fund(t, u, asset.BTCLN, 1_000_000)
	}
	var dests []string
	for i := range 4 {
		dests = append(dests, p2wpkh(t, chain.Regtest, fmt.Sprint("shared", i)))
	}
	var ids []string
	pick := func(statuses ...withdrawal.Status) (string, bool) {
		var c []string
		for _, id := range ids {
			if slices.Contains(statuses, e.row(t, id).Status) {
				c = append(c, id)
			}
		}
		if len(c) == 0 {
			return "", false
		}
		return c[rng.IntN(len(c))], true
	}
	payoutIn := func(states ...string) (btcpaysim.PayoutInfo, bool) {
		var c []btcpaysim.PayoutInfo
		for _, p := range e.Sim.Payouts() {
			if slices.Contains(states, p.State) {
				c = append(c, p)
			}
		}
		if len(c) == 0 {
			return btcpaysim.PayoutInfo{}, false
		}
		return c[rng.IntN(len(c))], true
	}
	for step := range payoutFlags.Ops() {
		op := rng.IntN(17)
		what := ""
		switch op {
		case 0:
			u := users[rng.IntN(len(users))]
			e.fund(t, u, asset.BTC, int64(100_000+rng.IntN(1_000_000)))
			what = "deposit to " + u
		case 1, 2:
			u := users[rng.IntN(len(users))]
			amount := int64(20_000 + rng.IntN(200_000))
			if rng.IntN(8) == 0 {
				amount = 1_200_000 // above the auto-approval limit
			}
			r := e.request(u, asset.BTC, amount, dests[rng.IntN(len(dests))])
			require.Contains(t, []int{http.StatusCreated, http.StatusPaymentRequired}, r.Status, string(r.Body))
			if r.Status == http.StatusCreated {
				ids = append(ids, r.Map(t)["withdrawal_id"].(string))
			}
			what = fmt.Sprintf("BTC withdrawal of %d by %s: %d", amount, u, r.Status)
		case 3:
			u := users[rng.IntN(len(users))]
			life := time.Duration(10+rng.IntN(110)) * time.Minute
			r := e.request(u, asset.BTCLN, int64(1_000+rng.IntN(50_000)), bolt11(t, chain.Regtest, e.Clock.Now(), 0, life))
			require.Contains(t, []int{http.StatusCreated, http.StatusPaymentRequired}, r.Status, string(r.Body))
			if r.Status == http.StatusCreated {
				ids = append(ids, r.Map(t)["withdrawal_id"].(string))
			}
			what = fmt.Sprintf("Lightning withdrawal (invoice life %s): %d", life, r.Status)
		case 4:
			if id, ok := pick(withdrawal.StatusPendingApproval); ok {
				r := e.decide(id, []string{"approve", "approve", "reject"}[rng.IntN(3)], nil)
				require.Equal(t, http.StatusOK, r.Status, string(r.Body))
				what = "decide " + id
			}
		case 5, 6, 7, 14, 15:
			e.pass(t)
			what = "pass"
		case 8, 9:
			action := []string{"broadcast", "complete", "complete", "fail", "bounce", "stall", "confirm-cancelled"}[rng.IntN(7)]
			states := []string{"AwaitingPayment", "InProgress"}
			if action == "confirm-cancelled" {
				states = []string{"Cancelled"}
			}
			if p, ok := payoutIn(states...); ok {
				var err error
				switch action {
				case "broadcast":
					_, err = e.Sim.BroadcastPayout(p.ID, "")
				case "complete":
					_, err = e.Sim.CompletePayout(p.ID, "")
				case "fail":
					err = e.Sim.FailPayout(p.ID)
				case "bounce":
					err = e.Sim.BouncePayout(p.ID)
				case "stall":
					err = e.Sim.StallPayout(p.ID)
				case "confirm-cancelled":
					_, err = e.Sim.ConfirmCancelledPayout(p.ID, "")
				}
				what = fmt.Sprintf("processor: %s payout %s (%s): %v", action, p.ID, p.State, err) // some states refuse: fine
			}
		case 16:
			if id, ok := pick(withdrawal.StatusSubmitted, withdrawal.StatusBroadcast, withdrawal.StatusFailed); ok {
				r := e.decide(id, "release", map[string]any{"attestation": att})
				require.Contains(t, []int{http.StatusOK, http.StatusConflict, http.StatusServiceUnavailable}, r.Status, string(r.Body))
				what = fmt.Sprintf("release %s: %d", id, r.Status)
			}
		case 10:
			if id, ok := pick(withdrawal.StatusApproved); ok {
				real := e.Svc.Processor
				cctx, cancel := context.WithCancel(ctx)
				e.Svc.Processor = afterCreate{Processor: real, then: cancel} // the worker dies after the call
				err := e.Svc.Submit(cctx, uuid.MustParse(id))
				e.Svc.Processor = real
				cancel()
				what = fmt.Sprintf("worker killed submitting %s: %v", id, err)
			}
		case 11:
			d := time.Duration(1+rng.IntN(20*60)) * time.Second
			if rng.IntN(4) == 0 {
				d = time.Duration(30+rng.IntN(60)) * time.Minute
			}
			e.Clock.Advance(d)
			what = "clock +" + d.String()
		case 12:
			mode := []btcpaysim.DownMode{btcpaysim.DownError, btcpaysim.DownDrop, btcpaysim.DownDropAfter}[rng.IntN(3)]
			k := 1 + rng.IntN(3)
			e.Sim.FailNext(k, mode)
			e.pass(t)
			e.Sim.Up()
			what = fmt.Sprintf("processor fails the next %d requests (%s), pass", k, mode)
		case 13:
			require.NoError(t, e.Sim.SetFeeRate(fmt.Sprint(1+rng.IntN(8))))
			what = "fee rate changes"
		}
		t.Logf("step %d: %s", step, what)
		e.requireBooks(t)
	}
	// Let everything through: approve what waits, complete every payout,
	// run past every claim, backoff, Lightning deadline and invoice expiry.
	// Withdrawals to one address are paid one after the other, so this
	// takes about as many rounds as the longest such queue.
	open := func() bool {
		for _, id := range ids {
			switch e.row(t, id).Status {
			case withdrawal.StatusConfirmed, withdrawal.StatusFailed, withdrawal.StatusRefunded:
			default:
				return true
			}
		}
		return false
	}
	for round := 0; round < 12 || (round < 200 && open()); round++ {
		for _, id := range ids {
			if e.row(t, id).Status == withdrawal.StatusPendingApproval {
				r := e.decide(id, "approve", nil)
				require.Equal(t, http.StatusOK, r.Status, string(r.Body))
			}
		}
		e.pass(t)
		for _, p := range e.Sim.Payouts() {
			if p.State == "AwaitingPayment" || p.State == "InProgress" {
				_, _ = e.Sim.CompletePayout(p.ID, "")
			}
		}
		e.pass(t)
		e.Clock.Advance(time.Duration(min(round, 11)+1) * 10 * time.Minute)
	}
	counts := map[withdrawal.Status]int{}
	for _, id := range ids {
		st := e.row(t, id).Status
		counts[st]++
		require.Contains(t, []withdrawal.Status{withdrawal.StatusConfirmed, withdrawal.StatusFailed, withdrawal.StatusRefunded}, st,
			"withdrawal %s did not settle: %+v", id, e.row(t, id))
	}
	t.Logf("withdrawals by status at the end: %v", counts)
}

package sandbox_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/apikey"
	"svc/modules/asset"
	"svc/modules/audit"
	"svc/modules/deposit"
	"svc/modules/withdrawal"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
	"svc/platform/chain/chaintest"
	"svc/platform/config"
)

// TestPayThenConfirmSettles: pay makes the deposit confirming (the
// answer is the deposit as re-read, not as it was), confirm settles it:
// the balance is credited and the platform's receiver gets
// deposit.settled; the simulator's own webhooks, arriving afterwards,
// credit nothing twice (the books).
func TestPayThenConfirmSettles(t *testing.T) {
	t.Parallel()
	e := setup(t)
	d := e.createDeposit(t, "alice", asset.BTC, "100000")
	v := depositOf(t, e.helper("deposits/"+d.DepositID+"/pay", map[string]any{}), http.StatusOK)
	require.Equal(t, deposit.StatusConfirming, v.Status)
	require.Len(t, v.Payments, 1)
	require.Equal(t, "0.00100000", v.Payments[0].Amount)
	require.False(t, v.Payments[0].Credited)
	require.Equal(t, "0.00000000", e.UserBalance(t, "alice", asset.BTC).Available)

	v = depositOf(t, e.helper("deposits/"+d.DepositID+"/confirm", map[string]any{}), http.StatusOK)
	require.Equal(t, deposit.StatusSettled, v.Status)
	require.Equal(t, "0.00100000", v.AmountCredited)
	require.True(t, v.Payments[0].Credited)
	require.Equal(t, "0.00100000", e.UserBalance(t, "alice", asset.BTC).Available)
	data := e.received(t, "deposit.settled", "deposit_id", d.DepositID)
	require.Equal(t, "0.00100000", data["amount_credited"])

	// The simulator's webhooks about it reach the ingress and are
	// processed: nothing more is credited, no second deposit.settled.
	e.webhooksProcessed(t)
	require.Equal(t, "0.00100000", e.UserBalance(t, "alice", asset.BTC).Available)
	require.Equal(t, deposit.StatusSettled, depositOf(t, e.Get("/v1/deposits/"+d.DepositID), http.StatusOK).Status)
	settled := 0
	for _, ev := range e.Receiver.Events() {
		if ev.Type == "deposit.settled" {
			settled++
		}
	}
	require.Equal(t, 1, settled)

	// confirmed: true settles in one call; a deposit without an expected
	// amount is paid the amounts given.
	d2 := e.createDeposit(t, "alice", asset.BTC, "")
	v = depositOf(t, e.helper("deposits/"+d2.DepositID+"/pay", map[string]any{"amounts": []string{"25000"}, "confirmed": true}), http.StatusOK)
	require.Equal(t, deposit.StatusSettled, v.Status)
	require.Equal(t, "0.00125000", e.UserBalance(t, "alice", asset.BTC).Available)
	e.received(t, "deposit.settled", "deposit_id", d2.DepositID)
}

// TestPayPartialThenTheRest: a partial payment leaves the deposit
// confirming; paying without amounts pays what is still due; once both
// are confirmed the deposit settles with both credited. A partial payment
// that confirms alone settles the deposit for what it credited, and a
// payment after that is a later payment: review (the deposits' own rule).
func TestPayPartialThenTheRest(t *testing.T) {
	t.Parallel()
	e := setup(t)
	d := e.createDeposit(t, "bob", asset.BTC, "100000")
	v := depositOf(t, e.helper("deposits/"+d.DepositID+"/pay", map[string]any{"amounts": []string{"40000"}}), http.StatusOK)
	require.Equal(t, deposit.StatusConfirming, v.Status)
	require.Len(t, v.Payments, 1)

	v = depositOf(t, e.helper("deposits/"+d.DepositID+"/pay", map[string]any{"confirmed": true}), http.StatusOK)
	require.Equal(t, deposit.StatusConfirming, v.Status) // the first payment is not confirmed yet
	require.Len(t, v.Payments, 2)
	require.Equal(t, "0.00060000", v.Payments[1].Amount)
	v = depositOf(t, e.helper("deposits/"+d.DepositID+"/confirm", map[string]any{}), http.StatusOK)
	require.Equal(t, deposit.StatusSettled, v.Status)
	require.Equal(t, "0.00100000", v.AmountCredited)
	require.Equal(t, "0.00100000", e.UserBalance(t, "bob", asset.BTC).Available)

	// Nothing is due any more: 409, naming the status.
	r := e.helper("deposits/"+d.DepositID+"/pay", map[string]any{})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "settled")

	// Several amounts: one payment each.
	d2 := e.createDeposit(t, "bob", asset.BTC, "100000")
	v = depositOf(t, e.helper("deposits/"+d2.DepositID+"/pay", map[string]any{"amounts": []string{"30000", "70000"}}), http.StatusOK)
	require.Equal(t, deposit.StatusConfirming, v.Status)
	require.Len(t, v.Payments, 2)
	v = depositOf(t, e.helper("deposits/"+d2.DepositID+"/confirm", map[string]any{}), http.StatusOK)
	require.Equal(t, deposit.StatusSettled, v.Status)
	require.Equal(t, "0.00200000", e.UserBalance(t, "bob", asset.BTC).Available)

	// A partial payment confirmed alone settles for what it credited; the
	// rest, paid afterwards, goes to review uncredited.
	d3 := e.createDeposit(t, "bob", asset.BTC, "100000")
	v = depositOf(t, e.helper("deposits/"+d3.DepositID+"/pay", map[string]any{"amounts": []string{"40000"}, "confirmed": true}), http.StatusOK)
	require.Equal(t, deposit.StatusSettled, v.Status)
	require.Equal(t, "0.00040000", v.AmountCredited)
	v = depositOf(t, e.helper("deposits/"+d3.DepositID+"/pay", map[string]any{"confirmed": true}), http.StatusOK)
	require.Equal(t, deposit.StatusReview, v.Status)
	require.Equal(t, "0.00040000", v.AmountCredited)
	require.Equal(t, "0.00240000", e.UserBalance(t, "bob", asset.BTC).Available)
}

// TestExpireThenPayGoesToReview: expire closes an unpaid deposit
// (deposit.expired); a payment afterwards is one after expiry, which goes
// to an operator (deposit.review_required) and is not credited.
func TestExpireThenPayGoesToReview(t *testing.T) {
	t.Parallel()
	e := setup(t)
	d := e.createDeposit(t, "carol", asset.BTC, "50000")
	v := depositOf(t, e.helper("deposits/"+d.DepositID+"/expire", nil), http.StatusOK)
	require.Equal(t, deposit.StatusExpired, v.Status)
	e.received(t, "deposit.expired", "deposit_id", d.DepositID)

	// The window is over: expire again is 409.
	r := e.helper("deposits/"+d.DepositID+"/expire", map[string]any{})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "expired")

	v = depositOf(t, e.helper("deposits/"+d.DepositID+"/pay", map[string]any{"confirmed": true}), http.StatusOK)
	require.Equal(t, deposit.StatusReview, v.Status)
	require.Len(t, v.Payments, 1)
	require.True(t, v.Payments[0].AfterExpiration)
	require.False(t, v.Payments[0].Credited)
	require.Equal(t, "0.00000000", e.UserBalance(t, "carol", asset.BTC).Available)
	e.received(t, "deposit.review_required", "deposit_id", d.DepositID)
}

// TestWithdrawalBroadcastThenConfirm: an auto-approved withdrawal is
// submitted by the worker; broadcast puts it on chain (txid, still held,
// withdrawal.broadcast), confirm completes it (the hold spent,
// withdrawal.completed).
func TestWithdrawalBroadcastThenConfirm(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := e.submittedWithdrawal(t, "dave")

	txid := "4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b"
	v := withdrawalOf(t, e.helper("withdrawals/"+w.WithdrawalID+"/broadcast", map[string]any{"txid": txid}), http.StatusOK)
	require.Equal(t, withdrawal.StatusBroadcast, v.Status)
	require.NotNil(t, v.Txid)
	require.Equal(t, txid, *v.Txid)
	require.Equal(t, "0.00200000", e.UserBalance(t, "dave", asset.BTC).Held)
	e.received(t, "withdrawal.broadcast", "withdrawal_id", w.WithdrawalID)

	v = withdrawalOf(t, e.helper("withdrawals/"+w.WithdrawalID+"/confirm", map[string]any{}), http.StatusOK)
	require.Equal(t, withdrawal.StatusConfirmed, v.Status)
	b := e.UserBalance(t, "dave", asset.BTC)
	require.Equal(t, "0.00800000", b.Available)
	require.Equal(t, "0.00000000", b.Held)
	e.received(t, "withdrawal.completed", "withdrawal_id", w.WithdrawalID)

	// Past its last step: 409 naming the status.
	r := e.helper("withdrawals/"+w.WithdrawalID+"/fail", map[string]any{})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "confirmed")
}

// TestWithdrawalConfirmWithoutWaiting: confirm on a withdrawal the worker
// has not submitted yet submits it first (the submitter's own step), then
// completes it from submitted: broadcast and confirmed at once.
func TestWithdrawalConfirmWithoutWaiting(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "erin", asset.BTC, "1000000")
	e.StopWorker() // no submitter but the helper's
	w := e.createWithdrawal(t, "erin", asset.BTC, "300000", btcAddress(t, "erin's wallet"))
	v := withdrawalOf(t, e.helper("withdrawals/"+w.WithdrawalID+"/confirm", nil), http.StatusOK)
	e.StartWorker() // delivers the events
	require.Equal(t, withdrawal.StatusConfirmed, v.Status)
	require.NotNil(t, v.Txid)
	require.NotNil(t, v.Fee)
	e.received(t, "withdrawal.broadcast", "withdrawal_id", w.WithdrawalID)
	e.received(t, "withdrawal.completed", "withdrawal_id", w.WithdrawalID)
	require.Equal(t, "0.00700000", e.UserBalance(t, "erin", asset.BTC).Available)
}

// TestWithdrawalFailKeepsTheHold: fail cancels the payout: the withdrawal
// is failed (withdrawal.failed) and the money stays held, as the SPEC
// says, until an operator releases it (refunded).
func TestWithdrawalFailKeepsTheHold(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := e.submittedWithdrawal(t, "frank")
	v := withdrawalOf(t, e.helper("withdrawals/"+w.WithdrawalID+"/fail", map[string]any{}), http.StatusOK)
	require.Equal(t, withdrawal.StatusFailed, v.Status)
	require.NotNil(t, v.FailureReason)
	b := e.UserBalance(t, "frank", asset.BTC)
	require.Equal(t, "0.00800000", b.Available)
	require.Equal(t, "0.00200000", b.Held)
	e.received(t, "withdrawal.failed", "withdrawal_id", w.WithdrawalID)

	r := e.AdminPost("/v1/admin/withdrawals/"+w.WithdrawalID+"/release", map[string]any{"attestation": "the payout was cancelled and never sent"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, withdrawal.StatusRefunded, withdrawalOf(t, e.Get("/v1/withdrawals/"+w.WithdrawalID), http.StatusOK).Status)
	require.Equal(t, "0.01000000", e.UserBalance(t, "frank", asset.BTC).Available)
}

// TestWithdrawalStall: a stalled on-chain payout is in progress with a
// transaction that never confirms: the withdrawal is broadcast and stays
// held; it can still complete.
func TestWithdrawalStall(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := e.submittedWithdrawal(t, "grace")
	v := withdrawalOf(t, e.helper("withdrawals/"+w.WithdrawalID+"/stall", map[string]any{}), http.StatusOK)
	require.Equal(t, withdrawal.StatusBroadcast, v.Status)
	require.NotNil(t, v.Txid)
	require.Equal(t, "0.00200000", e.UserBalance(t, "grace", asset.BTC).Held)
	po, ok := e.Sim.Payout(e.Sim.Payouts()[0].ID)
	require.True(t, ok)
	require.Equal(t, "InProgress", po.State)

	v = withdrawalOf(t, e.helper("withdrawals/"+w.WithdrawalID+"/confirm", map[string]any{}), http.StatusOK)
	require.Equal(t, withdrawal.StatusConfirmed, v.Status)
}

// TestWithdrawalWithoutPayoutIs409: a withdrawal waiting for an operator
// has no payout at the processor: every payout helper is 409 naming its
// status, and nothing changes.
func TestWithdrawalWithoutPayoutIs409(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "heidi", asset.BTC, "5000000")
	w := e.createWithdrawal(t, "heidi", asset.BTC, "2000000", btcAddress(t, "heidi's wallet")) // above the auto limit
	require.Equal(t, withdrawal.StatusPendingApproval, w.Status)
	for _, action := range []string{"broadcast", "confirm", "fail", "stall"} {
		r := e.helper("withdrawals/"+w.WithdrawalID+"/"+action, map[string]any{})
		require.Equal(t, http.StatusConflict, r.Status, "%s: %s", action, r.Body)
		require.Contains(t, detail(t, r), "pending_approval", action)
	}
	require.Empty(t, e.Sim.Payouts())
	require.Equal(t, withdrawal.StatusPendingApproval, withdrawalOf(t, e.Get("/v1/withdrawals/"+w.WithdrawalID), http.StatusOK).Status)
}

// TestFeeRate: the rate set is what the next withdrawal's fee is fixed
// with at submission (rate x 141 vB, rounded up).
func TestFeeRate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.helper("fee_rate", map[string]any{"sat_per_vbyte": "12.5"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, map[string]any{"sat_per_vbyte": "12.5"}, r.Map(t))
	e.fund(t, "ivan", asset.BTC, "1000000")
	w := e.createWithdrawal(t, "ivan", asset.BTC, "200000", btcAddress(t, "ivan's wallet"))
	v := e.submitted(t, w.WithdrawalID)
	require.NotNil(t, v.Fee)
	require.Equal(t, "0.00001763", *v.Fee) // 12.5 x 141 = 1762.5
	require.Equal(t, "0.00198237", *v.AmountNet)

	for _, body := range []any{map[string]any{}, map[string]any{"sat_per_vbyte": "fast"}, map[string]any{"sat_per_vbyte": 12.5}} {
		r := e.helper("fee_rate", body)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%v: %s", body, r.Body)
		r.FieldErrors(t)
	}
}

// TestTronTransferForAUSDTWithdrawal: the transfer an operator sends for
// an approved USDT withdrawal appears on the TRON node, and mark-broadcast
// verifies it there.
func TestTronTransferForAUSDTWithdrawal(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "judy", asset.USDTTRC20, "100000000")
	dest := chaintest.Tron("judy's wallet")
	w := e.createWithdrawal(t, "judy", asset.USDTTRC20, "25000000", dest)
	require.Equal(t, withdrawal.StatusPendingApproval, w.Status) // always, for USDT
	r := e.AdminPost("/v1/admin/withdrawals/"+w.WithdrawalID+"/approve", map[string]any{})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))

	// The processor does not send USDT: 409.
	r = e.helper("withdrawals/"+w.WithdrawalID+"/broadcast", map[string]any{})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))

	r = e.helper("tron/transfers", map[string]any{"to": dest, "amount": "23000000"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	tr := r.Map(t)
	require.Equal(t, e.Hot, tr["from"])
	require.Equal(t, dest, tr["to"])
	require.Equal(t, "23000000", tr["amount"])
	txid, _ := tr["txid"].(string)
	require.Len(t, txid, 64)

	r = e.AdminPost("/v1/admin/withdrawals/"+w.WithdrawalID+"/mark-broadcast", map[string]any{"txid": txid})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, withdrawal.StatusBroadcast, withdrawalOf(t, e.Get("/v1/withdrawals/"+w.WithdrawalID), http.StatusOK).Status)

	for _, body := range []any{
		map[string]any{"to": "0x52908400098527886E0F7030069857D2E4169EE7", "amount": "1"},
		map[string]any{"to": dest, "amount": "0"},
		map[string]any{"to": dest},
		map[string]any{"from": "Tnot-an-address-at-all-but-34-long", "to": dest, "amount": "5"},
	} {
		r := e.helper("tron/transfers", body)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%v: %s", body, r.Body)
		r.FieldErrors(t)
	}
}

// TestBadRequests: unknown ids are 404; a bad body is 422 with field
// errors; pay without amounts on a deposit that expects none is 422 at
// amounts; the Idempotency-Key is required as on every POST.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, path := range []string{"deposits/0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b/pay", "deposits/nope/confirm",
		"withdrawals/0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b/broadcast", "withdrawals/nope/fail"} {
		r := e.helper(path, map[string]any{})
		require.Equal(t, http.StatusNotFound, r.Status, "%s: %s", path, r.Body)
	}
	d := e.createDeposit(t, "ken", asset.BTC, "")
	r := e.helper("deposits/"+d.DepositID+"/pay", map[string]any{})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, []any{"body", "amounts"}, r.FieldErrors(t)[0]["loc"])
	for _, body := range []any{map[string]any{"amounts": []string{"0"}}, map[string]any{"amounts": []string{"1.5"}},
		map[string]any{"amounts": []string{}}, map[string]any{"confirmed": "yes"}} {
		r := e.helper("deposits/"+d.DepositID+"/pay", body)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%v: %s", body, r.Body)
		r.FieldErrors(t)
	}
	r = e.Do(apptest.Req{Method: http.MethodPost, Path: "/v1/test_helpers/deposits/" + d.DepositID + "/expire", Body: map[string]any{}, Idem: "-"})
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, deposit.StatusPending, depositOf(t, e.Get("/v1/deposits/"+d.DepositID), http.StatusOK).Status)
}

// helperPaths are one call of every helper, on ids that need not exist.
var helperPaths = []string{
	"deposits/0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b/pay", "deposits/0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b/confirm",
	"deposits/0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b/expire", "withdrawals/0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b/broadcast",
	"withdrawals/0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b/confirm", "withdrawals/0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b/fail",
	"withdrawals/0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b/stall", "tron/transfers", "fee_rate",
}

// requireOff: every helper answers exactly what an unknown route does.
func requireOff(t *testing.T, e *apptest.Env) {
	t.Helper()
	unknown := e.Post("/v1/test_helpers/no_such_helper", map[string]any{})
	require.Equal(t, http.StatusNotFound, unknown.Status, string(unknown.Body))
	for _, p := range helperPaths {
		r := e.Post("/v1/test_helpers/"+p, map[string]any{})
		require.Equal(t, http.StatusNotFound, r.Status, "%s: %s", p, r.Body)
		require.JSONEq(t, string(unknown.Body), string(r.Body), p)
	}
}

// TestLiveDeploymentHasNoHelpers: with live keys every helper is 404, as
// an unknown route, even with the simulator as the processor; so with
// test keys on a processor that is not the simulator, and with
// SANDBOX_SIMULATOR_URL=off.
func TestLiveDeploymentHasNoHelpers(t *testing.T) {
	t.Parallel()
	sim := btcpaysim.Start(t, btcpaysim.Options{})
	t.Run("live keys", func(t *testing.T) {
		t.Parallel()
		requireOff(t, apptest.New(t, apptest.WithProcessor(sim, hookSecret), apptest.WithConfig(func(c *config.Config) {
			c.APIKeys.Mode = "live"
			c.Sandbox.SimulatorURL = sim.URL()
		})))
	})
	t.Run("not the simulator", func(t *testing.T) {
		t.Parallel()
		// A processor whose /_sim/ is not the simulator's (BTCPay answers
		// 404 there).
		real := httptest.NewServer(http.NotFoundHandler())
		t.Cleanup(real.Close)
		requireOff(t, apptest.New(t, apptest.WithConfig(func(c *config.Config) {
			c.BTCPay.URL, c.BTCPay.APIKey, c.BTCPay.StoreID, c.BTCPay.WebhookSecret = real.URL, "key", "store", hookSecret
		})))
	})
	t.Run("off", func(t *testing.T) {
		t.Parallel()
		requireOff(t, apptest.New(t, apptest.WithProcessor(sim, hookSecret), apptest.WithConfig(func(c *config.Config) {
			c.Sandbox.SimulatorURL = config.SandboxOff
		})))
	})
	t.Run("no processor", func(t *testing.T) {
		t.Parallel()
		requireOff(t, apptest.New(t))
	})
}

// TestProductionRefusesTheSimulator: SANDBOX_SIMULATOR_URL cannot be set
// in production.
func TestProductionRefusesTheSimulator(t *testing.T) {
	t.Parallel()
	c := apptest.Config("postgres://x@127.0.0.1/db")
	c.Env, c.APIKeys.Mode = "production", "live"
	c.Sandbox.SimulatorURL = "http://127.0.0.1:8090"
	err := c.Validate()
	require.Error(t, err)
	require.Contains(t, err.Error(), "SANDBOX_SIMULATOR_URL")
	c.Sandbox.SimulatorURL = config.SandboxOff
	if err := c.Validate(); err != nil {
		require.NotContains(t, err.Error(), "SANDBOX_SIMULATOR_URL")
	}
}

// TestLightning: a BTC_LN deposit settles at once when paid, and its
// invoice takes no second payment (409); a Lightning payout has no
// broadcast (409), stalls in flight (submitted, held), and confirm pays it.
func TestLightning(t *testing.T) {
	t.Parallel()
	e := setup(t)
	d := e.createDeposit(t, "lara", asset.BTCLN, "200000")
	v := depositOf(t, e.helper("deposits/"+d.DepositID+"/pay", map[string]any{}), http.StatusOK)
	require.Equal(t, deposit.StatusSettled, v.Status)
	require.Equal(t, "0.00200000", e.UserBalance(t, "lara", asset.BTCLN).Available)
	r := e.helper("deposits/"+d.DepositID+"/pay", map[string]any{"amounts": []string{"200000"}})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "settled")

	// 50,000 sat gross, net 49,990 under the 10 sat flat fee.
	inv := chaintest.BOLT11(t, chain.Regtest, e.Clock.Now(), 49_990, time.Hour)
	w := e.createWithdrawal(t, "lara", asset.BTCLN, "50000", inv)
	r = e.helper("withdrawals/"+w.WithdrawalID+"/broadcast", map[string]any{})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	v2 := withdrawalOf(t, e.helper("withdrawals/"+w.WithdrawalID+"/stall", map[string]any{}), http.StatusOK)
	require.Equal(t, withdrawal.StatusSubmitted, v2.Status)
	require.Equal(t, "0.00050000", e.UserBalance(t, "lara", asset.BTCLN).Held)
	v2 = withdrawalOf(t, e.helper("withdrawals/"+w.WithdrawalID+"/confirm", map[string]any{}), http.StatusOK)
	require.Equal(t, withdrawal.StatusConfirmed, v2.Status)
	require.Equal(t, "0.00150000", e.UserBalance(t, "lara", asset.BTCLN).Available)
	e.received(t, "withdrawal.completed", "withdrawal_id", w.WithdrawalID)
}

// TestUSDTDeposit: a USDT deposit is paid in micro-USDT; once its invoice
// has expired the processor no longer watches the address: pay is 409.
func TestUSDTDeposit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	d := e.createDeposit(t, "mia", asset.USDTTRC20, "25000000")
	v := depositOf(t, e.helper("deposits/"+d.DepositID+"/pay", map[string]any{"confirmed": true}), http.StatusOK)
	require.Equal(t, deposit.StatusSettled, v.Status)
	require.Equal(t, "25.000000", e.UserBalance(t, "mia", asset.USDTTRC20).Available)

	d2 := e.createDeposit(t, "mia", asset.USDTTRC20, "25000000")
	require.Equal(t, deposit.StatusExpired, depositOf(t, e.helper("deposits/"+d2.DepositID+"/expire", nil), http.StatusOK).Status)
	r := e.helper("deposits/"+d2.DepositID+"/pay", map[string]any{"confirmed": true})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "expired")
}

// TestExpireAfterAPartialPayment: the window ends with part of the amount
// received in time and not confirmed yet: the deposit stays confirming,
// and the payment, made before the expiry, settles it as it confirms.
func TestExpireAfterAPartialPayment(t *testing.T) {
	t.Parallel()
	e := setup(t)
	d := e.createDeposit(t, "nina", asset.BTC, "100000")
	depositOf(t, e.helper("deposits/"+d.DepositID+"/pay", map[string]any{"amounts": []string{"30000"}}), http.StatusOK)
	v := depositOf(t, e.helper("deposits/"+d.DepositID+"/expire", map[string]any{}), http.StatusOK)
	require.Equal(t, deposit.StatusConfirming, v.Status)
	v = depositOf(t, e.helper("deposits/"+d.DepositID+"/confirm", map[string]any{}), http.StatusOK)
	require.Equal(t, deposit.StatusSettled, v.Status)
	require.Equal(t, "0.00030000", v.AmountCredited)
	require.False(t, v.Payments[0].AfterExpiration)
	require.Equal(t, "0.00030000", e.UserBalance(t, "nina", asset.BTC).Available)
}

// TestRetryReplays: the same Idempotency-Key replays the answer and pays
// once; an admin key passes too.
func TestRetryReplays(t *testing.T) {
	t.Parallel()
	e := setup(t)
	d := e.createDeposit(t, "olga", asset.BTC, "100000")
	req := apptest.Req{Method: http.MethodPost, Path: "/v1/test_helpers/deposits/" + d.DepositID + "/pay",
		Body: map[string]any{"amounts": []string{"10000"}}, Idem: "pay-once"}
	first := e.Do(req)
	require.Equal(t, http.StatusOK, first.Status, string(first.Body))
	again := e.Do(req)
	require.Equal(t, http.StatusOK, again.Status, string(again.Body))
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(first.Body), string(again.Body))
	inv, ok := e.Sim.InvoiceByOrderID(d.DepositID)
	require.True(t, ok)
	require.Len(t, inv.Payments, 1)

	r := e.Do(apptest.Req{Method: http.MethodPost, Path: "/v1/test_helpers/deposits/" + d.DepositID + "/confirm", Body: map[string]any{}, Key: e.Admin})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
}

// TestSimulatorDown: a simulator that does not answer is 503, retryable;
// without a TRON node simulator the transfer helper is 404.
func TestSimulatorDown(t *testing.T) {
	t.Parallel()
	sim, fake := apptest.StartProcessor(t, btcpaysim.Options{})
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // nothing listens there any more
	e := apptest.New(t, apptest.WithClock(fake), apptest.WithProcessor(sim, hookSecret), apptest.WithConfig(func(c *config.Config) {
		c.Sandbox.SimulatorURL = gone.URL
	}))
	r := e.Post("/v1/test_helpers/fee_rate", map[string]any{"sat_per_vbyte": "3"})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
	r = e.Post("/v1/test_helpers/tron/transfers", map[string]any{"from": chaintest.Tron("a"), "to": chaintest.Tron("b"), "amount": "1"})
	require.Equal(t, http.StatusNotFound, r.Status, string(r.Body))
}

// TestRefusalNamesTheCurrentStatus: an invoice that expired on its own
// at the processor, before the service heard of it (its webhooks held):
// expire is 409 naming the status the deposit has once reconciled.
func TestRefusalNamesTheCurrentStatus(t *testing.T) {
	t.Parallel()
	e := setup(t)
	d := e.createDeposit(t, "pia", asset.BTC, "100000")
	e.Sim.HoldWebhooks()
	e.Clock.Advance(2 * time.Hour)
	e.Sim.Tick()
	r := e.helper("deposits/"+d.DepositID+"/expire", map[string]any{})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "the deposit is expired")
	require.Equal(t, deposit.StatusExpired, depositOf(t, e.Get("/v1/deposits/"+d.DepositID), http.StatusOK).Status)
	e.Sim.ReleaseWebhooks(false)
}

// TestReadOnlyKeyIsRefused: a read_only key may not call a helper (403),
// and nothing is paid.
func TestReadOnlyKeyIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, ro, err := e.App.Keys.Mint(context.Background(), apikey.MintParams{Scope: apikey.ScopeReadOnly, Label: "dashboard", Actor: audit.CLI("test")})
	require.NoError(t, err)
	d := e.createDeposit(t, "quinn", asset.BTC, "100000")
	for _, p := range []string{"deposits/" + d.DepositID + "/pay", "fee_rate"} {
		r := e.Do(apptest.Req{Method: http.MethodPost, Path: "/v1/test_helpers/" + p, Body: map[string]any{"sat_per_vbyte": "3"}, Key: ro})
		require.Equal(t, http.StatusForbidden, r.Status, "%s: %s", p, r.Body)
	}
	inv, ok := e.Sim.InvoiceByOrderID(d.DepositID)
	require.True(t, ok)
	require.Empty(t, inv.Payments)
}

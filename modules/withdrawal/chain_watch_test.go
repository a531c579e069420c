package withdrawal_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/modules/withdrawal"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
)

// confirmUSDT runs one pass of the USDT confirmation job.
func (u *usdtEnv) confirmUSDT(t *testing.T) {
	t.Helper()
	_, err := u.Svc.ConfirmUSDT(context.Background())
	require.NoError(t, err)
}

// TestUSDTOneMissIsNoAlert: the TRON node not showing a reported transfer
// once, or on a few checks within ten minutes, raises nothing; a check
// that finds it starts the count over; misses on at least
// USDTMissingChecks consecutive checks spread over ten minutes raise the
// alert.
func TestUSDTOneMissIsNoAlert(t *testing.T) {
	t.Parallel()
	u := setupUSDT(t)
	id, dest, txid := u.broadcastUSDT(t, "wa")

	u.Node.Forget(txid) // a node that lags, or another node behind a balancer
	u.confirmUSDT(t)
	require.Empty(t, u.alerts(t, withdrawal.AlertUSDTTransferMissing, id))
	require.Equal(t, 1, u.row(t, id).TransferMissingChecks)
	u.Clock.Advance(9 * time.Minute)
	u.confirmUSDT(t)
	require.Empty(t, u.alerts(t, withdrawal.AlertUSDTTransferMissing, id))

	// The node shows it again: the count starts over.
	u.Node.AddUSDTTransfer(txid, u.Hot, dest, 23_000_000, true)
	u.confirmUSDT(t)
	row := u.row(t, id)
	require.Zero(t, row.TransferMissingChecks)
	require.Nil(t, row.TransferMissingSince)

	u.Node.Forget(txid)
	u.Clock.Advance(2 * time.Minute)
	u.confirmUSDT(t) // the first miss of the new count
	u.Clock.Advance(9 * time.Minute)
	u.confirmUSDT(t)
	u.Clock.Advance(59 * time.Second)
	u.confirmUSDT(t) // three misses, but within ten minutes
	require.Empty(t, u.alerts(t, withdrawal.AlertUSDTTransferMissing, id))
	u.Clock.Advance(time.Second)
	u.confirmUSDT(t)
	alerts := u.alerts(t, withdrawal.AlertUSDTTransferMissing, id)
	require.Len(t, alerts, 1)
	require.Contains(t, alerts[0].Detail, "4 consecutive checks")
	require.Equal(t, withdrawal.StatusBroadcast, u.status(t, id))
}

// TestUSDTPaidAfterRelease: a USDT_TRC20 withdrawal released after its
// transfer went missing is still read for two weeks; the transfer
// reappearing in a solidified block then raises
// withdrawal.paid_after_refund, once.
func TestUSDTPaidAfterRelease(t *testing.T) {
	t.Parallel()
	u := setupUSDT(t)
	id, dest, txid := u.broadcastUSDT(t, "wb")
	u.Node.Forget(txid)
	for range 11 {
		u.confirmUSDT(t)
		u.Clock.Advance(time.Minute)
	}
	require.Len(t, u.alerts(t, withdrawal.AlertUSDTTransferMissing, id), 1)
	r := u.decide(id, "release", map[string]any{"attestation": "the transfer is on no explorer; nothing left the hot wallet"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	released := u.row(t, id)
	require.NotNil(t, released.RefundWatchUntil, "the watch is stored with the withdrawal: a restart keeps it")
	require.GreaterOrEqual(t, released.RefundWatchUntil.Sub(released.UpdatedAt), 14*24*time.Hour)

	u.confirmUSDT(t)
	require.Empty(t, u.alerts(t, withdrawal.AlertPaidAfterRefund, id))
	u.Clock.Advance(14*24*time.Hour - 2*time.Hour)
	u.Node.AddUSDTTransfer(txid, u.Hot, dest, 23_000_000, true) // it was mined after all
	u.confirmUSDT(t)
	require.Empty(t, u.alerts(t, withdrawal.AlertPaidAfterRefund, id), "not solidified yet")
	u.Node.MineBlocks(20)
	u.confirmUSDT(t)
	alerts := u.alerts(t, withdrawal.AlertPaidAfterRefund, id)
	require.Len(t, alerts, 1)
	require.Contains(t, alerts[0].Detail, txid)
	require.Equal(t, withdrawal.StatusRefunded, u.status(t, id))
	u.confirmUSDT(t)
	require.Len(t, u.alerts(t, withdrawal.AlertPaidAfterRefund, id), 1)
	require.Nil(t, u.row(t, id).RefundWatchUntil, "the watch ends with the alert")
}

// broadcastThenCancelled pays a BTC withdrawal's payout in a transaction
// that stays in the wallet, then has the processor forget it (marked back
// to AwaitingPayment by hand) and cancel the payout: the withdrawal is
// failed with its txid, the transaction still unconfirmed in the wallet.
func (e *env) broadcastThenCancelled(t *testing.T, user string, gross int64) (id, txid string) {
	t.Helper()
	e.fund(t, user, asset.BTC, 10_000_000)
	w, p := e.submit(t, user, asset.BTC, gross, p2wpkh(t, chain.Regtest, "cancelled after broadcast "+user))
	txid = e.broadcastPayout(t, p.ID, "")
	e.passTo(t, w.WithdrawalID, withdrawal.StatusBroadcast)
	require.NoError(t, e.Sim.UnmarkPayout(p.ID))
	require.NoError(t, e.Sim.CancelPayout(p.ID))
	e.pass(t)
	v := e.get(t, w.WithdrawalID)
	require.Equal(t, withdrawal.StatusFailed, v.Status)
	require.Equal(t, txid, *v.Txid)
	return w.WithdrawalID, txid
}

// TestBTCReleaseFollowsTheWallet: a BTC withdrawal whose payout the
// processor cancelled, but whose transaction the wallet still shows
// unconfirmed or confirmed, is not released (409); once the wallet shows
// the transaction replaced it is. The release is then watched: the
// transaction confirming after all (a reorganisation dropped its
// conflict) two weeks later raises withdrawal.paid_after_refund, with no
// webhook.
func TestBTCReleaseFollowsTheWallet(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id, txid := e.broadcastThenCancelled(t, "wc", 70_000)
	e.requireReleaseRefused(t, id, "is Unconfirmed in the wallet, not replaced")
	require.Equal(t, withdrawal.StatusFailed, e.status(t, id))

	require.NoError(t, e.Sim.ReplaceTransaction(txid))
	r := e.decide(id, "release", map[string]any{"attestation": "the wallet shows the transaction replaced by a conflicting one"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, "0.00000000", e.UserBalance(t, "wc", asset.BTC).Held)

	e.Clock.Advance(14*24*time.Hour - time.Hour)
	e.pass(t)
	require.Empty(t, e.alerts(t, withdrawal.AlertPaidAfterRefund, id))
	require.NoError(t, e.Sim.ConfirmTransaction(txid, 1))
	e.pass(t)
	alerts := e.alerts(t, withdrawal.AlertPaidAfterRefund, id)
	require.Len(t, alerts, 1)
	require.Contains(t, alerts[0].Detail, "transaction "+txid+" is now confirmed")
	require.Equal(t, withdrawal.StatusRefunded, e.status(t, id))

	// Confirmed in the wallet: refused too.
	id2, txid2 := e.broadcastThenCancelled(t, "wd", 80_000)
	require.NoError(t, e.Sim.ConfirmTransaction(txid2, 1))
	e.requireReleaseRefused(t, id2, "is confirmed in the wallet (1 confirmations), so the money has left")
	require.Equal(t, "0.00080000", e.UserBalance(t, "wd", asset.BTC).Held)
}

// TestReleaseStuckSubmission: a withdrawal the processor keeps refusing
// stays submitting; while a submitter's claim or its retry wait is live a
// release is refused, and once it has lapsed and the processor lists no
// live payout for it, it is released with an attestation, and never
// submitted again. One whose payout exists (the answer was lost) is
// refused, naming the payout, and then adopted.
func TestReleaseStuckSubmission(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "we", asset.BTC, 10_000_000)
	w := e.create(t, "we", asset.BTC, 100_000, p2wpkh(t, chain.Regtest, "stuck"))
	real := e.Svc.Processor
	e.Svc.Processor = forbidden{real}
	e.passTo(t, w.WithdrawalID, withdrawal.StatusSubmitting)
	e.requireReleaseRefused(t, w.WithdrawalID, "being handed to the processor")

	e.Clock.Advance(5 * time.Minute)
	r := e.decide(w.WithdrawalID, "release", map[string]any{"attestation": "the processor refuses every payout of it; none exists"})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	adm := e.admin(t, w.WithdrawalID)
	require.Equal(t, "refunded", adm["status"])
	require.Equal(t, "0.00000000", e.UserBalance(t, "we", asset.BTC).Held)
	e.Svc.Processor = real
	e.Clock.Advance(time.Hour)
	e.passTo(t, w.WithdrawalID, withdrawal.StatusRefunded)
	require.Empty(t, e.payoutsOf(w.WithdrawalID))

	// A payout was created but the answer lost: refused while it is live.
	w2 := e.create(t, "we", asset.BTC, 90_000, p2wpkh(t, chain.Regtest, "answer lost"))
	e.Sim.FailNext(1, btcpaysim.DownDropAfter)
	e.passTo(t, w2.WithdrawalID, withdrawal.StatusSubmitting)
	p := e.onePayout(t, w2.WithdrawalID)
	e.Clock.Advance(5 * time.Minute)
	e.requireReleaseRefused(t, w2.WithdrawalID, "payout "+p.ID+" is AwaitingPayment at the processor")
	e.passTo(t, w2.WithdrawalID, withdrawal.StatusSubmitted)
}

// TestReleaseReadsOnlyItsPayout: releasing a withdrawal submitted in one
// attempt reads its recorded payout, not the store's payout list.
func TestReleaseReadsOnlyItsPayout(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "wf", asset.BTC, 10_000_000)
	w, p := e.submit(t, "wf", asset.BTC, 60_000, p2wpkh(t, chain.Regtest, "one attempt"))
	require.NoError(t, e.Sim.CancelPayout(p.ID))
	e.passTo(t, w.WithdrawalID, withdrawal.StatusFailed)
	before := e.Sim.PayoutListings()
	r := e.decide(w.WithdrawalID, "release", map[string]any{"attestation": att})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, before, e.Sim.PayoutListings(), "no payout list read")
}

package withdrawal_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/modules/withdrawal"
	"svc/platform/btcpay"
	"svc/platform/chain"
)

// TestLatePayoutAfterReleaseFromSubmitting: a withdrawal released while
// still submitting (its claim lapsed, the processor listed no payout) is
// watched all the same: a create call of its attempt that reaches the
// processor only after the release (a stalled submitter) makes a payout
// the processor would pay, and the next pass raises
// withdrawal.paid_after_refund once, naming it, with no webhook. A
// release with no late payout ends its watch after RefundWatch.
func TestLatePayoutAfterReleaseFromSubmitting(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	e.fund(t, "lp", asset.BTC, 10_000_000)
	dest := p2wpkh(t, chain.Regtest, "late payout")
	w := e.create(t, "lp", asset.BTC, 100_000, dest)
	quiet := e.create(t, "lp", asset.BTC, 50_000, p2wpkh(t, chain.Regtest, "no late payout"))
	real := e.Svc.Processor
	e.Svc.Processor = forbidden{real}
	e.pass(t)
	require.Equal(t, withdrawal.StatusSubmitting, e.status(t, w.WithdrawalID))
	require.Equal(t, withdrawal.StatusSubmitting, e.status(t, quiet.WithdrawalID))
	e.Clock.Advance(5 * time.Minute)
	for _, id := range []string{w.WithdrawalID, quiet.WithdrawalID} {
		r := e.decide(id, "release", map[string]any{"attestation": "the processor lists no payout of it"})
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		require.NotNil(t, e.row(t, id).RefundWatchUntil, "released after an attempt: watched")
	}
	require.Equal(t, "0.00000000", e.UserBalance(t, "lp", asset.BTC).Held)
	e.Svc.Processor = real

	// The stalled attempt's create call lands now.
	net := *e.row(t, w.WithdrawalID).AmountNet
	amount := btcpay.AmountFromUnits(net, 8)
	p, err := real.CreatePayout(ctx, btcpay.CreatePayoutParams{WithdrawalID: w.WithdrawalID, Destination: dest,
		Amount: &amount, PayoutMethodID: btcpay.MethodBTCChain, Approved: true})
	require.NoError(t, err)
	e.pass(t)
	alerts := e.alerts(t, withdrawal.AlertPaidAfterRefund, w.WithdrawalID)
	require.Len(t, alerts, 1)
	require.Contains(t, alerts[0].Detail, "payout "+p.ID+", made for it at the processor after the release was checked, is AwaitingPayment")
	require.Equal(t, withdrawal.StatusRefunded, e.status(t, w.WithdrawalID))
	require.Nil(t, e.row(t, w.WithdrawalID).RefundWatchUntil, "the alert ends the watch")
	e.pass(t)
	require.Len(t, e.alerts(t, withdrawal.AlertPaidAfterRefund, w.WithdrawalID), 1)

	require.Empty(t, e.alerts(t, withdrawal.AlertPaidAfterRefund, quiet.WithdrawalID))
	e.Clock.Advance(withdrawal.RefundWatch + time.Hour)
	e.pass(t)
	require.Nil(t, e.row(t, quiet.WithdrawalID).RefundWatchUntil, "the watch ran out")
	require.Empty(t, e.alerts(t, withdrawal.AlertPaidAfterRefund, quiet.WithdrawalID))
}

// TestRefundWatchOutlastsAnHTLC: the watch after a release is longer than
// the longest a Lightning payment can stay in flight, as
// docs/withdrawals.md says, so a payment still pending at the release is
// seen if it settles.
func TestRefundWatchOutlastsAnHTLC(t *testing.T) {
	t.Parallel()
	require.Greater(t, withdrawal.RefundWatch, withdrawal.MaxHTLCLife)
}

package withdrawal_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"svc/platform/btcpay/btcpaysim"
)

// submit creates a withdrawal (auto-approved: the caller has funded the
// user), runs one payout pass, and returns it with its one payout at the
// processor.
func (e *env) submit(t testing.TB, user, code string, units int64, dest string) (created, btcpaysim.PayoutInfo) {
	t.Helper()
	w := e.create(t, user, code, units, dest)
	e.pass(t)
	return w, e.onePayout(t, w.WithdrawalID)
}

// broadcastPayout has the processor's wallet send a payout, in the
// transaction txid when it is set, and returns the transaction's id.
func (e *env) broadcastPayout(t testing.TB, payoutID, txid string) string {
	t.Helper()
	sent, err := e.Sim.BroadcastPayout(payoutID, txid)
	require.NoError(t, err)
	return sent
}

// completePayout has the processor complete a payout and returns its
// transaction id (or, on Lightning, its payment hash).
func (e *env) completePayout(t testing.TB, payoutID string) string {
	t.Helper()
	done, err := e.Sim.CompletePayout(payoutID, "")
	require.NoError(t, err)
	return done
}

// confirmCancelledPayout has the wallet confirm the transaction of a payout
// the processor had cancelled, and returns its id.
func (e *env) confirmCancelledPayout(t testing.TB, payoutID string) string {
	t.Helper()
	txid, err := e.Sim.ConfirmCancelledPayout(payoutID, "")
	require.NoError(t, err)
	return txid
}

package withdrawal_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/modules/withdrawal"
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

// passTo runs one payout pass and requires the withdrawal's status after
// it.
func (e *env) passTo(t testing.TB, id string, want withdrawal.Status, msgAndArgs ...any) {
	t.Helper()
	e.pass(t)
	require.Equal(t, want, e.status(t, id), msgAndArgs...)
}

// requireReleaseRefused asks for the release of a withdrawal's hold, with
// the usual attestation, and requires a 409 whose detail contains why.
func (e *env) requireReleaseRefused(t testing.TB, id, why string) {
	t.Helper()
	r := e.decide(id, "release", map[string]any{"attestation": att})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), why)
}

package deposit_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/deposit"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/config"
)

func (e *env) walletAlerts(t *testing.T, query string) []deposit.WalletAlertView {
	t.Helper()
	return adminList[deposit.WalletAlertView](t, e, "/v1/admin/wallet-alerts"+query, "alerts")
}

func (e *env) scan(t *testing.T) int {
	t.Helper()
	n, err := e.Svc.ScanWallet(context.Background())
	require.NoError(t, err)
	return n
}

// A BTC wallet receive that matches no deposit payment is recorded once;
// deposit payments, including one the service has not reconciled yet, are
// not alerts.
func TestWalletReceivesMatchingNoPaymentAreRecordedOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.Empty(t, e.walletAlerts(t, ""))

	// A deposit paid and reconciled, and one paid but not yet seen.
	seen := e.create(t, "ned", "BTC", nil)
	e.payDeposit(t, seen.DepositID, btcpaysim.PayParams{Amounts: []string{"0.001"}, Settled: true})
	e.reconcile(t, seen.DepositID)
	unseen := e.create(t, "ned", "BTC", nil)
	e.payDeposit(t, unseen.DepositID, btcpaysim.PayParams{Amounts: []string{"0.002"}, Settled: true})

	txid, _, err := e.Sim.ReceiveUnmatched("0.015", 2)
	require.NoError(t, err)
	require.Equal(t, 1, e.scan(t))
	require.Equal(t, 0, e.scan(t), "recorded once")
	require.Equal(t, deposit.StatusSettled, e.deposit(t, unseen.DepositID).Status, "the scan reconciled the labelled deposit")

	alerts := e.walletAlerts(t, "")
	require.Len(t, alerts, 1)
	a := alerts[0]
	require.Equal(t, "BTC", a.Asset)
	require.Equal(t, txid, a.Txid)
	require.Equal(t, "0.01500000", a.Amount)
	require.Equal(t, int64(2), *a.Confirmations)
	require.Nil(t, a.Note)

	// A payment past the invoice's monitoring window reaches the wallet but
	// no invoice: an alert.
	late := e.create(t, "ned", "BTC", nil)
	e.advance(61*time.Minute + 1441*time.Minute)
	_, err = e.Sim.Pay(e.invoice(t, late.DepositID).ID, btcpaysim.PayParams{Amounts: []string{"0.003"}})
	require.ErrorIs(t, err, btcpaysim.ErrNotWatched)
	require.Equal(t, 1, e.scan(t))
	alerts = e.walletAlerts(t, "")
	require.Len(t, alerts, 2)
	require.Equal(t, "0.00300000", alerts[0].Amount, "newest first")
	require.Len(t, e.walletAlerts(t, "?limit=1"), 1)
	for _, bad := range []string{"?limit=0", "?limit=201", "?limit=z"} {
		require.Equal(t, http.StatusUnprocessableEntity, e.AdminGet("/v1/admin/wallet-alerts"+bad).Status, bad)
	}
	require.Equal(t, http.StatusForbidden, e.Get("/v1/admin/wallet-alerts").Status)
}

// The periodic job runs the scan.
func TestWalletScanJob(t *testing.T) {
	t.Parallel()
	e := setup(t, withWorker(), withConfig(func(c *config.Config) { c.Worker.WalletScanEvery = time.Second }))
	txid, _, err := e.Sim.ReceiveUnmatched("0.0001", 0)
	require.NoError(t, err)
	apptest.Eventually(t, 30*time.Second, func() bool { return len(e.walletAlerts(t, "")) == 1 }, "the scan job records the receive")
	a := e.walletAlerts(t, "")[0]
	require.Equal(t, txid, a.Txid)
	require.Equal(t, int64(0), *a.Confirmations)
}

// TestWalletReceivePayingMoreThanItsDeposit: one transaction pays a tracked
// deposit and another of the service's addresses; matching by txid would
// hide the second output. Once confirmed, what the payments do not account
// for is a wallet alert, once.
func TestWalletReceivePayingMoreThanItsDeposit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "ola", "BTC", nil)
	paid := e.payDeposit(t, v.DepositID, btcpaysim.PayParams{Amounts: []string{"0.001"}})
	e.reconcile(t, v.DepositID)
	txid := strings.SplitN(paid[0].ID, "-", 2)[0]
	require.NoError(t, e.Sim.AddOutput(txid, "0.0025"))
	require.Equal(t, 0, e.scan(t), "not before it confirms: its payments may not all be recorded yet")
	require.NoError(t, e.Sim.ConfirmTransaction(txid, 1))
	require.Equal(t, 1, e.scan(t))
	require.Equal(t, 0, e.scan(t), "recorded once")
	alerts := e.walletAlerts(t, "")
	require.Len(t, alerts, 1)
	require.Equal(t, txid, alerts[0].Txid)
	require.Equal(t, "0.00250000", alerts[0].Amount)
	require.Contains(t, *alerts[0].Note, "arrived on no tracked deposit")

	// A transaction its payments account for exactly raises nothing.
	w := e.create(t, "ola", "BTC", nil)
	e.payDeposit(t, w.DepositID, btcpaysim.PayParams{Amounts: []string{"0.002"}, Settled: true})
	e.reconcile(t, w.DepositID)
	require.Equal(t, 0, e.scan(t))
}

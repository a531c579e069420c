package deposit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/deposit"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/config"
)

// settles waits until the deposit is settled (driven by webhooks or the
// poller, not by the test).
func (e *env) settles(t *testing.T, id string) deposit.View {
	t.Helper()
	var v deposit.View
	apptest.Eventually(t, 30*time.Second, func() bool {
		v = e.deposit(t, id)
		return v.Status == deposit.StatusSettled
	}, "deposit "+id+" settled")
	return v
}

// The processor's signed webhooks go through the ingress and its job to
// the reconcile: paying and confirming at the processor settles the
// deposit with no poll.
func TestWebhooksSettleADeposit(t *testing.T) {
	t.Parallel()
	e := setup(t, withWebhooks())
	v := e.create(t, "hugo", "BTC", units("120000"))
	inv := e.invoice(t, v.DepositID)
	paid := e.pay(t, inv.ID, btcpaysim.PayParams{})
	apptest.Eventually(t, 30*time.Second, func() bool {
		return e.deposit(t, v.DepositID).Status == deposit.StatusConfirming
	}, "confirming after InvoiceReceivedPayment")
	require.NoError(t, e.Sim.ConfirmPayment(inv.ID, paid[0].ID))
	v = e.settles(t, v.DepositID)
	require.Equal(t, "0.00120000", v.AmountCredited)
	require.Equal(t, 1, e.ledgerEntries(t, v.DepositID))
	require.Len(t, e.events(t, "deposit.settled", v.DepositID), 1)
}

// Every webhook sent twice, byte for byte, and redelivered: one credit.
func TestDuplicatedWebhooksCreditOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, withWebhooks())
	e.Sim.DuplicateWebhooks(true)
	v := e.create(t, "iris", "BTC", units("10000"))
	e.payDeposit(t, v.DepositID, btcpaysim.PayParams{Settled: true})
	v = e.settles(t, v.DepositID)
	for _, d := range e.Sim.Deliveries() {
		_, err := e.Sim.Redeliver(d.ID)
		require.NoError(t, err)
	}
	apptest.Eventually(t, 30*time.Second, func() bool { return e.Sim.PendingWebhooks() == 0 }, "redeliveries sent")
	e.waitIngressIdle(t)
	require.Equal(t, 1, e.ledgerEntries(t, v.DepositID))
	require.Len(t, e.events(t, "deposit.settled", v.DepositID), 1)
	require.Len(t, e.events(t, "deposit.detected", v.DepositID), 1)
	require.Equal(t, "0.00010000", e.deposit(t, v.DepositID).AmountCredited)
}

// Webhooks held back and released in reverse order (settled before
// received): the reconcile reads the processor, so the order does not
// matter.
func TestReorderedWebhooks(t *testing.T) {
	t.Parallel()
	e := setup(t, withWebhooks())
	v := e.create(t, "jill", "BTC", units("30000"))
	inv := e.invoice(t, v.DepositID)
	e.Sim.HoldWebhooks()
	paid := e.pay(t, inv.ID, btcpaysim.PayParams{})
	require.NoError(t, e.Sim.ConfirmPayment(inv.ID, paid[0].ID))
	require.Equal(t, deposit.StatusPending, e.deposit(t, v.DepositID).Status, "nothing arrived yet")
	e.Sim.ReleaseWebhooks(true)
	v = e.settles(t, v.DepositID)
	require.Equal(t, 1, e.ledgerEntries(t, v.DepositID))
}

// Lost webhooks: nothing arrives, and the poller settles the deposit.
func TestLostWebhooksArePolled(t *testing.T) {
	t.Parallel()
	e := setup(t, withWorker(), withConfig(func(c *config.Config) { c.Worker.DepositPollEvery = time.Second }))
	// No webhook URL: the simulator sends nothing.
	v := e.create(t, "kurt", "BTC", units("40000"))
	e.payDeposit(t, v.DepositID, btcpaysim.PayParams{Settled: true})
	v = e.settles(t, v.DepositID)
	require.Equal(t, "0.00040000", v.AmountCredited)

	// The periodic job also expires deposits with nothing received.
	w := e.create(t, "kurt", "BTC", nil)
	e.advance(61 * time.Minute)
	apptest.Eventually(t, 30*time.Second, func() bool {
		return e.deposit(t, w.DepositID).Status == deposit.StatusExpired
	}, "expired by the poller")
}

// waitIngressIdle waits until every stored processor webhook is processed.
func (e *env) waitIngressIdle(t *testing.T) {
	t.Helper()
	apptest.Eventually(t, 30*time.Second, func() bool {
		n, err := e.App.DB.Bun.NewSelect().Table("processor_webhooks").Where("processed_at IS NULL").Count(context.Background())
		require.NoError(t, err)
		return n == 0
	}, "every processor webhook processed")
}

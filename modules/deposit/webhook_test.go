package deposit_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/deposit"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/config"
	"svc/platform/dbtest"
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

// A webhook is marked processed by the transaction that settles its
// deposit, in its commit: while that transaction fails (here: the events'
// table refuses every row, so the settlement rolls back) the webhooks stay
// unprocessed, with their failures recorded, and nothing is credited;
// once it commits, the delivery it handled is written by that very
// transaction (same xmin as the credit's ledger entry).
func TestASettlementRolledBackLeavesItsWebhooksUnprocessed(t *testing.T) {
	t.Parallel()
	e := setup(t, withWebhooks(), withConfig(func(c *config.Config) { c.Worker.DepositPollEvery = time.Hour }))
	ctx := context.Background()
	owner, err := sql.Open("pgx", dbtest.OwnerURL(e.App.Cfg.Database.URL))
	require.NoError(t, err)
	t.Cleanup(func() { _ = owner.Close() })
	_, err = owner.ExecContext(ctx, "ALTER TABLE outbound_events ADD CONSTRAINT test_refuses_events CHECK (false) NOT VALID")
	require.NoError(t, err)

	// The poll the worker runs at its start settles nothing here: the
	// webhooks do.
	apptest.Eventually(t, 30*time.Second, func() bool {
		n, err := e.App.DB.Bun.NewSelect().Table("river_job").Where("kind = ? AND state = 'completed'", deposit.PollArgs{}.Kind()).Count(ctx)
		require.NoError(t, err)
		return n > 0
	}, "the worker's first poll done")
	v := e.create(t, "lena", "BTC", units("30000"))
	e.payDeposit(t, v.DepositID, btcpaysim.PayParams{Settled: true})
	type row struct {
		ID          int64      `bun:"id"`
		ProcessedAt *time.Time `bun:"processed_at"`
		LastError   *string    `bun:"last_error"`
		Xmin        string     `bun:"xmin"`
	}
	deliveries := func() []row {
		var rows []row
		require.NoError(t, e.App.DB.Bun.NewRaw("SELECT id, processed_at, last_error, xmin::text AS xmin FROM processor_webhooks ORDER BY id").Scan(ctx, &rows))
		return rows
	}
	// A delivery handled before the payment shows at the processor has
	// nothing to write but the poll time, and is processed; the one whose
	// reconcile finds the payment fails with the events' table.
	apptest.Eventually(t, 30*time.Second, func() bool {
		for _, r := range deliveries() {
			if r.LastError != nil {
				return true
			}
		}
		return false
	}, "a settlement attempted and rolled back")
	require.Equal(t, deposit.StatusPending, e.deposit(t, v.DepositID).Status)
	require.Zero(t, e.ledgerEntries(t, v.DepositID))
	for _, r := range deliveries() {
		if r.LastError != nil {
			require.Nil(t, r.ProcessedAt, "delivery %d processed while its settlement rolled back (%s)", r.ID, *r.LastError)
		}
	}

	_, err = owner.ExecContext(ctx, "ALTER TABLE outbound_events DROP CONSTRAINT test_refuses_events")
	require.NoError(t, err)
	e.settles(t, v.DepositID) // the failed delivery's retry, on River's schedule
	e.waitIngressIdle(t)
	require.Equal(t, 1, e.ledgerEntries(t, v.DepositID))
	// The credit's entry is written once, by the settling transaction (the
	// deposit's row is written again by later webhooks' reconciles).
	var settledXmin string
	require.NoError(t, e.App.DB.Bun.NewRaw("SELECT xmin::text FROM ledger_entries WHERE source_ref LIKE ?", "deposit:"+v.DepositID+":%").Scan(ctx, &settledXmin))
	same := 0
	for _, r := range deliveries() {
		if r.Xmin == settledXmin {
			same++
		}
	}
	require.Positive(t, same, "the settling transaction marked the delivery it handled: entry %s, deliveries %+v", settledXmin, deliveries())
}

// A webhook whose handler adopts a creating deposit (the create's answer
// was lost) and then fails to reconcile the payment must stay unprocessed
// and be retried: ProcessedWith promises that a delivery is marked in the
// very commit of its effect, never before it. The adoption (issue ->
// transit -> write) commits before the reconcile that records and credits
// the payment, so it must not carry the mark: were it to, a failed
// reconcile would leave the delivery processed and nothing but the hourly
// poll would record the payment.
func TestAdoptionDoesNotMarkTheWebhookBeforeItsReconcile(t *testing.T) {
	t.Parallel()
	e := setup(t, withWebhooks(), withConfig(func(c *config.Config) { c.Worker.DepositPollEvery = time.Hour }))
	ctx := context.Background()
	owner, err := sql.Open("pgx", dbtest.OwnerURL(e.App.Cfg.Database.URL))
	require.NoError(t, err)
	t.Cleanup(func() { _ = owner.Close() })
	apptest.Eventually(t, 30*time.Second, func() bool {
		n, err := e.App.DB.Bun.NewSelect().Table("river_job").Where("kind = ? AND state = 'completed'", deposit.PollArgs{}.Kind()).Count(ctx)
		require.NoError(t, err)
		return n > 0
	}, "the worker's first poll done")

	// The create's answer is lost: the deposit stays creating, its invoice
	// exists at the processor.
	// (The worker calls the processor too: the failure may hit one of its
	// calls, so the create is tried until it is the one that fails.)
	e.Sim.HoldWebhooks()
	var lost btcpaysim.InvoiceInfo
	for i := 0; lost.ID == "" && i < 20; i++ {
		e.Sim.FailNext(1, btcpaysim.DownDropAfter)
		r := e.Do(apptest.Req{Method: "POST", Path: "/v1/deposits", Idem: fmt.Sprint("adopt-hook-", i), Body: createBody{ExternalUserID: "otto", Asset: "BTC"}})
		if r.Status == 201 {
			continue
		}
		for _, inv := range e.Sim.Invoices() {
			if d := e.deposit(t, inv.OrderID); d.Status == "creating" {
				lost = inv
			}
		}
	}
	require.NotEmpty(t, lost.ID, "a creating deposit whose invoice exists")
	depositID := lost.OrderID
	e.pay(t, lost.ID, btcpaysim.PayParams{Amounts: []string{"0.0003"}, Settled: true})

	// The payment cannot be recorded for now: the reconcile after the
	// adoption fails.
	_, err = owner.ExecContext(ctx, "ALTER TABLE deposit_payments ADD CONSTRAINT test_refuses_payments CHECK (false) NOT VALID")
	require.NoError(t, err)
	e.Sim.ReleaseWebhooks(false)

	type row struct {
		ID          int64      `bun:"id"`
		ProcessedAt *time.Time `bun:"processed_at"`
		LastError   *string    `bun:"last_error"`
	}
	deliveries := func() []row {
		var rows []row
		require.NoError(t, e.App.DB.Bun.NewRaw("SELECT id, processed_at, last_error FROM processor_webhooks ORDER BY id").Scan(ctx, &rows))
		return rows
	}
	// Either a delivery's failure is recorded (it will be retried), or
	// every delivery is processed once the deposit was adopted.
	apptest.Eventually(t, 30*time.Second, func() bool {
		ds := deliveries()
		if len(ds) == 0 {
			return false
		}
		all := true
		for _, d := range ds {
			if d.LastError != nil {
				return true
			}
			all = all && d.ProcessedAt != nil
		}
		return all && e.deposit(t, depositID).Status == deposit.StatusPending
	}, "the webhooks handled")
	var payments int
	require.NoError(t, e.App.DB.Bun.NewRaw("SELECT count(*) FROM deposit_payments WHERE deposit_id = ?", depositID).Scan(ctx, &payments))
	require.Zero(t, payments, "the constraint refuses every payment")
	unprocessed := 0
	for _, d := range deliveries() {
		if d.ProcessedAt == nil {
			unprocessed++
		}
	}
	require.Positive(t, unprocessed, "every webhook is processed although the payment it reports was never recorded: %+v", deliveries())

	_, err = owner.ExecContext(ctx, "ALTER TABLE deposit_payments DROP CONSTRAINT test_refuses_payments")
	require.NoError(t, err)
	e.settles(t, depositID) // the failed delivery's retry
}

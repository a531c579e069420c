package deposit_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/modules/deposit"
	"svc/modules/ingress"
	"svc/platform/btcpay"
	"svc/platform/btcpay/btcpaysim"
)

// pending -> review: a payment after expiry on a deposit the service had
// not yet seen expire. It is detected, and waits for an operator.
func TestPaymentAfterExpiryOnAPendingDeposit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "gus", "BTC", nil)
	e.advance(61 * time.Minute)
	e.payDeposit(t, v.DepositID, btcpaysim.PayParams{Amounts: []string{"0.0001"}, Settled: true})
	v = e.reconcileTo(t, v.DepositID, deposit.StatusReview)
	require.True(t, v.Payments[0].AfterExpiration)
	require.False(t, v.Payments[0].Credited)
	require.Len(t, e.events(t, "deposit.detected", v.DepositID), 1)
	require.Len(t, e.events(t, "deposit.review_required", v.DepositID), 1)
	require.Empty(t, e.events(t, "deposit.expired", v.DepositID), "something was received")
}

// An invoice marked invalid by hand: with nothing received the window is
// closed (expired); with a payment it needs an operator.
func TestInvoiceMarkedInvalidByHand(t *testing.T) {
	t.Parallel()
	e := setup(t)
	empty := e.create(t, "hal", "BTC", nil)
	require.NoError(t, e.Sim.MarkInvalid(e.invoice(t, empty.DepositID).ID))
	e.reconcileTo(t, empty.DepositID, deposit.StatusExpired)

	paid := e.create(t, "hal", "BTC", units("100000"))
	inv := e.invoice(t, paid.DepositID)
	e.pay(t, inv.ID, btcpaysim.PayParams{Amounts: []string{"0.0004"}})
	e.reconcileTo(t, paid.DepositID, deposit.StatusConfirming)
	require.NoError(t, e.Sim.MarkInvalid(inv.ID))
	e.reconcileTo(t, paid.DepositID, deposit.StatusReview)
	e.requireReviewReason(t, paid.DepositID, "marked invalid by hand")
}

// A payment first seen settled on an invoice marked invalid by hand while
// it confirmed is credited (each payment stands on its own) and the deposit goes
// to review for the mark, as when the payment had been seen before:
// crediting it as it is recorded does not hide it from the invoice's
// review, which looks at the payments as they stood before this
// reconcile's credits.
func TestSettledPaymentFirstSeenOnAnInvoiceMarkedInvalid(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "hal", "BTC", units("40000"))
	inv := e.invoice(t, v.DepositID)
	paid := e.pay(t, inv.ID, btcpaysim.PayParams{Amounts: []string{"0.0004"}})
	require.NoError(t, e.Sim.MarkInvalid(inv.ID))
	require.NoError(t, e.Sim.ConfirmPayment(inv.ID, paid[0].ID))
	v = e.reconcileTo(t, v.DepositID, deposit.StatusReview)
	e.requireReviewReason(t, v.DepositID, "marked invalid by hand")
	require.Equal(t, "0.00040000", v.AmountCredited)
	require.Equal(t, 1, e.ledgerEntries(t, v.DepositID))
}

// A payment replaced before it confirmed (RBF, double spend): it is never
// credited, and when the window closes with only invalid payments an
// operator looks.
func TestInvalidatedPaymentIsNeverCredited(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "ida", "BTC", units("20000"))
	inv := e.invoice(t, v.DepositID)
	paid := e.pay(t, inv.ID, btcpaysim.PayParams{})
	e.reconcileTo(t, v.DepositID, deposit.StatusConfirming)
	require.NoError(t, e.Sim.InvalidatePayment(inv.ID, paid[0].ID))
	v = e.reconcileTo(t, v.DepositID, deposit.StatusConfirming)
	require.False(t, v.Payments[0].Credited)
	e.advance(61 * time.Minute)
	v = e.reconcileTo(t, v.DepositID, deposit.StatusReview)
	require.Zero(t, e.ledgerEntries(t, v.DepositID))
	e.requireReviewReason(t, v.DepositID, "invalidated")
}

// Payments that never confirm before the processor stops monitoring the
// invoice (it becomes Invalid): review.
func TestPaymentsThatNeverConfirm(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "jon", "BTC", units("20000"))
	e.payDeposit(t, v.DepositID, btcpaysim.PayParams{})
	e.reconcileTo(t, v.DepositID, deposit.StatusConfirming)
	e.advance(61*time.Minute + 1440*time.Minute)
	v = e.reconcileTo(t, v.DepositID, deposit.StatusReview)
	e.requireReviewReason(t, v.DepositID, "did not confirm")
}

// A credited payment the processor later declares invalid stays credited
// (a credit is never reversed); the operator is told.
func TestCreditIsNeverReversed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "kai", "BTC", nil)
	inv := e.invoice(t, v.DepositID)
	paid := e.pay(t, inv.ID, btcpaysim.PayParams{Amounts: []string{"0.0003"}, Settled: true})
	e.reconcileTo(t, v.DepositID, deposit.StatusSettled)
	require.NoError(t, e.Sim.InvalidatePayment(inv.ID, paid[0].ID))
	v = e.reconcile(t, v.DepositID)
	require.True(t, v.Payments[0].Credited)
	require.Equal(t, "0.00030000", v.AmountCredited)
	require.Equal(t, []string{paid[0].ID}, e.alerts(t, deposit.AlertCreditedInvalidation))

	// The database refuses to un-credit a payment, whatever the code does.
	_, err := e.App.DB.Bun.ExecContext(context.Background(), "UPDATE deposit_payments SET credited = false, credited_at = NULL, ledger_entry_id = NULL WHERE payment_id = ?", paid[0].ID)
	require.Error(t, err)
	_, err = e.App.DB.Bun.ExecContext(context.Background(), "DELETE FROM deposit_payments WHERE payment_id = ?", paid[0].ID)
	require.Error(t, err)
}

// Money for a dismissed deposit is recorded and raised, never credited.
func TestPaymentAfterDismissalIsRaised(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v, _ := e.latePayment(t, "lea")
	require.Equal(t, 200, e.resolve(t, v.DepositID, resolveBody{Action: "dismiss"}).Status)
	e.payDeposit(t, v.DepositID, btcpaysim.PayParams{Amounts: []string{"0.0001"}, Settled: true})
	v = e.reconcileTo(t, v.DepositID, deposit.StatusDismissed)
	require.Len(t, v.Payments, 2)
	require.Equal(t, "0.00000000", v.AmountCredited)
	require.Equal(t, []string{v.DepositID + ":" + v.Payments[1].PaymentID}, e.alerts(t, deposit.AlertPaymentAfterDismiss))

	// Acknowledged, and then another payment: it is raised too (one alert
	// per payment, not one per deposit ever).
	_, err := e.App.DB.Bun.ExecContext(context.Background(), "UPDATE operator_alerts SET acknowledged_at = now(), acknowledged_by = 'ops'")
	require.NoError(t, err)
	e.payDeposit(t, v.DepositID, btcpaysim.PayParams{Amounts: []string{"0.0002"}, Settled: true})
	v = e.reconcile(t, v.DepositID)
	require.Len(t, v.Payments, 3)
	require.ElementsMatch(t, []string{v.DepositID + ":" + v.Payments[1].PaymentID, v.DepositID + ":" + v.Payments[2].PaymentID},
		e.alerts(t, deposit.AlertPaymentAfterDismiss))
}

// The processor unreachable during a reconcile: an error (the ingress job
// and the poller retry), and nothing changes. The poll stops at the first
// deposit that finds the processor down, and fails with that error, so an
// outage is one failed job rather than a warning per open deposit.
func TestReconcileWhileTheProcessorIsDown(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "moe", "BTC", nil)
	e.payDeposit(t, v.DepositID, btcpaysim.PayParams{Amounts: []string{"0.0001"}, Settled: true})
	for i := 0; i < 20; i++ {
		e.create(t, "moe", "BTC", nil)
	}
	e.Sim.GoDown(btcpaysim.DownError)
	require.Error(t, e.Svc.Reconcile(context.Background(), uuid.MustParse(v.DepositID)))
	res, err := e.Svc.Poll(context.Background())
	require.ErrorIs(t, err, btcpay.ErrUnreachable)
	require.Equal(t, 21, res.Visited)
	require.Positive(t, res.Failed)
	require.LessOrEqual(t, res.Failed, 4, "no deposit is asked about once the processor is known down, beyond those already in flight")
	require.Equal(t, deposit.StatusPending, e.deposit(t, v.DepositID).Status)
	e.Sim.Up()
	e.reconcileTo(t, v.DepositID, deposit.StatusSettled)
}

// Invoice events for invoices that are no deposit are ignored; an event
// naming the deposit reconciles it.
func TestInvoiceEventsFromTheIngress(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	require.NoError(t, e.Svc.InvoiceEvent(ctx, ingress.InvoiceEvent{Type: "InvoiceSettled", InvoiceID: "not-ours", OrderID: "order-7"}))
	require.NoError(t, e.Svc.InvoiceEvent(ctx, ingress.InvoiceEvent{Type: "InvoiceSettled", InvoiceID: "not-ours", OrderID: uuid.NewString()}))
	v := e.create(t, "ned", "BTC", nil)
	inv := e.invoice(t, v.DepositID)
	e.pay(t, inv.ID, btcpaysim.PayParams{Amounts: []string{"0.0001"}, Settled: true})
	// An invoice that carries the deposit's orderId but is not its invoice
	// changes nothing.
	require.NoError(t, e.Svc.InvoiceEvent(ctx, ingress.InvoiceEvent{Type: "InvoiceSettled", InvoiceID: "another", OrderID: v.DepositID}))
	require.Equal(t, deposit.StatusPending, e.deposit(t, v.DepositID).Status)
	require.NoError(t, e.Svc.InvoiceEvent(ctx, ingress.InvoiceEvent{Type: "InvoiceSettled", InvoiceID: inv.ID}))
	require.Equal(t, deposit.StatusSettled, e.deposit(t, v.DepositID).Status)
}

// The poller visits open deposits and those the processor still monitors,
// and nothing else.
func TestPollVisitsOpenAndMonitoredDeposits(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	poll := func() int {
		t.Helper()
		res, err := e.Svc.Poll(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Failed)
		return res.Visited
	}
	settled := e.create(t, "ona", "BTC", nil)
	e.payDeposit(t, settled.DepositID, btcpaysim.PayParams{Amounts: []string{"0.0001"}, Settled: true})
	e.create(t, "ona", "BTC", nil) // pending
	e.Sim.SetPaymentMethods("BTC-CHAIN")
	r := e.Post("/v1/deposits", createBody{ExternalUserID: "ona", Asset: "BTC_LN"}) // failed
	require.Equal(t, 502, r.Status)
	require.Equal(t, 2, poll(), "the pending one and the paid one")
	require.Equal(t, deposit.StatusSettled, e.deposit(t, settled.DepositID).Status)
	require.Equal(t, 2, poll(), "settled, still monitored by the processor")
	e.advance(61 * time.Minute)
	require.Equal(t, 2, poll(), "the pending one expires; both are still monitored")
	e.advance(1441 * time.Minute)
	require.Equal(t, 0, poll(), "monitoring over")
}

// TestPaymentRecordedUnderAnotherDeposit: a payment the processor reports
// under a second invoice while the service has it under another deposit is
// never recorded twice; the second deposit goes to review with the reason,
// one alert is raised, and every later reconcile carries on instead of
// failing.
func TestPaymentRecordedUnderAnotherDeposit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	a := e.create(t, "hal", "BTC", units("10000"))
	b := e.create(t, "ivy", "BTC", units("20000"))
	paid := e.payDeposit(t, b.DepositID, btcpaysim.PayParams{Settled: true})
	// The payment is already under deposit a (a processor mix-up).
	_, err := e.App.DB.Bun.ExecContext(ctx, `INSERT INTO deposit_payments (deposit_id, payment_id, amount, units, processor_status,
  received_at, after_expiration, created_at, updated_at) VALUES (?, ?, '0.0002', 20000, 'Processing', now(), false, now(), now())`,
		a.DepositID, paid[0].ID)
	require.NoError(t, err)
	v := e.reconcileTo(t, b.DepositID, deposit.StatusReview)
	require.Empty(t, v.Payments)
	require.Equal(t, []string{b.DepositID + ":" + paid[0].ID}, e.alerts(t, deposit.AlertPaymentClash))
	row, err := e.Svc.Get(ctx, uuid.MustParse(b.DepositID))
	require.NoError(t, err)
	require.Contains(t, *row.InvoiceReview, "already recorded under another deposit: payment "+paid[0].ID+" is recorded under deposit "+a.DepositID)
	v = e.reconcileTo(t, b.DepositID, deposit.StatusReview)
	require.Len(t, e.alerts(t, deposit.AlertPaymentClash), 1)
}

// TestPaymentRecordedUnderAnotherDepositMeanwhile: a payment credited as
// it is first seen is recorded after its posting; when another deposit
// records the same payment between the reconcile's read and that insert,
// the reconcile fails and leaves nothing (the posting rolled back with
// it), and the next one finds the clash: review, one alert, nothing
// credited.
func TestPaymentRecordedUnderAnotherDepositMeanwhile(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	a := e.create(t, "hal", "BTC", units("10000"))
	b := e.create(t, "ivy", "BTC", units("20000"))
	paid := e.payDeposit(t, b.DepositID, btcpaysim.PayParams{Settled: true})

	other, err := e.App.DB.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(ctx) }()
	_, err = other.Exec(ctx, `INSERT INTO deposit_payments (deposit_id, payment_id, amount, units, processor_status,
  received_at, after_expiration, created_at, updated_at) VALUES ($1, $2, '0.0002', 20000, 'Processing', now(), false, now(), now())`,
		a.DepositID, paid[0].ID)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- e.Svc.Reconcile(ctx, uuid.MustParse(b.DepositID)) }()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, e.App.DB.Pool.QueryRow(ctx,
			`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting))
		return waiting
	}, 10*time.Second, 5*time.Millisecond, "the reconcile's insert waits for the other deposit's")
	require.NoError(t, other.Commit(ctx))
	require.ErrorContains(t, <-done, "recorded meanwhile under another deposit")
	require.Zero(t, e.ledgerEntries(t, b.DepositID))
	require.Empty(t, e.alerts(t, deposit.AlertPaymentClash))

	v := e.reconcileTo(t, b.DepositID, deposit.StatusReview)
	require.Empty(t, v.Payments)
	require.Zero(t, e.ledgerEntries(t, b.DepositID))
	require.Equal(t, []string{b.DepositID + ":" + paid[0].ID}, e.alerts(t, deposit.AlertPaymentClash))
}

// TestPaymentToAnotherInvoiceOfTheDeposit: a creation whose processor call
// timed out can leave a second invoice carrying the deposit's orderId.
// Money paid to it is not ignored: its webhook records the payment under
// the deposit, never credited by itself; the deposit goes to review with
// one alert however often the webhook comes; the operator's credit finds
// the payment on that invoice and credits what the processor says it is
// worth, once. An invoice with another orderId changes nothing.
func TestPaymentToAnotherInvoiceOfTheDeposit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	v := e.create(t, "kai", "BTC", units("10000"))
	other, err := e.Svc.Processor.CreateInvoice(ctx, btcpay.CreateInvoiceParams{OrderID: v.DepositID, Currency: "BTC",
		PaymentMethod: btcpay.MethodBTCChain, ExpirationMinutes: 60, MonitoringMinutes: 1440})
	require.NoError(t, err)
	row, err := e.Svc.Get(ctx, uuid.MustParse(v.DepositID))
	require.NoError(t, err)
	require.NotEqual(t, *row.InvoiceID, other.ID)
	paid := e.pay(t, other.ID, btcpaysim.PayParams{Amounts: []string{"0.00012"}, Settled: true})
	event := ingress.InvoiceEvent{Type: "InvoiceSettled", InvoiceID: other.ID, OrderID: v.DepositID}
	for range 2 {
		require.NoError(t, e.Svc.InvoiceEvent(ctx, event))
	}
	v = e.deposit(t, v.DepositID)
	require.Equal(t, deposit.StatusReview, v.Status)
	require.Len(t, v.Payments, 1)
	require.Equal(t, paid[0].ID, v.Payments[0].PaymentID)
	require.Equal(t, []string{v.DepositID + ":" + paid[0].ID}, e.alerts(t, deposit.AlertOtherInvoice))
	require.Zero(t, e.ledgerEntries(t, v.DepositID), "nothing credited by itself")
	// The deposit's own reconcile leaves it as it is.
	e.reconcileTo(t, v.DepositID, deposit.StatusReview)

	r := e.resolve(t, v.DepositID, map[string]any{"action": "credit", "payment_id": paid[0].ID})
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.Equal(t, 1, e.ledgerEntries(t, v.DepositID))
	bal := e.Get("/v1/users/kai/balances").Map(t)
	require.Contains(t, fmt.Sprint(bal), "available:0.00012000", "credited what the processor says the payment is worth")
	e.requireBooks(t)

	// Another orderId: not this deposit's.
	w := e.create(t, "kai", "BTC", units("10000"))
	stray, err := e.Svc.Processor.CreateInvoice(ctx, btcpay.CreateInvoiceParams{OrderID: "not-a-deposit", Currency: "BTC",
		PaymentMethod: btcpay.MethodBTCChain, ExpirationMinutes: 60, MonitoringMinutes: 1440})
	require.NoError(t, err)
	e.pay(t, stray.ID, btcpaysim.PayParams{Amounts: []string{"0.0001"}, Settled: true})
	require.NoError(t, e.Svc.InvoiceEvent(ctx, ingress.InvoiceEvent{Type: "InvoiceSettled", InvoiceID: stray.ID, OrderID: w.DepositID}))
	require.Equal(t, deposit.StatusPending, e.deposit(t, w.DepositID).Status)
}

// TestPaymentThroughAnotherMethod: money paid to a BTC deposit's invoice
// through Lightning is not this deposit's to credit: one operator alert per
// payment, however often it is seen, and nothing credited.
func TestPaymentThroughAnotherMethod(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "jon", "BTC", units("10000"))
	inv := e.invoice(t, v.DepositID)
	require.NoError(t, e.Sim.OfferMethod(inv.ID, btcpay.MethodBTCLN))
	e.pay(t, inv.ID, btcpaysim.PayParams{Method: btcpay.MethodBTCLN, Settled: true})
	v = e.reconcile(t, v.DepositID)
	require.Empty(t, v.Payments)
	got := e.alerts(t, deposit.AlertOtherMethod)
	require.Len(t, got, 1)
	require.Contains(t, got[0], v.DepositID+":")
	v = e.reconcile(t, v.DepositID)
	require.Empty(t, v.Payments)
	require.Len(t, e.alerts(t, deposit.AlertOtherMethod), 1)
}

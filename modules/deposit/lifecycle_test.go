package deposit_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/modules/deposit"
	"svc/platform/btcpay"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
)

// creating -> pending: a fresh address per request, the invoice carries
// the deposit id as orderId, the intent committed first.
func TestCreateIssuesAFreshAddressPerDeposit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.create(t, "alice", "BTC", units("150000"))
	b := e.create(t, "alice", "BTC", nil)

	for _, v := range []deposit.View{a, b} {
		require.Equal(t, deposit.StatusPending, v.Status)
		require.NotNil(t, v.Address)
		_, err := chain.Regtest.ParseBTCAddress(*v.Address)
		require.NoError(t, err, "a valid regtest address")
		require.NotNil(t, v.CheckoutLink)
		require.NotNil(t, v.ExpiresAt)
		require.Nil(t, v.AddressReservedUntil, "not a pooled asset")
		require.Equal(t, "0.00000000", v.AmountCredited)
		require.Empty(t, v.Payments)
		inv := e.invoice(t, v.DepositID)
		require.Equal(t, *v.Address, inv.Destination)
		require.Equal(t, btcpay.MethodBTCChain, inv.Method)
	}
	require.NotEqual(t, *a.Address, *b.Address, "no permanent per-user address")
	require.Equal(t, "0.00150000", *a.AmountExpected)
	require.Nil(t, b.AmountExpected)
	require.Equal(t, "0.00150000", e.invoice(t, a.DepositID).Amount)
	exp, err := time.Parse(time.RFC3339, *a.ExpiresAt)
	require.NoError(t, err)
	require.WithinDuration(t, e.Clock.Now().Add(60*time.Minute), exp, time.Second, "DEPOSIT_EXPIRATION_MINUTES")

	require.Equal(t, a, e.deposit(t, a.DepositID), "GET returns what creation returned")
}

// pending -> confirming (deposit.detected) -> settled (deposit.settled),
// credited once with resolved_by auto.
func TestOnChainPaymentIsDetectedConfirmedAndCreditedOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "bob", "BTC", units("100000"))
	inv := e.invoice(t, v.DepositID)

	paid := e.pay(t, inv.ID, btcpaysim.PayParams{})
	v = e.reconcileTo(t, v.DepositID, deposit.StatusConfirming)
	require.Len(t, v.Payments, 1)
	p := v.Payments[0]
	require.Equal(t, paid[0].ID, p.PaymentID)
	require.Equal(t, "0.00100000", p.Amount)
	require.False(t, p.Credited, "visible, not in the balance while it confirms")
	require.Nil(t, p.CreditedAt)
	require.Nil(t, p.ResolvedBy)
	require.False(t, p.AfterExpiration)
	detected := e.events(t, "deposit.detected", v.DepositID)
	require.Len(t, detected, 1)
	require.Equal(t, "confirming", detected[0]["status"])
	require.Equal(t, p.PaymentID, detected[0]["payment_id"])
	require.Equal(t, "0.00100000", detected[0]["amount"])

	require.NoError(t, e.Sim.ConfirmPayment(inv.ID, paid[0].ID))
	for range 3 { // reconciling again changes nothing
		v = e.reconcile(t, v.DepositID)
	}
	require.Equal(t, deposit.StatusSettled, v.Status)
	require.Equal(t, "0.00100000", v.AmountCredited)
	p = v.Payments[0]
	require.True(t, p.Credited)
	require.NotNil(t, p.CreditedAt)
	require.Equal(t, "auto", *p.ResolvedBy)
	require.Equal(t, 1, e.ledgerEntries(t, v.DepositID))
	settled := e.events(t, "deposit.settled", v.DepositID)
	require.Len(t, settled, 1)
	require.Equal(t, map[string]any{"deposit_id": v.DepositID, "external_user_id": "bob", "asset": "BTC",
		"status": "settled", "amount_credited": "0.00100000", "metadata": map[string]any{}, "client_reference": nil,
		"platform_account": nil}, settled[0])
	require.Len(t, e.events(t, "deposit.detected", v.DepositID), 1)

	r := e.Get("/v1/users/bob/transactions")
	require.Equal(t, http.StatusOK, r.Status)
	var txs struct {
		Transactions []struct {
			Kind, Amount, Direction string
			SourceRef               *string `json:"source_ref"`
		} `json:"transactions"`
	}
	r.JSON(t, &txs)
	require.Len(t, txs.Transactions, 1)
	require.Equal(t, "deposit_credit", txs.Transactions[0].Kind)
	require.Equal(t, "0.00100000", txs.Transactions[0].Amount)
	require.Equal(t, "credit", txs.Transactions[0].Direction)
	require.Contains(t, *txs.Transactions[0].SourceRef, p.PaymentID)
}

// Two payments to one invoice are two rows, each credited on its own when
// it confirms; the deposit settles once both are in.
func TestTwoPaymentsAreCreditedIndependently(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "carol", "BTC", units("300000"))
	inv := e.invoice(t, v.DepositID)
	paid := e.pay(t, inv.ID, btcpaysim.PayParams{Amounts: []string{"0.001", "0.002"}})
	require.Len(t, paid, 2)

	v = e.reconcileTo(t, v.DepositID, deposit.StatusConfirming)
	require.Len(t, v.Payments, 2)

	require.NoError(t, e.Sim.ConfirmPayment(inv.ID, paid[1].ID))
	v = e.reconcileTo(t, v.DepositID, deposit.StatusConfirming, "one payment still confirms")
	require.Equal(t, "0.00200000", v.AmountCredited)
	byID := map[string]deposit.PaymentView{}
	for _, p := range v.Payments {
		byID[p.PaymentID] = p
	}
	require.True(t, byID[paid[1].ID].Credited)
	require.False(t, byID[paid[0].ID].Credited)

	require.NoError(t, e.Sim.ConfirmPayment(inv.ID, paid[0].ID))
	v = e.reconcileTo(t, v.DepositID, deposit.StatusSettled)
	require.Equal(t, "0.00300000", v.AmountCredited)
	require.Equal(t, 2, e.ledgerEntries(t, v.DepositID), "one ledger entry per payment")
	require.Len(t, e.events(t, "deposit.settled", v.DepositID), 1)
}

// BTC_LN: the address is a BOLT11 invoice for the deployment's network; it
// can be paid once, and it settles at once.
func TestLightningInvoiceIsPaidOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "dave", "BTC_LN", units("25000"))
	require.NotNil(t, v.Address)
	require.True(t, strings.HasPrefix(*v.Address, "lnbcrt"), *v.Address)
	inv, err := chain.Regtest.DecodeBOLT11(*v.Address)
	require.NoError(t, err)
	require.Equal(t, int64(25000), inv.AmountSat)

	sim := e.invoice(t, v.DepositID)
	e.pay(t, sim.ID, btcpaysim.PayParams{})
	_, err = e.Sim.Pay(sim.ID, btcpaysim.PayParams{})
	require.ErrorIs(t, err, btcpaysim.ErrNotWatched, "a BOLT11 is paid exactly once")

	v = e.reconcileTo(t, v.DepositID, deposit.StatusSettled)
	require.Equal(t, "0.00025000", v.AmountCredited)
	require.Len(t, v.Payments, 1)
	require.Len(t, e.events(t, "deposit.detected", v.DepositID), 1)
	require.Len(t, e.events(t, "deposit.settled", v.DepositID), 1)
}

// pending -> expired (deposit.expired) when the window closes with nothing
// received.
func TestDepositExpiresWithNothingReceived(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "erin", "BTC", nil)
	e.advance(61 * time.Minute)
	v = e.reconcileTo(t, v.DepositID, deposit.StatusExpired)
	require.Equal(t, []map[string]any{{"deposit_id": v.DepositID, "external_user_id": "erin", "asset": "BTC", "status": "expired",
		"metadata": map[string]any{}, "client_reference": nil, "platform_account": nil}},
		e.events(t, "deposit.expired", v.DepositID))
	v = e.reconcile(t, v.DepositID)
	require.Len(t, e.events(t, "deposit.expired", v.DepositID), 1)
}

// An invoice the processor expires before its time: the deposit reads
// expired with the time it really closed, not the original expires_at.
func TestDepositExpiredEarlyShowsWhen(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "erin", "BTC", nil)
	e.advance(10 * time.Minute)
	require.NoError(t, e.Sim.Expire(e.invoice(t, v.DepositID).ID))
	v = e.reconcileTo(t, v.DepositID, deposit.StatusExpired)
	exp, err := time.Parse(time.RFC3339, *v.ExpiresAt)
	require.NoError(t, err)
	require.True(t, exp.Equal(e.Clock.Now()), "expires_at %s, now %s", exp, e.Clock.Now())
}

// The transition table is the SPEC's, row by row.
func TestTransitionTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		from    deposit.Status
		trigger deposit.Trigger
		to      deposit.Status
		event   string
	}{
		{deposit.StatusCreating, deposit.AddressIssued, deposit.StatusPending, ""},
		{deposit.StatusCreating, deposit.ProcessorRefused, deposit.StatusFailed, ""},
		{deposit.StatusPending, deposit.PaymentSeen, deposit.StatusConfirming, "deposit.detected"},
		{deposit.StatusConfirming, deposit.PaymentConfirmed, deposit.StatusSettled, "deposit.settled"},
		{deposit.StatusPending, deposit.WindowClosed, deposit.StatusExpired, "deposit.expired"},
		{deposit.StatusSettled, deposit.LaterPayment, deposit.StatusReview, "deposit.review_required"},
		{deposit.StatusExpired, deposit.LaterPayment, deposit.StatusReview, "deposit.review_required"},
		{deposit.StatusPending, deposit.NeedsReview, deposit.StatusReview, "deposit.review_required"},
		{deposit.StatusConfirming, deposit.NeedsReview, deposit.StatusReview, "deposit.review_required"},
		{deposit.StatusSettled, deposit.NeedsReview, deposit.StatusReview, "deposit.review_required"},
		{deposit.StatusExpired, deposit.NeedsReview, deposit.StatusReview, "deposit.review_required"},
		{deposit.StatusReview, deposit.NeedsReview, deposit.StatusReview, ""},
		{deposit.StatusReview, deposit.ResolveCredit, deposit.StatusSettled, "deposit.settled"},
		{deposit.StatusReview, deposit.ResolveDismiss, deposit.StatusDismissed, ""},
	}
	for _, tt := range tests {
		tr, err := deposit.Next(tt.from, tt.trigger)
		require.NoError(t, err, "%s --%s-->", tt.from, tt.trigger)
		require.Equal(t, tt.to, tr.To)
		require.Equal(t, tt.event, string(tr.Event))
	}
	for _, illegal := range []struct {
		from    deposit.Status
		trigger deposit.Trigger
	}{
		{deposit.StatusSettled, deposit.ResolveCredit},
		{deposit.StatusDismissed, deposit.NeedsReview},
		{deposit.StatusFailed, deposit.AddressIssued},
		{deposit.StatusConfirming, deposit.WindowClosed},
		{deposit.StatusPending, deposit.ResolveDismiss},
		{deposit.StatusCreating, deposit.PaymentSeen},
	} {
		_, err := deposit.Next(illegal.from, illegal.trigger)
		require.ErrorIs(t, err, deposit.ErrIllegalTransition, "%s --%s-->", illegal.from, illegal.trigger)
	}
}

// Concurrent reconciles of one deposit (webhooks, the poller) credit its
// payment exactly once.
func TestConcurrentReconcilesCreditOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "frank", "BTC", nil)
	inv := e.invoice(t, v.DepositID)
	e.pay(t, inv.ID, btcpaysim.PayParams{Amounts: []string{"0.0042"}, Settled: true})
	id := uuid.MustParse(v.DepositID)
	errs := make(chan error, 16)
	for range 16 {
		go func() { errs <- e.Svc.Reconcile(context.Background(), id) }()
	}
	for range 16 {
		require.NoError(t, <-errs)
	}
	v = e.deposit(t, v.DepositID)
	require.Equal(t, deposit.StatusSettled, v.Status)
	require.Equal(t, "0.00420000", v.AmountCredited)
	require.Equal(t, 1, e.ledgerEntries(t, v.DepositID))
	require.Len(t, e.events(t, "deposit.settled", v.DepositID), 1)
	require.Len(t, e.events(t, "deposit.detected", v.DepositID), 1)
}

// A reconcile that waits for the deposit's lock reads the payments as the
// lock's holder left them: here the holder recorded the payment (still
// processing) and moved the deposit to confirming. The reconcile that ran
// meanwhile, its payments read after the lock, finds the payment recorded,
// credits it once and settles the deposit. Read before the lock (in the
// lock's own statement, whose snapshot predates the wait), the payment
// would be missing, and its insert would clash with the holder's row: the
// deposit in review for a clash with itself.
func TestReconcileWaitingForTheLockSeesThePaymentsOfItsHolder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	v := e.create(t, "grace", "BTC", nil)
	paid := e.payDeposit(t, v.DepositID, btcpaysim.PayParams{Amounts: []string{"0.0042"}, Settled: true})
	require.Len(t, paid, 1)
	id := uuid.MustParse(v.DepositID)

	holder, err := e.App.DB.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, "SELECT 1 FROM deposits WHERE id = $1 FOR UPDATE", id)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, "UPDATE deposits SET status = 'confirming', updated_at = now() WHERE id = $1", id)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, `INSERT INTO deposit_payments (deposit_id, payment_id, txid, amount, units, processor_status,
    received_at, after_expiration, created_at, updated_at)
  VALUES ($1, $2, $3, '0.00420000', 420000, 'Processing', now(), false, now(), now())`, id, paid[0].ID, paid[0].TxID)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { done <- e.Svc.Reconcile(ctx, id) }()
	var (
		ended bool
		early error
	)
	require.Eventually(t, func() bool {
		select {
		case early = <-done:
			ended = true
			return true
		default:
		}
		var waiting bool
		require.NoError(t, e.App.DB.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
  WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting))
		return waiting
	}, 10*time.Second, 5*time.Millisecond, "the reconcile waits for the deposit's lock")
	require.False(t, ended, "the reconcile ended while the lock was held: %v", early)
	require.NoError(t, holder.Commit(ctx))
	require.NoError(t, <-done)

	v = e.deposit(t, v.DepositID)
	require.Equal(t, deposit.StatusSettled, v.Status)
	require.Equal(t, "0.00420000", v.AmountCredited)
	require.Equal(t, 1, e.ledgerEntries(t, v.DepositID))
	require.Len(t, e.events(t, "deposit.settled", v.DepositID), 1)
}

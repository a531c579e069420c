package btcpay_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/platform/btcpay"
	"svc/platform/btcpay/btcpaysim"
)

// hookSink is a webhook receiver for tests.
type hookSink struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies [][]byte
	sigs   []string
	status int
}

func newHookSink(t *testing.T) *hookSink {
	h := &hookSink{status: http.StatusOK}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.bodies = append(h.bodies, b)
		h.sigs = append(h.sigs, r.Header.Get(btcpay.SignatureHeader))
		status := h.status
		h.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookSink) events(t *testing.T) []btcpay.WebhookEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]btcpay.WebhookEvent, 0, len(h.bodies))
	for _, b := range h.bodies {
		e, err := btcpay.ParseWebhookEvent(b)
		require.NoError(t, err)
		out = append(out, e)
	}
	return out
}

func (h *hookSink) types(t *testing.T, invoiceID string) []string {
	var out []string
	for _, e := range h.events(t) {
		if e.InvoiceID == invoiceID || (invoiceID == "" && e.PayoutID != "") {
			out = append(out, e.Type)
		}
	}
	return out
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// simulatedFlows drives the simulator through payments, expiries, marks
// and payouts, so that the responses carrying payments and proofs, and
// every webhook, are checked against the templates too.
func simulatedFlows(t *testing.T, tg target) {
	ctx := context.Background()
	c, sim := tg.client, tg.sim
	sink := newHookSink(t)
	const secret = "contract-secret"
	sim.SetWebhook(sink.srv.URL, secret)

	amt := btcpay.MustAmount("0.001")
	newInvoice := func(method, currency string, a *btcpay.Amount) btcpay.Invoice {
		inv, err := c.CreateInvoice(ctx, btcpay.CreateInvoiceParams{OrderID: uuid.NewString(), Amount: a, Currency: currency,
			PaymentMethod: method, ExpirationMinutes: 60, MonitoringMinutes: 1440, SpeedPolicy: btcpay.SpeedMedium})
		require.NoError(t, err)
		return inv
	}

	// On chain, two payments, then confirmations.
	paid := newInvoice(btcpay.MethodBTCChain, "BTC", &amt)
	pays, err := sim.Pay(paid.ID, btcpaysim.PayParams{Amounts: []string{"0.0004", "0.0006"}})
	require.NoError(t, err)
	require.Len(t, pays, 2)
	got, err := c.GetInvoice(ctx, paid.ID)
	require.NoError(t, err)
	require.Equal(t, btcpay.InvoiceProcessing, got.Status)
	pms, err := c.InvoicePaymentMethods(ctx, paid.ID, true)
	require.NoError(t, err)
	require.Len(t, pms[0].Payments, 2)
	require.Equal(t, btcpay.PaymentProcessing, pms[0].Payments[0].Status)
	require.Equal(t, pays[0].ID, pms[0].Payments[0].ID)
	require.NoError(t, sim.Confirm(paid.ID))
	got, err = c.GetInvoice(ctx, paid.ID)
	require.NoError(t, err)
	require.Equal(t, btcpay.InvoiceSettled, got.Status)

	// Paid after expiry: stays Expired, PaidLate.
	late := newInvoice(btcpay.MethodBTCChain, "BTC", &amt)
	require.NoError(t, sim.Expire(late.ID))
	_, err = sim.PayAmount(late.ID, "0.001")
	require.NoError(t, err)
	got, err = c.GetInvoice(ctx, late.ID)
	require.NoError(t, err)
	require.Equal(t, btcpay.InvoiceExpired, got.Status)
	require.Equal(t, btcpay.AdditionalPaidLate, got.AdditionalStatus)

	// Marked settled by hand, with nothing paid.
	marked := newInvoice(btcpay.MethodBTCChain, "BTC", &amt)
	require.NoError(t, sim.MarkSettled(marked.ID))
	got, err = c.GetInvoice(ctx, marked.ID)
	require.NoError(t, err)
	require.Equal(t, btcpay.InvoiceSettled, got.Status)
	require.Equal(t, btcpay.AdditionalMarked, got.AdditionalStatus)

	// A replaced payment is hidden unless asked for.
	replaced := newInvoice(btcpay.MethodBTCChain, "BTC", &amt)
	p, err := sim.PayAmount(replaced.ID, "0.001")
	require.NoError(t, err)
	require.NoError(t, sim.InvalidatePayment(replaced.ID, p.ID))
	pms, err = c.InvoicePaymentMethods(ctx, replaced.ID, true)
	require.NoError(t, err)
	require.Empty(t, pms[0].Payments)
	pms, err = c.InvoicePaymentMethods(ctx, replaced.ID, false)
	require.NoError(t, err)
	require.Len(t, pms[0].Payments, 1)
	require.Equal(t, btcpay.PaymentInvalid, pms[0].Payments[0].Status)

	// Lightning settles at once; USDT waits for confirmations.
	lnAmt := btcpay.MustAmount("0.00002")
	ln := newInvoice(btcpay.MethodBTCLN, "BTC", &lnAmt)
	_, err = sim.Pay(ln.ID, btcpaysim.PayParams{})
	require.NoError(t, err)
	got, err = c.GetInvoice(ctx, ln.ID)
	require.NoError(t, err)
	require.Equal(t, btcpay.InvoiceSettled, got.Status)
	usdtAmt := btcpay.MustAmount("25")
	usdt := newInvoice(btcpay.MethodUSDTTron, "USDt", &usdtAmt)
	_, err = sim.Pay(usdt.ID, btcpaysim.PayParams{})
	require.NoError(t, err)
	pms, err = c.InvoicePaymentMethods(ctx, usdt.ID, true)
	require.NoError(t, err)
	units, err := pms[0].Payments[0].Value.Units(6)
	require.NoError(t, err)
	require.EqualValues(t, 25_000_000, units)

	// Payouts through their states, with proofs.
	pamt := btcpay.MustAmount("0.0003")
	done, err := c.CreatePayout(ctx, btcpay.CreatePayoutParams{WithdrawalID: uuid.NewString(), Destination: freshAddress(t, tg.net),
		Amount: &pamt, PayoutMethodID: btcpay.MethodBTCChain, Approved: true})
	require.NoError(t, err)
	txid, err := sim.BroadcastPayout(done.ID, "")
	require.NoError(t, err)
	got2, err := c.GetPayout(ctx, done.ID)
	require.NoError(t, err)
	require.Equal(t, btcpay.PayoutInProgress, got2.State)
	require.Equal(t, txid, got2.PaymentProof.TxID())
	// The payouts the processor linked to the transaction; none for a
	// transaction the wallet has no object for.
	linked, err := c.TransactionPayoutIDs(ctx, txid)
	require.NoError(t, err)
	require.Equal(t, []string{done.ID}, linked)
	linked, err = c.TransactionPayoutIDs(ctx, strings.Repeat("ab", 32))
	require.NoError(t, err)
	require.Empty(t, linked)
	_, err = sim.CompletePayout(done.ID, "")
	require.NoError(t, err)
	got2, err = c.GetPayout(ctx, done.ID)
	require.NoError(t, err)
	require.Equal(t, btcpay.PayoutCompleted, got2.State)
	require.Equal(t, "PayoutTransactionOnChainBlob", got2.PaymentProof.ProofType)
	require.Equal(t, txid, got2.PaymentProof.TransactionID)

	lnDest := newInvoice(btcpay.MethodBTCLN, "BTC", &lnAmt)
	lpm, err := c.InvoicePaymentMethods(ctx, lnDest.ID, true)
	require.NoError(t, err)
	lnPayout, err := c.CreatePayout(ctx, btcpay.CreatePayoutParams{WithdrawalID: uuid.NewString(), Destination: lpm[0].Destination,
		PayoutMethodID: btcpay.MethodBTCLN, Approved: true})
	require.NoError(t, err)
	require.Zero(t, lnPayout.OriginalAmount.Cmp(lnAmt), "a BOLT11's amount becomes the payout's")
	hash, err := sim.CompletePayout(lnPayout.ID, "")
	require.NoError(t, err)
	got2, err = c.GetPayout(ctx, lnPayout.ID)
	require.NoError(t, err)
	require.Equal(t, "PayoutLightningBlob", got2.PaymentProof.ProofType)
	require.Equal(t, hash, got2.PaymentProof.PaymentHash)
	require.NotEmpty(t, got2.PaymentProof.Preimage)

	failed, err := c.CreatePayout(ctx, btcpay.CreatePayoutParams{WithdrawalID: uuid.NewString(), Destination: freshAddress(t, tg.net),
		Amount: &pamt, PayoutMethodID: btcpay.MethodBTCChain, Approved: true})
	require.NoError(t, err)
	require.NoError(t, sim.FailPayout(failed.ID))
	got2, err = c.GetPayout(ctx, failed.ID)
	require.NoError(t, err)
	require.Equal(t, btcpay.PayoutCancelled, got2.State)

	// A receive that matches no invoice shows in the wallet.
	orphan, _, err := sim.ReceiveUnmatched("0.005", 2)
	require.NoError(t, err)
	txs, err := c.WalletTransactions(ctx, btcpay.WalletTransactionsParams{})
	require.NoError(t, err)
	var seen bool
	for _, tx := range txs {
		if tx.TransactionHash == orphan {
			seen = true
			require.Equal(t, btcpay.TxConfirmed, tx.Status)
			require.EqualValues(t, 2, tx.Confirmations.V)
			u, err := tx.Amount.Units(8)
			require.NoError(t, err)
			require.EqualValues(t, 500_000, u)
		}
	}
	require.True(t, seen, "the unmatched receive is listed")

	// Every webhook is signed and fits its template.
	waitFor(t, func() bool { return sim.PendingWebhooks() == 0 && len(sim.Deliveries()) > 0 }, "webhooks")
	sink.mu.Lock()
	bodies, sigs := append([][]byte(nil), sink.bodies...), append([]string(nil), sink.sigs...)
	sink.mu.Unlock()
	require.NotEmpty(t, bodies)
	for i, b := range bodies {
		require.True(t, btcpay.VerifySignature(secret, b, sigs[i]), "signature of %s", b)
		checkWebhook(t, b)
	}
	require.Equal(t, []string{btcpay.EventInvoiceReceivedPayment, btcpay.EventInvoiceReceivedPayment, btcpay.EventInvoiceProcessing,
		btcpay.EventInvoicePaymentSettled, btcpay.EventInvoicePaymentSettled, btcpay.EventInvoiceSettled}, sink.types(t, paid.ID))
	require.Equal(t, []string{btcpay.EventInvoiceExpired, btcpay.EventInvoiceReceivedPayment, btcpay.EventInvoicePaidAfterExpiration},
		sink.types(t, late.ID))
	require.Equal(t, []string{btcpay.EventInvoiceSettled}, sink.types(t, marked.ID))
}

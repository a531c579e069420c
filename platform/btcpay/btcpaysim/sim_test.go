package btcpaysim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/btcsuite/btcd/btcutil/base58"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/platform/btcpay"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/clock"
)

type bundle struct {
	sim    *btcpaysim.Sim
	client *btcpay.Client
	hooks  *receiver
	clock  *clock.Fake
}

// receiver collects webhooks and answers with a settable status.
type receiver struct {
	mu     sync.Mutex
	events []btcpay.WebhookEvent
	raw    [][]byte
	status int
	// failing answers the next failing requests with 503, whatever status
	// says: a retry test decided by the receiver, not by a race with the
	// sender's retry delay.
	failing int
	url     string
}

func (r *receiver) all() []btcpay.WebhookEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]btcpay.WebhookEvent(nil), r.events...)
}

func (r *receiver) types(id string) []string {
	var out []string
	for _, e := range r.all() {
		if e.InvoiceID == id || e.PayoutID == id {
			out = append(out, e.Type)
		}
	}
	return out
}

func (r *receiver) setStatus(s int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status = s
}

func (r *receiver) failNext(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failing = n
}

func setup(t *testing.T, o btcpaysim.Options) *bundle {
	t.Helper()
	rc := &receiver{status: http.StatusOK}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if rc.failing > 0 {
			rc.failing--
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if rc.status == http.StatusOK {
			require.True(t, btcpay.VerifySignature("whsec", b, r.Header.Get(btcpay.SignatureHeader)))
			e, err := btcpay.ParseWebhookEvent(b)
			require.NoError(t, err)
			rc.events = append(rc.events, e)
			rc.raw = append(rc.raw, b)
		}
		w.WriteHeader(rc.status)
	}))
	t.Cleanup(srv.Close)
	rc.url = srv.URL
	fake := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	if o.Now == nil {
		o.Now = fake.Now
	}
	o.WebhookURL, o.WebhookSecret = srv.URL, "whsec"
	if o.WebhookRetryDelays == nil {
		o.WebhookRetryDelays = []time.Duration{10 * time.Millisecond, 10 * time.Millisecond}
	}
	o.TickEvery = -1
	sim := btcpaysim.Start(t, o)
	c, err := btcpay.New(btcpay.Options{URL: sim.URL(), APIKey: sim.APIKey(), StoreID: sim.StoreID(), Timeout: 5 * time.Second})
	require.NoError(t, err)
	return &bundle{sim: sim, client: c, hooks: rc, clock: fake}
}

func (b *bundle) invoice(t *testing.T, method, currency, amount string) btcpay.Invoice {
	t.Helper()
	p := btcpay.CreateInvoiceParams{OrderID: uuid.NewString(), Currency: currency, PaymentMethod: method,
		ExpirationMinutes: 60, MonitoringMinutes: 120, SpeedPolicy: btcpay.SpeedMedium}
	if amount != "" {
		a := btcpay.MustAmount(amount)
		p.Amount = &a
	}
	inv, err := b.client.CreateInvoice(context.Background(), p)
	require.NoError(t, err)
	return inv
}

func (b *bundle) status(t *testing.T, id string) (btcpay.InvoiceStatus, btcpay.AdditionalStatus) {
	t.Helper()
	inv, err := b.client.GetInvoice(context.Background(), id)
	require.NoError(t, err)
	return inv.Status, inv.AdditionalStatus
}

func (b *bundle) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.sim.PendingWebhooks() > 0 {
		require.True(t, time.Now().Before(deadline), "webhooks still pending")
		time.Sleep(5 * time.Millisecond)
	}
	// The last delivery may still be in flight.
	n := len(b.sim.Deliveries())
	time.Sleep(20 * time.Millisecond)
	for len(b.sim.Deliveries()) != n {
		n = len(b.sim.Deliveries())
		time.Sleep(20 * time.Millisecond)
	}
}

func TestOnChainInvoiceLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t, btcpaysim.Options{})
	inv := b.invoice(t, btcpay.MethodBTCChain, "BTC", "0.01")

	pays, err := b.sim.Pay(inv.ID, btcpaysim.PayParams{Amounts: []string{"0.004"}})
	require.NoError(t, err)
	st, add := b.status(t, inv.ID)
	require.Equal(t, btcpay.InvoiceNew, st)
	require.Equal(t, btcpay.AdditionalPaidPartial, add)

	more, err := b.sim.Pay(inv.ID, btcpaysim.PayParams{})
	require.NoError(t, err, "paying what is still due")
	require.Equal(t, "0.00600000", more[0].Amount)
	st, add = b.status(t, inv.ID)
	require.Equal(t, btcpay.InvoiceProcessing, st)
	require.Equal(t, btcpay.AdditionalNone, add)

	require.NoError(t, b.sim.ConfirmPayment(inv.ID, pays[0].ID))
	st, _ = b.status(t, inv.ID)
	require.Equal(t, btcpay.InvoiceProcessing, st, "one payment is still unconfirmed")
	require.NoError(t, b.sim.ConfirmPayment(inv.ID, more[0].ID))
	st, add = b.status(t, inv.ID)
	require.Equal(t, btcpay.InvoiceSettled, st)
	require.Equal(t, btcpay.AdditionalNone, add)

	pms, err := b.client.InvoicePaymentMethods(context.Background(), inv.ID, true)
	require.NoError(t, err)
	require.Len(t, pms[0].Payments, 2)
	for _, p := range pms[0].Payments {
		require.Equal(t, btcpay.PaymentSettled, p.Status)
		require.Equal(t, pms[0].Destination, p.Destination)
		require.Regexp(t, `^[0-9a-f]{64}-[0-9]+$`, p.ID)
	}
	require.True(t, pms[0].Due.IsZero())

	b.settle(t)
	require.Equal(t, []string{btcpay.EventInvoiceReceivedPayment, btcpay.EventInvoiceReceivedPayment, btcpay.EventInvoiceProcessing,
		btcpay.EventInvoicePaymentSettled, btcpay.EventInvoicePaymentSettled, btcpay.EventInvoiceSettled}, b.hooks.types(inv.ID))
	for _, e := range b.hooks.all() {
		require.Equal(t, b.sim.StoreID(), e.StoreID)
		require.Equal(t, inv.OrderID(), e.OrderID())
	}
}

func TestOverpaymentAndHighSpeed(t *testing.T) {
	t.Parallel()
	b := setup(t, btcpaysim.Options{})
	a := btcpay.MustAmount("0.01")
	inv, err := b.client.CreateInvoice(context.Background(), btcpay.CreateInvoiceParams{OrderID: "o", Amount: &a, Currency: "BTC",
		PaymentMethod: btcpay.MethodBTCChain, SpeedPolicy: btcpay.SpeedHigh})
	require.NoError(t, err)
	_, err = b.sim.PayAmount(inv.ID, "0.02")
	require.NoError(t, err)
	st, add := b.status(t, inv.ID)
	require.Equal(t, btcpay.InvoiceSettled, st, "HighSpeed settles at zero confirmations")
	require.Equal(t, btcpay.AdditionalPaidOver, add)
	b.settle(t)
	var processing btcpay.WebhookEvent
	for _, e := range b.hooks.all() {
		if e.Type == btcpay.EventInvoiceProcessing {
			processing = e
		}
	}
	require.True(t, processing.OverPaid)
}

func TestExpiryAndLatePayment(t *testing.T) {
	t.Parallel()
	b := setup(t, btcpaysim.Options{})
	partial := b.invoice(t, btcpay.MethodBTCChain, "BTC", "0.01")
	_, err := b.sim.PayAmount(partial.ID, "0.001")
	require.NoError(t, err)
	late := b.invoice(t, btcpay.MethodBTCChain, "BTC", "0.01")
	empty := b.invoice(t, btcpay.MethodBTCChain, "BTC", "0.01")

	// Time passes the invoices' expiry (60 minutes).
	b.clock.Advance(61 * time.Minute)
	b.sim.Tick()
	st, add := b.status(t, partial.ID)
	require.Equal(t, btcpay.InvoiceExpired, st)
	require.Equal(t, btcpay.AdditionalPaidPartial, add)
	st, add = b.status(t, empty.ID)
	require.Equal(t, btcpay.InvoiceExpired, st)
	require.Equal(t, btcpay.AdditionalNone, add)

	p, err := b.sim.PayAmount(late.ID, "0.01")
	require.NoError(t, err)
	require.True(t, p.AfterExpiration)
	st, add = b.status(t, late.ID)
	require.Equal(t, btcpay.InvoiceExpired, st, "paid in full after expiry stays Expired")
	require.Equal(t, btcpay.AdditionalPaidLate, add)
	require.NoError(t, b.sim.Confirm(late.ID))
	st, _ = b.status(t, late.ID)
	require.Equal(t, btcpay.InvoiceExpired, st)

	// Past monitoring (120 minutes after expiry) BTCPay no longer sees it;
	// the money reaches the wallet unmatched.
	b.clock.Advance(121 * time.Minute)
	_, err = b.sim.PayAmount(empty.ID, "0.01")
	require.ErrorIs(t, err, btcpaysim.ErrNotWatched)
	txs, err := b.client.WalletTransactions(context.Background(), btcpay.WalletTransactionsParams{})
	require.NoError(t, err)
	require.Len(t, txs, 3, "partial, late and the unwatched receive")
	require.Equal(t, "{}", string(txs[0].Labels), "the unmatched receive carries no invoice label")

	b.settle(t)
	require.Equal(t, []string{btcpay.EventInvoiceReceivedPayment, btcpay.EventInvoiceExpired, btcpay.EventInvoiceExpiredPaidPartial},
		b.hooks.types(partial.ID))
	require.Equal(t, []string{btcpay.EventInvoiceExpired, btcpay.EventInvoiceReceivedPayment, btcpay.EventInvoicePaidAfterExpiration,
		btcpay.EventInvoicePaymentSettled}, b.hooks.types(late.ID))
	for _, e := range b.hooks.all() {
		if e.InvoiceID == late.ID && e.Payment != nil {
			require.True(t, e.AfterExpiration)
		}
		if e.Type == btcpay.EventInvoiceExpired && e.InvoiceID == partial.ID {
			require.True(t, e.PartiallyPaid)
		}
	}
}

func TestForcedExpiryAndMonitoringEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, btcpaysim.Options{})
	inv := b.invoice(t, btcpay.MethodBTCChain, "BTC", "0.01")
	require.NoError(t, b.sim.Expire(inv.ID))
	require.ErrorIs(t, b.sim.Expire(inv.ID), btcpaysim.ErrInvalidState)
	got, err := b.client.GetInvoice(context.Background(), inv.ID)
	require.NoError(t, err)
	require.Equal(t, btcpay.InvoiceExpired, got.Status)
	require.Equal(t, b.clock.Now().Unix(), got.ExpirationTime.Unix(), "a forced expiry moves the expiration time to now")

	// Processing that never confirms before monitoring ends turns Invalid.
	stuck := b.invoice(t, btcpay.MethodBTCChain, "BTC", "0.01")
	_, err = b.sim.PayAmount(stuck.ID, "0.01")
	require.NoError(t, err)
	b.clock.Advance(181 * time.Minute)
	b.sim.Tick()
	st, _ := b.status(t, stuck.ID)
	require.Equal(t, btcpay.InvoiceInvalid, st)
	b.settle(t)
	require.Contains(t, b.hooks.types(stuck.ID), btcpay.EventInvoiceInvalid)
}

func TestMarkedByHand(t *testing.T) {
	t.Parallel()
	b := setup(t, btcpaysim.Options{})
	inv := b.invoice(t, btcpay.MethodBTCChain, "BTC", "0.01")
	got, err := b.client.GetInvoice(context.Background(), inv.ID)
	require.NoError(t, err)
	require.ElementsMatch(t, []btcpay.InvoiceStatus{btcpay.InvoiceSettled, btcpay.InvoiceInvalid}, got.AvailableStatusesForManualMarking)
	require.NoError(t, b.sim.MarkSettled(inv.ID))
	st, add := b.status(t, inv.ID)
	require.Equal(t, btcpay.InvoiceSettled, st)
	require.Equal(t, btcpay.AdditionalMarked, add)
	require.ErrorIs(t, b.sim.MarkSettled(inv.ID), btcpaysim.ErrInvalidState)
	pms, err := b.client.InvoicePaymentMethods(context.Background(), inv.ID, false)
	require.NoError(t, err)
	require.Empty(t, pms[0].Payments, "settled by hand with nothing paid")

	other := b.invoice(t, btcpay.MethodBTCChain, "BTC", "0.01")
	require.NoError(t, b.sim.MarkInvalid(other.ID))
	st, add = b.status(t, other.ID)
	require.Equal(t, btcpay.InvoiceInvalid, st)
	require.Equal(t, btcpay.AdditionalMarked, add)

	b.settle(t)
	evs := b.hooks.all()
	require.Len(t, evs, 2)
	require.Equal(t, btcpay.EventInvoiceSettled, evs[0].Type)
	require.True(t, evs[0].ManuallyMarked)
	require.Equal(t, btcpay.EventInvoiceInvalid, evs[1].Type)
	require.True(t, evs[1].ManuallyMarked)
}

func TestReplacedPaymentFallsBack(t *testing.T) {
	t.Parallel()
	b := setup(t, btcpaysim.Options{})
	inv := b.invoice(t, btcpay.MethodBTCChain, "BTC", "0.01")
	p, err := b.sim.PayAmount(inv.ID, "0.01")
	require.NoError(t, err)
	st, _ := b.status(t, inv.ID)
	require.Equal(t, btcpay.InvoiceProcessing, st)
	require.NoError(t, b.sim.InvalidatePayment(inv.ID, p.ID))
	st, add := b.status(t, inv.ID)
	require.Equal(t, btcpay.InvoiceNew, st)
	require.Equal(t, btcpay.AdditionalNone, add)
}

func TestLightningInvoice(t *testing.T) {
	t.Parallel()
	b := setup(t, btcpaysim.Options{})
	inv := b.invoice(t, btcpay.MethodBTCLN, "BTC", "0.00012345")
	_, err := b.sim.PayAmount(inv.ID, "0.0001")
	require.Error(t, err, "a BOLT11 asks for its exact amount")
	p, err := b.sim.Pay(inv.ID, btcpaysim.PayParams{})
	require.NoError(t, err)
	require.Equal(t, "Settled", p[0].Status)
	require.Regexp(t, `^[0-9a-f]{64}$`, p[0].ID, "a Lightning payment's id is its payment hash")
	st, _ := b.status(t, inv.ID)
	require.Equal(t, btcpay.InvoiceSettled, st)
	_, err = b.sim.Pay(inv.ID, btcpaysim.PayParams{})
	require.ErrorIs(t, err, btcpaysim.ErrNotWatched, "a BOLT11 is paid once")

	expired := b.invoice(t, btcpay.MethodBTCLN, "BTC", "0.0001")
	b.clock.Advance(61 * time.Minute)
	_, err = b.sim.Pay(expired.ID, btcpaysim.PayParams{})
	require.ErrorIs(t, err, btcpaysim.ErrNotWatched)

	bal, err := b.client.LightningBalance(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 12_345_000, bal.LocalMsat())
}

func TestUSDTPool(t *testing.T) {
	t.Parallel()
	var transfers []btcpaysim.USDTTransfer
	var mu sync.Mutex
	pool := btcpaysim.DefaultTronPool(2)
	b := setup(t, btcpaysim.Options{TronPool: pool, OnUSDTPayment: func(tr btcpaysim.USDTTransfer) {
		mu.Lock()
		defer mu.Unlock()
		transfers = append(transfers, tr)
	}})
	for _, a := range pool {
		_, ver, err := base58.CheckDecode(a)
		require.NoError(t, err)
		require.EqualValues(t, 0x41, ver)
	}
	ctx := context.Background()
	first := b.invoice(t, btcpay.MethodUSDTTron, "USDt", "10")
	second := b.invoice(t, btcpay.MethodUSDTTron, "USDt", "10")
	a1, _ := b.sim.Invoice(first.ID)
	a2, _ := b.sim.Invoice(second.ID)
	require.Equal(t, pool[0], a1.Destination)
	require.Equal(t, pool[1], a2.Destination)

	amt := btcpay.MustAmount("10")
	_, err := b.client.CreateInvoice(ctx, btcpay.CreateInvoiceParams{OrderID: "third", Amount: &amt, Currency: "USDt",
		PaymentMethod: btcpay.MethodUSDTTron})
	var re *btcpay.RefusedError
	require.ErrorAs(t, err, &re, "every pool address is taken")
	require.Contains(t, re.Message, "TRON addresses")

	// The plugin stops watching at expiry, and the address returns to the pool.
	require.NoError(t, b.sim.Expire(first.ID))
	_, err = b.sim.PayAmount(first.ID, "10")
	require.ErrorIs(t, err, btcpaysim.ErrNotWatched)
	third := b.invoice(t, btcpay.MethodUSDTTron, "USDt", "10")
	a3, _ := b.sim.Invoice(third.ID)
	require.Equal(t, pool[0], a3.Destination, "addresses are reused across invoices")

	p, err := b.sim.Pay(second.ID, btcpaysim.PayParams{})
	require.NoError(t, err)
	require.Regexp(t, `^[0-9a-f]{64}-[0-9]+$`, p[0].ID)
	st, _ := b.status(t, second.ID)
	require.Equal(t, btcpay.InvoiceProcessing, st, "USDT waits for confirmations")
	require.NoError(t, b.sim.Confirm(second.ID))
	st, _ = b.status(t, second.ID)
	require.Equal(t, btcpay.InvoiceSettled, st)
	mu.Lock()
	require.Equal(t, []btcpaysim.USDTTransfer{{TxID: p[0].TxID, To: pool[1], Amount: "10.000000", Invoice: second.ID}}, transfers)
	mu.Unlock()
}

func TestPayoutStates(t *testing.T) {
	t.Parallel()
	b := setup(t, btcpaysim.Options{})
	ctx := context.Background()
	a := btcpay.MustAmount("0.001")
	create := func(dest, method string, amount *btcpay.Amount, approved bool) btcpay.Payout {
		t.Helper()
		p, err := b.client.CreatePayout(ctx, btcpay.CreatePayoutParams{WithdrawalID: uuid.NewString(), Destination: dest,
			Amount: amount, PayoutMethodID: method, Approved: approved})
		require.NoError(t, err)
		return p
	}
	addr := func() string { return b.invoiceAddress(t) }

	pending := create(addr(), btcpay.MethodBTCChain, &a, false)
	require.Equal(t, btcpay.PayoutAwaitingApproval, pending.State)
	require.Nil(t, pending.PayoutAmount)
	require.NoError(t, b.sim.ApprovePayout(pending.ID))
	got, err := b.client.GetPayout(ctx, pending.ID)
	require.NoError(t, err)
	require.Equal(t, btcpay.PayoutAwaitingPayment, got.State)

	stalled := create(addr(), btcpay.MethodBTCChain, &a, true)
	require.NoError(t, b.sim.StallPayout(stalled.ID))
	got, err = b.client.GetPayout(ctx, stalled.ID)
	require.NoError(t, err)
	require.Equal(t, btcpay.PayoutInProgress, got.State)
	require.NotEmpty(t, got.PaymentProof.TransactionID)
	require.Error(t, b.client.CancelPayout(ctx, stalled.ID), "an in-progress payout cannot be cancelled")

	done := create(addr(), btcpay.MethodBTCChain, &a, true)
	txid, err := b.sim.CompletePayout(done.ID, strings.Repeat("ab", 32))
	require.NoError(t, err)
	got, err = b.client.GetPayout(ctx, done.ID)
	require.NoError(t, err)
	require.Equal(t, btcpay.PayoutCompleted, got.State)
	require.Equal(t, txid, got.PaymentProof.TxID())
	require.Nil(t, got.PaymentProof.Candidates, "candidates are cleared once completed")

	// Too small to pay: created, cancelled, refused.
	dust := btcpay.MustAmount("0.00000500")
	_, err = b.client.CreatePayout(ctx, btcpay.CreatePayoutParams{WithdrawalID: "dust", Destination: addr(), Amount: &dust,
		PayoutMethodID: btcpay.MethodBTCChain, Approved: true})
	var re *btcpay.RefusedError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "amount-too-low", re.Code)
	found, err := b.client.PayoutsByWithdrawalID(ctx, "dust", time.Time{})
	require.NoError(t, err)
	require.Len(t, found, 1)
	require.Equal(t, btcpay.PayoutCancelled, found[0].State)

	// Lightning: a BOLT11 that expired is refused; one with an amount sets it.
	lnInv := b.invoice(t, btcpay.MethodBTCLN, "BTC", "0.0005")
	pms, err := b.client.InvoicePaymentMethods(ctx, lnInv.ID, true)
	require.NoError(t, err)
	bolt := pms[0].Destination
	ln := create(bolt, btcpay.MethodBTCLN, nil, true)
	require.Equal(t, "0.00050000000", ln.OriginalAmount.String())
	require.NoError(t, b.sim.StallPayout(ln.ID))
	require.NoError(t, b.sim.BouncePayout(ln.ID))
	require.NoError(t, b.sim.FailPayout(ln.ID))
	got, err = b.client.GetPayout(ctx, ln.ID)
	require.NoError(t, err)
	require.Equal(t, btcpay.PayoutCancelled, got.State)
	b.clock.Advance(2 * time.Hour)
	_, err = b.client.CreatePayout(ctx, btcpay.CreatePayoutParams{WithdrawalID: "x", Destination: bolt,
		PayoutMethodID: btcpay.MethodBTCLN, Approved: true})
	require.ErrorAs(t, err, &re)
	require.Contains(t, re.Reason(), "expired")

	b.settle(t)
	require.Equal(t, []string{btcpay.EventPayoutCreated, btcpay.EventPayoutApproved, btcpay.EventPayoutUpdated, btcpay.EventPayoutUpdated},
		b.hooks.types(done.ID))
	for _, e := range b.hooks.all() {
		if e.PayoutID == done.ID {
			require.Equal(t, b.sim.StoreID(), e.StoreID)
		}
	}
}

// invoiceAddress returns a fresh valid address of the simulator's network.
func (b *bundle) invoiceAddress(t *testing.T) string {
	t.Helper()
	inv := b.invoice(t, btcpay.MethodBTCChain, "BTC", "0.001")
	info, _ := b.sim.Invoice(inv.ID)
	return info.Destination
}

func TestAutoCompletePayouts(t *testing.T) {
	t.Parallel()
	b := setup(t, btcpaysim.Options{AutoCompletePayouts: true})
	a := btcpay.MustAmount("0.001")
	p, err := b.client.CreatePayout(context.Background(), btcpay.CreatePayoutParams{WithdrawalID: "w", Destination: b.invoiceAddress(t),
		Amount: &a, PayoutMethodID: btcpay.MethodBTCChain, Approved: true})
	require.NoError(t, err)
	require.Equal(t, btcpay.PayoutCompleted, p.State)
	require.NotEmpty(t, p.PaymentProof.TxID())
}

func TestWalletControls(t *testing.T) {
	t.Parallel()
	b := setup(t, btcpaysim.Options{})
	ctx := context.Background()
	require.NoError(t, b.sim.SetWalletBalance("1.5", "0.25"))
	ov, err := b.client.WalletOverview(ctx)
	require.NoError(t, err)
	require.Equal(t, "1.75000000", ov.Balance.String())
	require.Equal(t, "1.50000000", ov.ConfirmedBalance.String())
	require.Equal(t, "0.25000000", ov.UnconfirmedBalance.String())

	txid, addr, err := b.sim.ReceiveUnmatched("0.1", 0)
	require.NoError(t, err)
	require.NotEmpty(t, addr)
	ov, err = b.client.WalletOverview(ctx)
	require.NoError(t, err)
	require.Equal(t, "0.35000000", ov.UnconfirmedBalance.String())
	unconfirmed, err := b.client.WalletTransactions(ctx, btcpay.WalletTransactionsParams{Statuses: []string{btcpay.TxUnconfirmed}})
	require.NoError(t, err)
	require.Len(t, unconfirmed, 1)
	require.Equal(t, txid, unconfirmed[0].TransactionHash)
	require.False(t, unconfirmed[0].BlockHeight.Valid)
	require.NoError(t, b.sim.ConfirmTransaction(txid, 3))
	confirmed, err := b.client.WalletTransactions(ctx, btcpay.WalletTransactionsParams{Statuses: []string{btcpay.TxConfirmed}})
	require.NoError(t, err)
	require.Len(t, confirmed, 1)
	require.EqualValues(t, 3, confirmed[0].Confirmations.V)
	require.True(t, confirmed[0].BlockHeight.Valid)

	require.NoError(t, b.sim.SetFeeRate("4.107"))
	rate, err := b.client.FeeRate(ctx, 3)
	require.NoError(t, err)
	require.Equal(t, "4.107", rate.String())
	fee, err := rate.MulCeil(141)
	require.NoError(t, err)
	require.EqualValues(t, 580, fee)
}

func TestStorePaymentMethodsFollowControls(t *testing.T) {
	t.Parallel()
	b := setup(t, btcpaysim.Options{})
	ctx := context.Background()
	b.sim.SetPaymentMethods(btcpay.MethodBTCChain)
	ms, err := b.client.StorePaymentMethods(ctx, true)
	require.NoError(t, err)
	require.Equal(t, []btcpay.StorePaymentMethod{{PaymentMethodID: btcpay.MethodBTCChain, Enabled: true}}, ms)
	all, err := b.client.StorePaymentMethods(ctx, false)
	require.NoError(t, err)
	require.Len(t, all, 3, "disabled methods are listed as disabled")
	a := btcpay.MustAmount("1")
	_, err = b.client.CreateInvoice(ctx, btcpay.CreateInvoiceParams{OrderID: "o", Amount: &a, Currency: "USDt", PaymentMethod: btcpay.MethodUSDTTron})
	require.ErrorIs(t, err, btcpay.ErrRefused, "a disabled method cannot be invoiced")
	_, err = b.client.LightningBalance(ctx)
	require.ErrorIs(t, err, btcpay.ErrNotFound)
}

func TestWebhookDelivery(t *testing.T) {
	t.Parallel()
	t.Run("RetriedAsRedelivery", func(t *testing.T) {
		t.Parallel()
		b := setup(t, btcpaysim.Options{})
		b.hooks.failNext(2)
		inv := b.invoice(t, btcpay.MethodBTCChain, "BTC", "0.01")
		require.NoError(t, b.sim.MarkSettled(inv.ID))
		deadline := time.Now().Add(5 * time.Second)
		for len(b.sim.Deliveries()) < 3 {
			require.True(t, time.Now().Before(deadline), "the second retry never came")
			time.Sleep(5 * time.Millisecond)
		}
		b.settle(t)
		ds := b.sim.Deliveries()
		require.Len(t, ds, 3, "two failures, then one delivery that is not retried")
		first, last := ds[0], ds[len(ds)-1]
		require.Equal(t, http.StatusServiceUnavailable, first.Status)
		require.Equal(t, http.StatusOK, last.Status)
		require.True(t, last.IsRedelivery)
		require.Equal(t, first.ID, last.OriginalID)
		require.NotEqual(t, first.ID, last.ID)
		evs := b.hooks.all()
		require.Len(t, evs, 1)
		require.Equal(t, first.ID, evs[0].Identity())
	})
	t.Run("NotRetriedOnClientError", func(t *testing.T) {
		t.Parallel()
		b := setup(t, btcpaysim.Options{})
		b.hooks.setStatus(http.StatusBadRequest)
		inv := b.invoice(t, btcpay.MethodBTCChain, "BTC", "0.01")
		require.NoError(t, b.sim.MarkSettled(inv.ID))
		b.settle(t)
		require.Len(t, b.sim.Deliveries(), 1)
	})
	t.Run("HeldAndReversed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, btcpaysim.Options{})
		b.sim.HoldWebhooks()
		inv := b.invoice(t, btcpay.MethodBTCChain, "BTC", "0.01")
		_, err := b.sim.Pay(inv.ID, btcpaysim.PayParams{Settled: true})
		require.NoError(t, err)
		require.Equal(t, 4, b.sim.PendingWebhooks())
		require.Empty(t, b.sim.Deliveries())
		b.sim.ReleaseWebhooks(true)
		b.settle(t)
		require.Equal(t, []string{btcpay.EventInvoiceSettled, btcpay.EventInvoiceProcessing, btcpay.EventInvoicePaymentSettled,
			btcpay.EventInvoiceReceivedPayment}, b.hooks.types(inv.ID))
	})
	t.Run("DuplicatedAndRedelivered", func(t *testing.T) {
		t.Parallel()
		b := setup(t, btcpaysim.Options{})
		b.sim.DuplicateWebhooks(true)
		inv := b.invoice(t, btcpay.MethodBTCChain, "BTC", "0.01")
		require.NoError(t, b.sim.MarkSettled(inv.ID))
		b.settle(t)
		b.hooks.mu.Lock()
		require.Len(t, b.hooks.raw, 2)
		require.True(t, bytes.Equal(b.hooks.raw[0], b.hooks.raw[1]), "a duplicate is byte for byte the same")
		first := b.hooks.events[0]
		b.hooks.mu.Unlock()
		b.sim.DuplicateWebhooks(false)
		id, err := b.sim.Redeliver(first.DeliveryID)
		require.NoError(t, err)
		b.settle(t)
		evs := b.hooks.all()
		require.Len(t, evs, 3)
		require.Equal(t, id, evs[2].DeliveryID)
		require.True(t, evs[2].IsRedelivery)
		require.Equal(t, first.DeliveryID, evs[2].OriginalDeliveryID)
		require.Equal(t, first.Identity(), evs[2].Identity())
	})
	t.Run("PrettyPrinted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, btcpaysim.Options{})
		inv := b.invoice(t, btcpay.MethodBTCChain, "BTC", "0.01")
		require.NoError(t, b.sim.MarkSettled(inv.ID))
		b.settle(t)
		d := b.sim.Deliveries()[0]
		require.True(t, strings.HasPrefix(string(d.Body), "{\n  \"deliveryId\": "), "%s", d.Body)
		require.Contains(t, string(d.Body), `"originalDeliveryId": null`)
		require.Equal(t, btcpay.Sign("whsec", d.Body), d.Signature)
	})
}

func TestControlAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, btcpaysim.Options{})
	inv := b.invoice(t, btcpay.MethodBTCChain, "BTC", "0.01")
	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(b.sim.URL()+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	code, _ := post("/_sim/invoices/"+inv.ID+"/pay", `{"amount":"0.01"}`)
	require.Equal(t, http.StatusOK, code)
	code, out := post("/_sim/invoices/"+inv.ID+"/confirm", ``)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "Settled", out["Status"])
	code, _ = post("/_sim/invoices/nope/expire", ``)
	require.Equal(t, http.StatusNotFound, code)
	code, _ = post("/_sim/invoices/"+inv.ID+"/expire", ``)
	require.Equal(t, http.StatusConflict, code)

	code, _ = post("/_sim/down", `{"mode":"error"}`)
	require.Equal(t, http.StatusOK, code)
	_, err := b.client.ServerInfo(context.Background())
	require.ErrorIs(t, err, btcpay.ErrUnreachable)
	code, _ = post("/_sim/up", ``)
	require.Equal(t, http.StatusOK, code)
	_, err = b.client.ServerInfo(context.Background())
	require.NoError(t, err)

	code, _ = post("/_sim/methods", `{"paymentMethods":["BTC-CHAIN"]}`)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, []string{btcpay.MethodBTCChain}, b.sim.PaymentMethods())

	code, out = post("/_sim/wallet/receive", `{"amount":"0.5","confirmations":1}`)
	require.Equal(t, http.StatusOK, code)
	require.NotEmpty(t, out["txid"])

	resp, err := http.Get(b.sim.URL() + "/_sim/")
	require.NoError(t, err)
	defer resp.Body.Close()
	var info map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&info))
	require.Equal(t, b.sim.StoreID(), info["storeId"])
	require.Equal(t, b.sim.APIKey(), info["apiKey"])
}

func TestDefaultTronPoolIsStable(t *testing.T) {
	t.Parallel()
	a, b := btcpaysim.DefaultTronPool(20), btcpaysim.DefaultTronPool(20)
	require.Equal(t, a, b)
	seen := map[string]bool{}
	for _, addr := range a {
		require.True(t, strings.HasPrefix(addr, "T"))
		require.Len(t, addr, 34)
		require.False(t, seen[addr])
		seen[addr] = true
	}
}

func TestMounts(t *testing.T) {
	t.Parallel()
	sim := btcpaysim.Start(t, btcpaysim.Options{Mounts: map[string]http.Handler{
		"/tron/": http.StripPrefix("/tron", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("node " + r.URL.Path))
		})),
	}})
	resp, err := http.Get(sim.URL() + "/tron/wallet/getnowblock")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, "node /wallet/getnowblock", string(b))
}

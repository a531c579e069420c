package ingress_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/ingress"
	"svc/platform/btcpay"
	"svc/platform/btcpay/btcpaysim"
)

const secret = "ingress-test-secret"

type bundle struct {
	e   *apptest.Env
	sim *btcpaysim.Sim
}

func setup(t *testing.T, opts ...apptest.Option) *bundle {
	t.Helper()
	sim := btcpaysim.Start(t, btcpaysim.Options{WebhookRetryDelays: []time.Duration{20 * time.Millisecond, 50 * time.Millisecond}})
	opts = append([]apptest.Option{apptest.WithProcessor(sim, secret)}, opts...)
	return &bundle{e: apptest.New(t, opts...), sim: sim}
}

// event builds a pretty-printed event body as BTCPay sends it.
func (b *bundle) event(t *testing.T, fields map[string]any) []byte {
	t.Helper()
	ev := map[string]any{"deliveryId": uuid.NewString(), "webhookId": "wh1", "originalDeliveryId": nil,
		"isRedelivery": false, "type": btcpay.EventInvoiceSettled, "timestamp": time.Now().Unix(),
		"storeId": b.sim.StoreID(), "invoiceId": "inv1", "metadata": map[string]any{"orderId": "dep1"},
		"manuallyMarked": false, "overPaid": false}
	for k, v := range fields {
		if v == nil {
			delete(ev, k)
			continue
		}
		ev[k] = v
	}
	body, err := json.MarshalIndent(ev, "", "  ")
	require.NoError(t, err)
	return body
}

func (b *bundle) post(body []byte, header map[string]string) *apptest.Response {
	return b.e.Do(apptest.Req{Method: http.MethodPost, Path: "/webhooks/processor", Body: body, Key: "-", Header: header})
}

func signed(body []byte) map[string]string {
	return map[string]string{ingress.HeaderProcessorSig: btcpay.Sign(secret, body)}
}

func (b *bundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.e.App.DB.Bun.NewRaw(query, args...).Scan(context.Background(), &n))
	return n
}

func TestSignaturesAndBodies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ack := func(r *apptest.Response) (string, *string) {
		var a struct {
			Status string  `json:"status"`
			Reason *string `json:"reason"`
		}
		r.JSON(t, &a)
		return a.Status, a.Reason
	}
	body := b.event(t, nil)
	sig := btcpay.Sign(secret, body)
	tests := []struct {
		name   string
		body   []byte
		header map[string]string
		status int
		ack    string // accepted or ignored, for 200
		reason string // part of the ignore reason
	}{
		{name: "ProcessorSig", body: b.event(t, nil), status: 200, ack: "accepted"},
		{name: "BTCPaySig", body: body, header: map[string]string{"BTCPay-Sig": sig}, status: 200, ack: "accepted"},
		{name: "UpperCaseHex", body: b.event(t, nil), status: 200, ack: "accepted"},
		{name: "OneOfTwoHeadersGood", body: body, header: map[string]string{"Processor-Sig": "sha256=" + strings.Repeat("0", 64), "BTCPay-Sig": sig},
			status: 200, ack: "accepted"},
		{name: "MissingSignature", body: body, header: map[string]string{}, status: 401},
		{name: "OtherSecret", body: body, header: map[string]string{"Processor-Sig": btcpay.Sign("not-the-secret", body)}, status: 401},
		{name: "SignatureOfAnotherBody", body: body, header: map[string]string{"Processor-Sig": btcpay.Sign(secret, []byte("{}"))}, status: 401},
		{name: "MalformedHeader", body: body, header: map[string]string{"Processor-Sig": "sha256:" + strings.TrimPrefix(sig, "sha256=")}, status: 401},
		{name: "BareHex", body: body, header: map[string]string{"Processor-Sig": strings.TrimPrefix(sig, "sha256=")}, status: 401},
		{name: "NotJSON", body: []byte("type=InvoiceSettled"), status: 400},
		{name: "JSONArray", body: []byte(`[{"type":"InvoiceSettled"}]`), status: 400},
		{name: "NoType", body: b.event(t, map[string]any{"type": nil}), status: 400},
		{name: "KnownTypeWrongShape", body: b.event(t, map[string]any{"type": btcpay.EventInvoiceReceivedPayment, "payment": "x"}), status: 400},
		{name: "UnknownType", body: b.event(t, map[string]any{"type": "SubscriberRenewed"}), status: 200, ack: "ignored", reason: "unknown event type"},
		{name: "NotSubscribed", body: b.event(t, map[string]any{"type": btcpay.EventInvoiceCreated}), status: 200, ack: "ignored", reason: "not one the service subscribes to"},
		{name: "PaidAfterExpirationNotSubscribed", body: b.event(t, map[string]any{"type": btcpay.EventInvoicePaidAfterExpiration}),
			status: 200, ack: "ignored", reason: "subscribes"},
		{name: "AnotherStore", body: b.event(t, map[string]any{"storeId": "SomeoneElsesStore"}), status: 200, ack: "ignored", reason: "another store"},
		{name: "NoStore", body: b.event(t, map[string]any{"storeId": nil}), status: 200, ack: "ignored", reason: "another store"},
		// A validly signed delivery larger than 64 KiB is taken (BTCPay does
		// not retry a 413).
		{name: "Large", body: b.event(t, map[string]any{"metadata": map[string]any{"orderId": strings.Repeat("x", 100<<10)}}), status: 200, ack: "accepted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.header
			if h == nil {
				h = signed(tc.body)
				if tc.name == "UpperCaseHex" {
					h = map[string]string{"Processor-Sig": "sha256=" + strings.ToUpper(strings.TrimPrefix(h["Processor-Sig"], "sha256="))}
				}
			}
			r := b.post(tc.body, h)
			require.Equal(t, tc.status, r.Status, "%s", r.Body)
			if tc.status != 200 {
				require.NotEmpty(t, r.Map(t)["detail"])
				return
			}
			st, reason := ack(r)
			require.Equal(t, tc.ack, st)
			if tc.ack == "accepted" {
				require.Nil(t, reason)
			} else {
				require.NotNil(t, reason)
				require.Contains(t, *reason, tc.reason)
			}
		})
	}
	// Only the accepted deliveries were stored (ProcessorSig, UpperCaseHex,
	// Large, and `body`, which was accepted twice under its two headers).
	require.Equal(t, 4, b.count(t, "SELECT count(*) FROM processor_webhooks"))
}

func TestAcceptedDeliveryIsStoredOnceWithItsJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := uuid.NewString()
	body := b.event(t, map[string]any{"deliveryId": first, "invoiceId": "invA"})
	for range 3 {
		r := b.post(body, signed(body))
		require.Equal(t, 200, r.Status)
		require.Equal(t, "accepted", r.Map(t)["status"])
	}
	// BTCPay's redelivery: a new delivery id naming the first one.
	redelivery := b.event(t, map[string]any{"deliveryId": uuid.NewString(), "originalDeliveryId": first, "isRedelivery": true,
		"invoiceId": "invA"})
	r := b.post(redelivery, map[string]string{"BTCPay-Sig": btcpay.Sign(secret, redelivery)})
	require.Equal(t, 200, r.Status)
	require.Equal(t, "accepted", r.Map(t)["status"])

	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM processor_webhooks"))
	d, err := b.e.App.Ingress.ByKey(context.Background(), first)
	require.NoError(t, err)
	require.Equal(t, body, d.Body, "the exact signed bytes are kept")
	require.Equal(t, btcpay.EventInvoiceSettled, d.EventType)
	require.Equal(t, "invA", *d.InvoiceID)
	require.Nil(t, d.ProcessedAt, "the answer comes before any processing")
	// Its processing is woken once it is stored, by a job that names it
	// among the deliveries stored with it, not by a job of its own.
	apptest.Eventually(t, 5*time.Second, func() bool {
		return b.woken(t, d.ID) == 1
	}, "the delivery's processing woken")
	require.Zero(t, b.count(t, "SELECT count(*) FROM river_job WHERE kind = 'processor_webhook'"))

	// A body without a delivery id is identified by its hash.
	anon := b.event(t, map[string]any{"deliveryId": nil, "invoiceId": "invB"})
	for range 2 {
		require.Equal(t, 200, b.post(anon, signed(anon)).Status)
	}
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM processor_webhooks"))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM processor_webhooks WHERE delivery_key LIKE 'sha256:%'"))
	apptest.Eventually(t, 5*time.Second, func() bool {
		return b.count(t, "SELECT count(*) FROM processor_webhooks w WHERE "+wokenSQL) == 2
	}, "each stored delivery woken")
}

// wokenSQL: the processor_webhooks row w is named by a wake job.
const wokenSQL = `EXISTS (SELECT 1 FROM river_job j WHERE j.kind = 'processor_webhook_batch' AND j.args->'delivery_ids' @> to_jsonb(w.id))`

// woken counts the wake jobs that name delivery id.
func (b *bundle) woken(t *testing.T, id int64) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM river_job j WHERE j.kind = 'processor_webhook_batch' AND j.args->'delivery_ids' @> to_jsonb(?::bigint)`, id)
}

// recorder is an InvoiceHandler and PayoutHandler that keeps what it gets
// and can fail its first calls.
type recorder struct {
	mu       sync.Mutex
	invoices []ingress.InvoiceEvent
	payouts  []ingress.PayoutEvent
	failures int
}

func (r *recorder) InvoiceEvent(_ context.Context, e ingress.InvoiceEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failures > 0 {
		r.failures--
		return errors.New("deposit store unavailable")
	}
	r.invoices = append(r.invoices, e)
	return nil
}

func (r *recorder) PayoutEvent(_ context.Context, e ingress.PayoutEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.payouts = append(r.payouts, e)
	return nil
}

func (r *recorder) invoiceTypes(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.invoices {
		if e.InvoiceID == id {
			out = append(out, e.Type)
		}
	}
	return out
}

// TestSimulatorWebhooksReachTheHandlers sends the simulator's own signed
// deliveries (BTCPay-Sig, pretty-printed) through the ingress and the
// processing job to the handlers.
func TestSimulatorWebhooksReachTheHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &recorder{}
	b.e.App.Ingress.Invoices, b.e.App.Ingress.Payouts = rec, rec
	b.e.StartWorker()
	b.sim.SetWebhook(b.e.URL+"/webhooks/processor", secret)
	ctx := context.Background()

	amt := btcpay.MustAmount("0.01")
	inv, err := b.e.App.BTCPay.CreateInvoice(ctx, btcpay.CreateInvoiceParams{OrderID: "dep-42", Amount: &amt, Currency: "BTC",
		PaymentMethod: btcpay.MethodBTCChain, ExpirationMinutes: 60})
	require.NoError(t, err)
	pays, err := b.sim.Pay(inv.ID, btcpaysim.PayParams{})
	require.NoError(t, err)
	require.NoError(t, b.sim.Confirm(inv.ID))
	// Four deliveries; of those stored within one wake's 20 ms only the
	// last is handed (BatchWorker), so at least the last of all four.
	want := []string{btcpay.EventInvoiceReceivedPayment, btcpay.EventInvoiceProcessing, btcpay.EventInvoicePaymentSettled, btcpay.EventInvoiceSettled}
	apptest.Eventually(t, 10*time.Second, func() bool {
		return b.count(t, "SELECT count(*) FROM processor_webhooks WHERE invoice_id = ? AND processed_at IS NOT NULL", inv.ID) == len(want)
	}, "invoice events processed")
	var last string
	require.NoError(t, b.e.App.DB.Bun.NewRaw("SELECT event_type FROM processor_webhooks WHERE invoice_id = ? ORDER BY id DESC LIMIT 1", inv.ID).
		Scan(ctx, &last))
	require.Subset(t, want, rec.invoiceTypes(inv.ID))
	require.Contains(t, rec.invoiceTypes(inv.ID), last)
	rec.mu.Lock()
	for _, e := range rec.invoices {
		require.Equal(t, "dep-42", e.OrderID)
		if e.Type == btcpay.EventInvoiceReceivedPayment {
			require.Equal(t, btcpay.MethodBTCChain, e.PaymentMethodID)
			require.Equal(t, pays[0].ID, e.Payment.ID)
			require.False(t, e.AfterExpiration)
		}
	}
	rec.mu.Unlock()

	pamt := btcpay.MustAmount("0.001")
	info, _ := b.sim.Invoice(inv.ID) // its address is a valid destination of the network
	p, err := b.e.App.BTCPay.CreatePayout(ctx, btcpay.CreatePayoutParams{WithdrawalID: "wd-1", Destination: info.Destination,
		Amount: &pamt, PayoutMethodID: btcpay.MethodBTCChain, Approved: true})
	require.NoError(t, err)
	_, err = b.sim.CompletePayout(p.ID, "")
	require.NoError(t, err)
	apptest.Eventually(t, 10*time.Second, func() bool {
		return b.count(t, "SELECT count(*) FROM processor_webhooks WHERE payout_id = ? AND event_type = 'PayoutUpdated' AND processed_at IS NOT NULL", p.ID) == 2
	}, "payout events processed")
	rec.mu.Lock()
	states := map[btcpay.PayoutState]bool{}
	for _, e := range rec.payouts {
		require.Equal(t, p.ID, e.PayoutID)
		require.Equal(t, btcpay.EventPayoutUpdated, e.Type)
		states[e.State] = true
	}
	rec.mu.Unlock()
	require.True(t, states[btcpay.PayoutCompleted])

	apptest.Eventually(t, 10*time.Second, func() bool {
		return b.count(t, "SELECT count(*) FROM processor_webhooks WHERE processed_at IS NULL") == 0
	}, "every delivery processed")
	require.Equal(t, 8, b.count(t, "SELECT count(*) FROM processor_webhooks"))
	// PayoutCreated and PayoutApproved are kept for the record, stored as
	// processed, with no job: the other six deliveries were woken.
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM processor_webhooks WHERE event_type IN ('PayoutCreated', 'PayoutApproved') AND attempts = 0"))
	require.Equal(t, 6, b.count(t, "SELECT count(*) FROM processor_webhooks w WHERE "+wokenSQL))
	require.Zero(t, b.count(t, "SELECT count(*) FROM processor_webhooks w WHERE event_type IN ('PayoutCreated', 'PayoutApproved') AND "+wokenSQL))
}

func TestFailedProcessingIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &recorder{failures: 1}
	b.e.App.Ingress.Invoices = rec
	body := b.event(t, map[string]any{"invoiceId": "invR"})
	require.Equal(t, 200, b.post(body, signed(body)).Status)
	b.e.StartWorker()
	apptest.Eventually(t, 5*time.Second, func() bool {
		return b.count(t, "SELECT count(*) FROM processor_webhooks WHERE last_error LIKE '%deposit store unavailable%'") == 1
	}, "the failure is recorded")
	// The failed delivery gets a job of its own, due 10 s later, which
	// River retries on its schedule; hurry it along.
	apptest.Eventually(t, 5*time.Second, func() bool {
		return b.count(t, "SELECT count(*) FROM river_job WHERE kind = 'processor_webhook' AND state = 'scheduled'") == 1
	}, "the failed delivery's own job")
	_, err := b.e.App.DB.Bun.NewRaw(`UPDATE river_job SET state = 'available', scheduled_at = now() WHERE kind = 'processor_webhook' AND state = 'scheduled'`).
		Exec(context.Background())
	require.NoError(t, err)
	apptest.Eventually(t, 10*time.Second, func() bool {
		return b.count(t, "SELECT count(*) FROM processor_webhooks WHERE processed_at IS NOT NULL AND last_error IS NULL AND attempts = 2") == 1
	}, "processed on the retry")
	require.Equal(t, []string{btcpay.EventInvoiceSettled}, rec.invoiceTypes("invR"))
}

// A delivery whose wake is lost (the process killed between its commit and
// the wake job's insert) is queued by the sweep once it is a minute old;
// one that a live wake job names is not, nor one queued already.
func TestALostWakeIsSweptUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.e.App.Ingress.Waker
	w.Delay = time.Hour // nothing woken but by Close: the process "dies" first
	ctx := context.Background()
	lost := b.event(t, map[string]any{"invoiceId": "invLost"})
	require.Equal(t, 200, b.post(lost, signed(lost)).Status)
	d, err := b.e.App.Ingress.ByKey(ctx, mustDeliveryID(t, lost))
	require.NoError(t, err)

	later := *b.e.App.Ingress
	later.Now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	n, err := b.e.App.Ingress.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "not yet a minute old")
	n, err = later.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'processor_webhook' AND (args->>'delivery_id')::bigint = ?`, d.ID))
	n, err = later.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "its job is live")

	woken := b.event(t, map[string]any{"invoiceId": "invWoken"})
	require.Equal(t, 200, b.post(woken, signed(woken)).Status)
	w.Close()
	n, err = later.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a live wake job names it")
}

// A wake job's deliveries are read in one statement, handed to their
// handlers, and marked processed in one more; a failing one gets a job of
// its own and holds up none of the others.
func TestABatchProcessesItsDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &recorder{failures: 1}
	b.e.App.Ingress.Invoices = rec
	w := b.e.App.Ingress.Waker
	w.Delay = time.Hour
	for _, inv := range []string{"invA", "invB", "invC", "invD"} {
		body := b.event(t, map[string]any{"invoiceId": inv})
		require.Equal(t, 200, b.post(body, signed(body)).Status)
	}
	w.Close()
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM river_job WHERE kind = 'processor_webhook_batch'"), "one job for the four")
	b.e.StartWorker()
	apptest.Eventually(t, 10*time.Second, func() bool {
		return b.count(t, "SELECT count(*) FROM processor_webhooks WHERE processed_at IS NOT NULL AND attempts = 1 AND last_error IS NULL") == 3
	}, "three processed by the batch")
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM processor_webhooks WHERE processed_at IS NULL AND attempts = 1 AND last_error LIKE '%deposit store unavailable%'"))
	require.Equal(t, 1, b.count(t, "SELECT count(*) FROM river_job WHERE kind = 'processor_webhook' AND state = 'scheduled'"), "the failed one's own job")
}

// Of the deliveries about one invoice in a batch, only the last stored is
// handed (the handler reads the invoice anyway); all are marked processed.
func TestABatchHandsEachSubjectOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := &recorder{}
	b.e.App.Ingress.Invoices = rec
	w := b.e.App.Ingress.Waker
	w.Delay = time.Hour
	for _, ev := range []map[string]any{
		{"invoiceId": "invX", "type": btcpay.EventInvoiceReceivedPayment},
		{"invoiceId": "invY", "type": btcpay.EventInvoiceSettled},
		{"invoiceId": "invX", "type": btcpay.EventInvoiceProcessing},
		{"invoiceId": "invX", "type": btcpay.EventInvoiceSettled},
		{"invoiceId": "invX", "type": btcpay.EventInvoiceExpired, "metadata": map[string]any{"orderId": "dep2"}}, // another deposit
	} {
		body := b.event(t, ev)
		require.Equal(t, 200, b.post(body, signed(body)).Status)
	}
	w.Close()
	b.e.StartWorker()
	apptest.Eventually(t, 10*time.Second, func() bool {
		return b.count(t, "SELECT count(*) FROM processor_webhooks WHERE processed_at IS NOT NULL AND attempts = 1") == 5
	}, "all five processed")
	require.ElementsMatch(t, []string{btcpay.EventInvoiceSettled, btcpay.EventInvoiceExpired}, rec.invoiceTypes("invX"),
		"invX of dep1 once (its last delivery), invX of dep2 once")
	require.Equal(t, []string{btcpay.EventInvoiceSettled}, rec.invoiceTypes("invY"))
}

func mustDeliveryID(t *testing.T, body []byte) string {
	t.Helper()
	var ev struct {
		DeliveryID string `json:"deliveryId"`
	}
	require.NoError(t, json.Unmarshal(body, &ev))
	return ev.DeliveryID
}

func TestWithoutHandlersDeliveriesAreMarkedProcessed(t *testing.T) {
	t.Parallel()
	b := setup(t, apptest.WithWorker())
	body := b.event(t, map[string]any{"type": btcpay.EventPayoutUpdated, "payoutId": "po1", "payoutState": "Completed",
		"invoiceId": nil, "metadata": nil})
	require.Equal(t, 200, b.post(body, signed(body)).Status)
	apptest.Eventually(t, 10*time.Second, func() bool {
		return b.count(t, "SELECT count(*) FROM processor_webhooks WHERE processed_at IS NOT NULL AND payout_id = 'po1'") == 1
	}, "marked processed")
}

// TestPruneKeepsWhatIsNotProcessed: processed deliveries older than the
// retention are deleted; recent ones and unprocessed ones of any age stay.
func TestPruneKeepsWhatIsNotProcessed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, id := range []string{"old-done", "old-open", "new-done"} {
		body := b.event(t, map[string]any{"invoiceId": id})
		require.Equal(t, 200, b.post(body, signed(body)).Status)
	}
	old := time.Now().Add(-40 * 24 * time.Hour)
	_, err := b.e.App.DB.Bun.ExecContext(ctx, "UPDATE processor_webhooks SET received_at = ? WHERE invoice_id LIKE 'old-%'", old)
	require.NoError(t, err)
	_, err = b.e.App.DB.Bun.ExecContext(ctx, "UPDATE processor_webhooks SET processed_at = now() WHERE invoice_id LIKE '%-done'")
	require.NoError(t, err)
	n, err := b.e.App.Ingress.Prune(ctx, time.Now().Add(-30*24*time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, 0, b.count(t, "SELECT count(*) FROM processor_webhooks WHERE invoice_id = 'old-done'"))
	require.Equal(t, 2, b.count(t, "SELECT count(*) FROM processor_webhooks WHERE invoice_id IN ('old-open', 'new-done')"))
}

func TestIngressIsOffWithoutProcessor(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	require.Nil(t, e.App.Ingress)
	// Not through e.Do: the route is absent, and openapi.json documents it.
	resp, err := e.Client.Post(e.URL+"/webhooks/processor", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

func FuzzIngressBody(f *testing.F) {
	f.Add([]byte(`{"type":"InvoiceSettled","storeId":"s","invoiceId":"i","deliveryId":"d"}`))
	f.Add([]byte(`{"type":"PayoutUpdated","storeId":"s","payoutId":"p"}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := btcpay.ParseWebhookEvent(body)
		if err != nil {
			return
		}
		if !btcpay.KnownEvent(ev.Type) && ingress.Subscribed(ev.Type) {
			t.Fatalf("subscribed to unknown type %q", ev.Type)
		}
	})
}

package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"svc/cmd/svc/app/apptest"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/config"
	"svc/platform/tracing"
)

// One trace follows a deposit from the request that creates it, through
// the processor call that makes its invoice, the processor's webhook job
// that settles it (BTCPay echoes the invoice metadata, which carries the
// request's traceparent), to the deposit.settled delivery, whose
// traceparent header names the same trace.
func TestOneTraceFromDepositRequestToSettledWebhook(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	var mu sync.Mutex
	delivered := map[string]string{} // event type -> traceparent
	platform := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct {
			Type string `json:"type"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &ev)
		mu.Lock()
		delivered[ev.Type] = r.Header.Get("traceparent")
		mu.Unlock()
	}))
	t.Cleanup(platform.Close)

	const hookSecret = "processor-hook-secret"
	sim := btcpaysim.Start(t, btcpaysim.Options{})
	e := apptest.New(t, apptest.WithTracing(tp), apptest.WithWorker(), apptest.WithConfig(func(c *config.Config) {
		c.BTCPay.URL, c.BTCPay.APIKey, c.BTCPay.StoreID, c.BTCPay.WebhookSecret = sim.URL(), sim.APIKey(), sim.StoreID(), hookSecret
		c.Webhooks.URL, c.Webhooks.Secret = platform.URL, "platform-secret"
		c.Worker.DepositPollEvery = time.Hour // the webhook settles it, not a poll
	}))
	sim.SetWebhook(e.URL+"/webhooks/processor", hookSecret)
	// The worker polls open deposits and scans the wallet once as it
	// starts: a first poll that ran after the payment below would settle
	// the deposit in the poll's own trace. Let them run first.
	apptest.Eventually(t, 30*time.Second, func() bool {
		n, err := e.App.DB.Bun.NewSelect().Table("river_job").
			Where("kind IN ('deposit_poll', 'deposit_wallet_scan') AND state = 'completed'").Count(context.Background())
		return err == nil && n >= 2
	}, "the worker's first deposit poll and wallet scan")

	r := e.Post("/v1/deposits", map[string]any{"external_user_id": "tess", "asset": "BTC", "expected_amount": "10000"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	var dep struct {
		DepositID string `json:"deposit_id"`
	}
	r.JSON(t, &dep)
	inv, ok := sim.InvoiceByOrderID(dep.DepositID)
	require.True(t, ok)
	_, err := sim.Pay(inv.ID, btcpaysim.PayParams{Settled: true})
	require.NoError(t, err)

	settled := func() string { mu.Lock(); defer mu.Unlock(); return delivered["deposit.settled"] }
	apptest.Eventually(t, 30*time.Second, func() bool { return settled() != "" }, "deposit.settled delivered")

	var request sdktrace.ReadOnlySpan
	for _, s := range exp.GetSpans().Snapshots() {
		if s.Name() == "POST /v1/deposits" && s.SpanKind() == trace.SpanKindServer {
			request = s
		}
	}
	require.NotNil(t, request, "a server span named by the route template")
	traceID := request.SpanContext().TraceID()
	require.Contains(t, settled(), traceID.String(), "the deposit.settled delivery carries the request's trace in traceparent")

	// The job and client spans end after the delivery is answered.
	want := map[string]trace.SpanKind{
		"btcpay POST":                  trace.SpanKindClient,   // the invoice is created
		"river.work/processor_webhook": trace.SpanKindConsumer, // the settlement job
		"river.work/event_deliver":     trace.SpanKindConsumer, // the delivery job
		"platform webhook POST":        trace.SpanKindClient,   // the delivery
		"SELECT":                       trace.SpanKindClient,   // PostgreSQL
	}
	apptest.Eventually(t, 10*time.Second, func() bool {
		seen := map[string]bool{}
		for _, s := range exp.GetSpans().Snapshots() {
			if k, ok := want[s.Name()]; ok && k == s.SpanKind() && s.SpanContext().TraceID() == traceID {
				seen[s.Name()] = true
			}
		}
		return len(seen) == len(want)
	}, "the processor call, the settlement job, the delivery job and its POST in the request's trace")

	for _, s := range exp.GetSpans().Snapshots() {
		for _, kv := range s.Attributes() {
			require.NotContains(t, kv.Value.String(), e.RW, "no API key in span %s", s.Name())
			require.NotContains(t, kv.Value.String(), sim.APIKey(), "no processor key in span %s", s.Name())
		}
	}
}

// With OTEL_EXPORTER_OTLP_ENDPOINT unset nothing is installed and nothing
// is sent, even to a collector listening where the exporter would send by
// default; the same collector does receive spans once the endpoint names
// it, so it would have seen any.
func TestNoTracesWithoutEndpoint(t *testing.T) {
	var posts atomic.Int64
	collector := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	// The exporter's default endpoint is localhost:4318: listen there when
	// it is free, so that an exporter started by mistake would be seen.
	if ln, err := net.Listen("tcp", "127.0.0.1:4318"); err == nil {
		collector.Listener.Close()
		collector.Listener = ln
	} else {
		t.Logf("127.0.0.1:4318 is taken (%v): only the explicit endpoint is watched", err)
	}
	collector.Start()
	t.Cleanup(collector.Close)
	global := otel.GetTracerProvider()

	// Control: with the endpoint set, spans reach the collector.
	t.Setenv(tracing.EnvEndpoint, collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	on, err := tracing.FromEnv(context.Background(), "test")
	require.NoError(t, err)
	require.True(t, on.Enabled())
	_, span := on.Provider.Tracer("test").Start(context.Background(), "control")
	span.End()
	require.NoError(t, on.Shutdown(context.Background()))
	require.Positive(t, posts.Load(), "the collector receives spans when the endpoint is set")
	otel.SetTracerProvider(global)

	// OTEL_SDK_DISABLED=true turns it off even with an endpoint.
	t.Setenv("OTEL_SDK_DISABLED", "true")
	off, err := tracing.FromEnv(context.Background(), "test")
	require.NoError(t, err)
	require.False(t, off.Enabled())
	t.Setenv("OTEL_SDK_DISABLED", "")

	// Unset: off, and a request through the whole service sends nothing.
	t.Setenv(tracing.EnvEndpoint, "")
	require.NoError(t, os.Unsetenv(tracing.EnvEndpoint))
	t.Setenv(tracing.EnvTracesEndpoint, "")
	require.NoError(t, os.Unsetenv(tracing.EnvTracesEndpoint))
	posts.Store(0)
	off, err = tracing.FromEnv(context.Background(), "test")
	require.NoError(t, err)
	require.False(t, off.Enabled())
	require.Nil(t, off.Provider)
	require.Same(t, global, otel.GetTracerProvider(), "the global provider is left alone")

	e := apptest.New(t, apptest.WithTracing(off.Provider), apptest.WithWorker())
	r := e.Do(apptest.Req{Method: "GET", Path: "/v1/assets",
		Header: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
	require.Equal(t, http.StatusOK, r.Status)
	require.Empty(t, r.Header.Get("traceparent"), "no server span: the HTTP stack has no tracing middleware")
	require.NoError(t, off.Shutdown(context.Background()))
	time.Sleep(200 * time.Millisecond)
	require.Zero(t, posts.Load(), "nothing exported")
}

package httpapi_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"svc/platform/httpapi"
	"svc/platform/logtest"
	"svc/platform/tracing"
)

// With a tracer, every request is a server span named by its method and
// route template, continuing the caller's traceparent, and the access log
// line carries its trace_id and span_id; without one, no span and no
// traceparent in the answer.
func TestServerSpansByRouteTemplate(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(sdktrace.WithSyncer(exp))
	for _, on := range []bool{true, false} {
		var logged logtest.Buffer
		o := httpapi.Options{Log: slog.New(tracing.NewLogHandler(slog.NewJSONHandler(&logged, nil)))}
		if on {
			o.Tracer = tp
		}
		app := newBenchApp(o)
		req := httptest.NewRequest("GET", "/v1/things/42?api_key=secret", nil)
		req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		resp, err := app.Test(req)
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		var line map[string]any
		require.NoError(t, json.Unmarshal(logged.Bytes(), &line))
		require.Equal(t, "http", line["msg"])
		if !on {
			require.Empty(t, resp.Header.Get("traceparent"))
			require.NotContains(t, line, "trace_id")
			continue
		}
		spans := exp.GetSpans().Snapshots()
		require.Len(t, spans, 1)
		require.Equal(t, "GET /v1/things/:thing_id", spans[0].Name())
		require.Equal(t, trace.SpanKindServer, spans[0].SpanKind())
		require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", spans[0].SpanContext().TraceID().String())
		for _, kv := range spans[0].Attributes() {
			require.NotContains(t, kv.Value.String(), "secret", kv.Key)
		}
		require.Equal(t, spans[0].SpanContext().TraceID().String(), line["trace_id"])
		require.Equal(t, spans[0].SpanContext().SpanID().String(), line["span_id"])

		// A path no route serves is "unmatched", never the raw path.
		exp.Reset()
		resp, err = app.Test(httptest.NewRequest("GET", "/v1/nothing/42", nil))
		require.NoError(t, err)
		require.Equal(t, 404, resp.StatusCode)
		spans = exp.GetSpans().Snapshots()
		require.Len(t, spans, 1)
		require.Equal(t, "GET "+httpapi.UnmatchedRoute, spans[0].Name())
	}
}

func newBenchApp(o httpapi.Options) *fiber.App {
	app := httpapi.New(o)
	app.Get("/v1/things/:thing_id", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"id": c.Params("thing_id")}) })
	httpapi.NotFound(app)
	return app
}

// BenchmarkRequestTracing runs one GET through the whole HTTP stack
// (middleware, routing, access log, JSON answer) in process:
//
//   - Off: no tracer, as with OTEL_EXPORTER_OTLP_ENDPOINT unset; the stack
//     is the one without tracing.
//   - NoopProvider: the instrumentation installed with a no-op provider,
//     which is what "off" would cost if it were done that way.
//   - On: an SDK provider sampling every request into a no-op exporter.
//
// Results: docs/performance.md, "Tracing off".
func BenchmarkRequestTracing(b *testing.B) {
	log := slog.New(tracing.NewLogHandler(slog.NewJSONHandler(io.Discard, nil)))
	sdk := tracing.NewProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
	for _, c := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"Off", nil}, {"NoopProvider", noop.NewTracerProvider()}, {"On", sdk}} {
		b.Run(c.name, func(b *testing.B) {
			h := newBenchApp(httpapi.Options{Log: log, Tracer: c.tp}).Handler()
			var rc fasthttp.RequestCtx
			b.ReportAllocs()
			for b.Loop() {
				rc.Request.Reset()
				rc.Response.Reset()
				rc.ResetUserValues() // as fasthttp does after each request
				rc.Request.Header.SetMethod("GET")
				rc.Request.SetRequestURI("/v1/things/42")
				h(&rc)
				if rc.Response.StatusCode() != 200 {
					b.Fatalf("status %d", rc.Response.StatusCode())
				}
			}
		})
	}
}

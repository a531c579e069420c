package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"svc/platform/tracing"
)

// A line logged inside a span carries its trace_id and span_id; one logged
// outside, or without a context, carries neither.
func TestLogLinesInsideASpanCarryItsIDs(t *testing.T) {
	t.Parallel()
	tp := tracing.NewProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	var buf bytes.Buffer
	log := slog.New(tracing.NewLogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "test")

	ctx, span := tp.Tracer("test").Start(context.Background(), "work")
	log.InfoContext(ctx, "inside")
	span.End()
	log.InfoContext(context.Background(), "outside")
	log.Info("no context")

	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	require.Len(t, lines, 3)
	var in, out, none map[string]any
	require.NoError(t, json.Unmarshal(lines[0], &in))
	require.NoError(t, json.Unmarshal(lines[1], &out))
	require.NoError(t, json.Unmarshal(lines[2], &none))
	require.Equal(t, span.SpanContext().TraceID().String(), in["trace_id"])
	require.Equal(t, span.SpanContext().SpanID().String(), in["span_id"])
	require.Equal(t, "test", in["component"])
	require.NotContains(t, out, "trace_id")
	require.NotContains(t, none, "trace_id")
}

// URLs lose their query and user info, and Basic user names are blanked,
// before any exporter sees the span.
func TestRedactorKeepsSecretsOutOfSpans(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(sdktrace.WithSyncer(exp))
	_, span := tp.Tracer("test").Start(context.Background(), "s")
	span.SetAttributes(attribute.String("other", "kept?yes"))
	span.End()
	_, span = tp.Tracer("test").Start(context.Background(), "s2", traceAttrs(
		attribute.String("url.full", "https://user:pw@platform.example/hook?token=secret"),
		attribute.String("http.target", "/v1/deposits?api_key=secret"),
		attribute.String("http.url", "http://host/v1/x?key=secret"),
		attribute.String("enduser.id", "svc_test_key"),
	))
	span.End()
	got := map[attribute.Key]string{}
	for _, s := range exp.GetSpans().Snapshots() {
		for _, kv := range s.Attributes() {
			got[kv.Key] = kv.Value.AsString()
		}
	}
	require.Equal(t, "https://platform.example/hook", got["url.full"])
	require.Equal(t, "/v1/deposits", got["http.target"])
	require.Equal(t, "http://host/v1/x", got["http.url"])
	require.Empty(t, got["enduser.id"])
	require.Equal(t, "kept?yes", got["other"])
}

// Off, the transport is the one given and nothing is injected.
func TestTransportOffIsTheBase(t *testing.T) {
	t.Parallel()
	var off *tracing.Tracing
	require.Nil(t, off.Transport(nil, "x"))
	base := &http.Transport{}
	require.Same(t, base, (&tracing.Tracing{}).Transport(base, "x"))

	exp := tracetest.NewInMemoryExporter()
	on := tracing.New(tracing.NewProvider(sdktrace.WithSyncer(exp)))
	var header string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { header = r.Header.Get("traceparent") }))
	defer srv.Close()
	ctx, span := on.Provider.Tracer("test").Start(context.Background(), "parent")
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := (&http.Client{Transport: on.Transport(nil, "peer")}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	span.End()
	require.Contains(t, header, span.SpanContext().TraceID().String())
	names := []string{}
	for _, s := range exp.GetSpans().Snapshots() {
		names = append(names, s.Name())
	}
	require.Contains(t, names, "peer GET")
}

// InjectInto and Resume carry a trace through metadata that comes back
// later; without a span neither does anything.
func TestInjectAndResume(t *testing.T) {
	t.Parallel()
	meta := map[string]any{"orderId": "d"}
	tracing.InjectInto(context.Background(), meta)
	require.Equal(t, map[string]any{"orderId": "d"}, meta, "no span, no change")

	exp := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(sdktrace.WithSyncer(exp))
	ctx, created := tp.Tracer("test").Start(context.Background(), "create")
	tracing.InjectInto(ctx, meta)
	created.End()
	require.Contains(t, meta["traceparent"], created.SpanContext().TraceID().String())

	get := func(k string) string { s, _ := meta[k].(string); return s }
	ctx, hook := tp.Tracer("test").Start(context.Background(), "webhook")
	rctx, resumed := tracing.Resume(ctx, "resumed", get)
	resumed.End()
	hook.End()
	require.Equal(t, created.SpanContext().TraceID(), resumed.SpanContext().TraceID())
	require.NotEqual(t, hook.SpanContext().TraceID(), resumed.SpanContext().TraceID())
	require.Equal(t, resumed.SpanContext(), traceOf(rctx))

	_, same := tracing.Resume(context.Background(), "off", get)
	require.False(t, same.SpanContext().IsValid(), "no recording span: nothing resumed")
}

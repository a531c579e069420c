// Package tracing is the service's OpenTelemetry tracing: the tracer
// provider configured from the standard OTEL_* environment variables, the
// redaction every span goes through, the HTTP client wrapper, the carrying
// of a trace through the payment processor, and the log handler that puts
// trace_id and span_id on every line written inside a span.
//
// Tracing is off unless OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set. Off, FromEnv returns a
// Tracing whose Provider is nil and every wiring point (the HTTP server,
// the HTTP clients, the pgx pool, River) installs nothing: a request runs
// the same code as without tracing (docs/performance.md, "Tracing off").
//
// The spans themselves come from the instrumentation libraries the
// OpenTelemetry and River projects keep: otelfiber (HTTP server), otelhttp
// (HTTP clients), otelpgx (PostgreSQL) and otelriver (River jobs).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of the spans the service starts itself.
const Scope = "svc"

// Propagator is the one wire format of trace context: W3C traceparent and
// tracestate, in HTTP headers, River job metadata and invoice metadata.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// MeterProvider is given to the instrumentation libraries, which would
// otherwise record metrics on the global provider: the service's metrics
// are Prometheus's (platform/metrics).
var MeterProvider = metricnoop.NewMeterProvider()

// Tracing is the process's tracing. The zero value and nil are off.
type Tracing struct {
	// Provider makes the spans; nil is off.
	Provider trace.TracerProvider
	shutdown func(context.Context) error
}

// New returns tracing with tp (tests pass an SDK provider with an
// in-memory exporter, see NewProvider); a nil tp is off.
func New(tp trace.TracerProvider) *Tracing { return &Tracing{Provider: tp} }

// Enabled reports whether spans are made.
func (t *Tracing) Enabled() bool { return t != nil && t.Provider != nil }

// Shutdown flushes the spans not yet exported and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// Env names read by FromEnv itself; the exporter, the sampler and the batch
// processor read the other OTEL_* variables (docs/operations.md, "Traces").
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envSDKDisabled    = "OTEL_SDK_DISABLED"
	envTracesExporter = "OTEL_TRACES_EXPORTER"
)

// FromEnv configures tracing from the OTEL_* environment variables: off
// (a nil Provider, nothing exported, nothing installed) unless an OTLP
// endpoint is set, and off again with OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none. On, spans are batched and sent with OTLP over
// HTTP (http/protobuf, the only protocol this build carries), the resource
// is service.name=svc (OTEL_SERVICE_NAME overrides it), service.version and
// OTEL_RESOURCE_ATTRIBUTES, and the sampler is the SDK's
// (OTEL_TRACES_SAMPLER, default parentbased_always_on). It also sets the
// global provider and propagator, for any library that reads them.
func FromEnv(ctx context.Context, version string) (*Tracing, error) {
	if os.Getenv(EnvEndpoint) == "" && os.Getenv(EnvTracesEndpoint) == "" {
		return &Tracing{}, nil
	}
	if v := os.Getenv(envSDKDisabled); v != "" {
		off, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not true or false", envSDKDisabled, v)
		}
		if off {
			return &Tracing{}, nil
		}
	}
	switch v := strings.TrimSpace(os.Getenv(envTracesExporter)); v {
	case "", "otlp":
	case "none":
		return &Tracing{}, nil
	default:
		return nil, fmt.Errorf("%s: %q is not supported (otlp or none)", envTracesExporter, v)
	}
	for _, name := range []string{envTracesProtocol, envProtocol} {
		if v := os.Getenv(name); v != "" {
			if v != "http/protobuf" {
				return nil, fmt.Errorf("%s: %q is not supported: svc sends OTLP over HTTP (http/protobuf)", name, v)
			}
			break
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "svc"), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID(),
		resource.WithFromEnv(), // last: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource (OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	tp := NewProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator)
	return &Tracing{Provider: tp, shutdown: tp.Shutdown}, nil
}

// NewProvider returns an SDK tracer provider with opts (an exporter, a
// resource) behind the service's redaction (Redactor). Tests use it with
// sdktrace.WithSyncer(tracetest.NewInMemoryExporter()).
func NewProvider(opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(Redactor{})}, opts...)...)
}

// Transport returns base with a client span for every request and the
// trace context sent in traceparent; peer names the remote side in the
// span name ("btcpay POST"). Off, base itself is returned (nil stays nil:
// the client's default). A nil base is http.DefaultTransport.
func (t *Tracing) Transport(base http.RoundTripper, peer string) http.RoundTripper {
	if !t.Enabled() {
		return base
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return otelhttp.NewTransport(base,
		otelhttp.WithTracerProvider(t.Provider), otelhttp.WithMeterProvider(MeterProvider),
		otelhttp.WithPropagators(Propagator),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return peer + " " + r.Method }),
		otelhttp.WithSpanOptions(trace.WithAttributes(attribute.String("peer.service", peer))),
	)
}

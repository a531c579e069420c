package tracing

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// InjectInto writes the trace context of ctx's span (traceparent, and
// tracestate when there is one) into m, the metadata of something that
// comes back later through another door: a deposit's invoice, whose
// metadata BTCPay echoes in every webhook it sends about it. Without a
// span (tracing off) m is left as it is.
func InjectInto(ctx context.Context, m map[string]any) {
	if m == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	c := propagation.MapCarrier{}
	Propagator.Inject(ctx, c)
	for k, v := range c {
		m[k] = v
	}
}

// Resume continues, under ctx, the trace that get reads back
// (InjectInto's keys): it starts the span name as a child of that trace's
// span, linked to ctx's own span, and returns it with its context. The
// work done under it, and the jobs inserted under it, belong to the
// resumed trace: a processor webhook about a deposit joins the trace of
// the request that created the deposit. Without a recording span in ctx
// (tracing off) or a trace to resume, ctx is returned with a no-op span.
func Resume(ctx context.Context, name string, get func(key string) string) (context.Context, trace.Span) {
	cur := trace.SpanFromContext(ctx)
	if !cur.IsRecording() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	c := propagation.MapCarrier{}
	for _, k := range Propagator.Fields() {
		if v := get(k); v != "" {
			c[k] = v
		}
	}
	sc := trace.SpanContextFromContext(Propagator.Extract(context.Background(), c))
	if !sc.IsValid() || sc.TraceID() == cur.SpanContext().TraceID() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return cur.TracerProvider().Tracer(Scope).Start(trace.ContextWithRemoteSpanContext(ctx, sc), name,
		trace.WithLinks(trace.Link{SpanContext: cur.SpanContext()}))
}

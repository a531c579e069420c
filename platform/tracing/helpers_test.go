package tracing_test

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

func traceAttrs(kv ...attribute.KeyValue) trace.SpanStartOption { return trace.WithAttributes(kv...) }

func traceOf(ctx context.Context) trace.SpanContext { return trace.SpanContextFromContext(ctx) }

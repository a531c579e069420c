package tracing

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// LogHandler adds trace_id and span_id to every record logged with a
// context that carries a span (slog's InfoContext, WarnContext, ...), so
// that a log line and its trace find each other. Records logged without a
// context, or outside a span, are passed on as they are.
type LogHandler struct{ slog.Handler }

// NewLogHandler wraps h.
func NewLogHandler(h slog.Handler) slog.Handler { return LogHandler{h} }

// Handle adds the ids when ctx has a span.
func (h LogHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs keeps the wrapper.
func (h LogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return LogHandler{h.Handler.WithAttrs(as)}
}

// WithGroup keeps the wrapper. Under a group the ids are in the group.
func (h LogHandler) WithGroup(name string) slog.Handler { return LogHandler{h.Handler.WithGroup(name)} }

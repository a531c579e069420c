package queue

import (
	"context"
	"encoding/json"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"svc/platform/tracing"
)

// TraceMiddleware is River's tracing, for both clients (NewInserter and
// WorkerParams.Middleware): otelriver's spans of inserts and of every job
// run ("river.work/<kind>"), with the inserting span's traceparent written
// into the job's metadata, and jobParent, which makes that span the
// parent of the job's span. otelriver alone would only link to it,
// starting a new trace per job; with jobParent a request, the jobs it
// enqueues, the jobs those enqueue, and their HTTP calls share one trace.
// A nil tp returns nothing: no middleware runs.
func TraceMiddleware(tp trace.TracerProvider) []rivertype.Middleware {
	if tp == nil {
		return nil
	}
	return []rivertype.Middleware{
		&jobParent{},
		otelriver.NewMiddleware(&otelriver.MiddlewareConfig{TracerProvider: tp, MeterProvider: tracing.MeterProvider,
			EnableTracePropagation: true, EnableWorkSpanJobKindSuffix: true}),
	}
}

// jobParent puts the trace context found in a job's metadata into the
// context its work runs with. It must come before otelriver's middleware.
type jobParent struct{ river.MiddlewareDefaults }

func (*jobParent) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	var meta map[string]any
	if len(job.Metadata) == 0 || json.Unmarshal(job.Metadata, &meta) != nil {
		return doInner(ctx)
	}
	c := propagation.MapCarrier{}
	for _, k := range tracing.Propagator.Fields() {
		if s, ok := meta[k].(string); ok {
			c[k] = s
		}
	}
	if len(c) == 0 {
		return doInner(ctx)
	}
	return doInner(tracing.Propagator.Extract(ctx, c))
}

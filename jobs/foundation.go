package jobs

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/riverqueue/river"
	"github.com/uptrace/bun"

	"svc/modules/health"
	"svc/platform/idempotency"
)

// HeartbeatArgs asks the worker to record that it is alive (/readyz).
type HeartbeatArgs struct{}

// Kind is the job kind.
func (HeartbeatArgs) Kind() string { return "worker_heartbeat" }

// HeartbeatWorker writes this host's heartbeat.
type HeartbeatWorker struct {
	river.WorkerDefaults[HeartbeatArgs]
	DB  bun.IDB
	Now func() time.Time
}

// Work records the beat.
func (w *HeartbeatWorker) Work(ctx context.Context, _ *river.Job[HeartbeatArgs]) error {
	host, _ := os.Hostname()
	return health.Beat(ctx, w.DB, fmt.Sprintf("%s:%d", host, os.Getpid()), w.Now())
}

// PruneIdempotencyArgs asks for old idempotency records to be deleted.
type PruneIdempotencyArgs struct{}

// Kind is the job kind.
func (PruneIdempotencyArgs) Kind() string { return "idempotency_prune" }

// PruneIdempotencyWorker deletes records past their retention.
type PruneIdempotencyWorker struct {
	river.WorkerDefaults[PruneIdempotencyArgs]
	Store     *idempotency.Store
	Retention time.Duration
}

// Work prunes.
func (w *PruneIdempotencyWorker) Work(ctx context.Context, _ *river.Job[PruneIdempotencyArgs]) error {
	_, err := w.Store.Prune(ctx, w.Store.Now().Add(-w.Retention))
	return err
}

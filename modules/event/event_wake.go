package event

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"svc/platform/queue"
)

// # Waking deliveries in batches
//
// A River job per event, inserted in the state change's transaction, is
// the simplest outbox, and the dearest part of it: River's insert is a row
// in a table of seven indexes (two of them GIN) plus the client's work,
// then a fetch and a completion, for every event. So a transaction run by
// db.RunInTx or db.BatchTx writes only the event's row, and once it has
// committed the process's Waker gathers the ids it committed for up to
// queue.DefaultWakeDelay (20 ms) and inserts one job that carries them all
// (DeliverBatchArgs, at most wakeMax of them), whose worker claims them in
// one statement, sends them side by side and records the deliveries in
// one more.
//
// The row is the guarantee: an event whose wake is lost (the process
// killed between its commit and the flush, or the insert refused) is
// pending and due, and the Sweep, a periodic River job, queues it within
// SweepEvery. An event committed by a transaction that is not
// RunInTx's or BatchTx's gets its own job in that transaction.

// Waker wakes the first attempts of the events this process committed, in
// batches (DeliverBatchArgs).
type Waker = queue.Waker[uuid.UUID]

// wakeMax is the most events a wake job names: four rounds of
// batchSenders, which end within the job's timeout (the HTTP timeout plus
// claimMargin) at the default HTTP timeout even when every receiver waits
// it out. A longer PLATFORM_WEBHOOK_TIMEOUT may cut a batch short: what
// was answered is recorded, the rest handed back (AttemptBatch).
const wakeMax = 4 * batchSenders

// NewWaker returns the Waker of the events this process commits.
func NewWaker(ins queue.JobInserter, log *slog.Logger) *Waker {
	return &Waker{Inserter: ins, Log: log, What: "events", Max: wakeMax,
		Job: func(ids []uuid.UUID) river.JobArgs { return DeliverBatchArgs{EventIDs: ids} }}
}

// DeliverBatchArgs wakes the first attempts of the events a Waker
// gathered.
type DeliverBatchArgs struct {
	EventIDs []uuid.UUID `json:"event_ids"`
}

// Kind is the job kind.
func (DeliverBatchArgs) Kind() string { return "event_deliver_batch" }

// DeliverBatchWorker runs the wake jobs.
type DeliverBatchWorker struct {
	river.WorkerDefaults[DeliverBatchArgs]
	Deliverer *Deliverer
}

// Work makes one attempt for each of the job's events that is still
// pending, due and free, and for each of their endpoint deliveries that is
// (AttemptEndpoints).
func (w *DeliverBatchWorker) Work(ctx context.Context, job *river.Job[DeliverBatchArgs]) error {
	worker := lastAttempter(job.AttemptedBy)
	return w.Deliverer.attemptAll(ctx, job.Args.EventIDs, worker, func(ctx context.Context) error {
		_, err := w.Deliverer.AttemptBatch(ctx, job.Args.EventIDs, worker)
		return err
	})
}

// Timeout leaves the HTTP timeout room to expire first: the batch's
// requests run side by side, each bounded by it.
func (w *DeliverBatchWorker) Timeout(*river.Job[DeliverBatchArgs]) time.Duration {
	return w.Deliverer.timeout() + claimMargin
}

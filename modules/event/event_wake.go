package event

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"svc/platform/logging"
)

// # Waking deliveries in batches
//
// A River job per event, inserted in the state change's transaction, is
// the simplest outbox, and the dearest part of it: River's insert is a row
// in a table of seven indexes (two of them GIN) plus the client's work,
// then a fetch and a completion, for every event. So a transaction run by
// db.RunInTx or db.BatchTx writes only the event's row, and once it has
// committed the process's Waker gathers the ids it committed for up to
// WakeDelay and inserts one job that carries them all (DeliverBatchArgs),
// whose worker claims them in one statement, sends them side by side and
// records the deliveries in one more.
//
// The row is still the guarantee, as before: an event whose wake is lost
// (the process killed between its commit and the flush, or the insert
// refused) is pending and due, and the Sweep, a periodic River job, queues
// it within SweepEvery. An event committed by a transaction that is not
// RunInTx's or BatchTx's gets its own job in that transaction, as before.

// WakeDelay is how long a Waker gathers committed events before it wakes
// their delivery: the batch's size at a given rate, and what it adds to an
// event's latency (SPEC's events have no latency bound; the service's is a
// first attempt within 2 s, docs/performance.md).
const WakeDelay = 20 * time.Millisecond

// wakeMax is the most events one wake job carries; a Waker that gathers
// that many wakes at once.
const wakeMax = 200

// wakeTimeout bounds one wake job's insert.
const wakeTimeout = 10 * time.Second

// JobInserter inserts a job outside any transaction (River's client).
type JobInserter interface {
	Insert(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// Waker wakes the delivery of the events this process committed (see
// above). Its zero value is not usable: set Inserter.
type Waker struct {
	Inserter JobInserter
	Log      *slog.Logger
	// Delay overrides WakeDelay (tests).
	Delay time.Duration

	mu      sync.Mutex
	ids     []uuid.UUID
	timer   *time.Timer
	flushes sync.WaitGroup
}

// Add wakes the delivery of the committed event id within the delay.
func (w *Waker) Add(id uuid.UUID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ids = append(w.ids, id)
	switch {
	case len(w.ids) >= wakeMax:
		w.flushLocked()
	case w.timer == nil:
		d := w.Delay
		if d <= 0 {
			d = WakeDelay
		}
		w.flushes.Add(1)
		w.timer = time.AfterFunc(d, func() {
			defer w.flushes.Done()
			w.mu.Lock()
			defer w.mu.Unlock()
			w.timer = nil
			w.flushLocked()
		})
	}
}

// flushLocked inserts the gathered ids' job, in a goroutine of its own.
func (w *Waker) flushLocked() {
	if w.timer != nil && w.timer.Stop() {
		w.flushes.Done() // the timer's function will not run
	}
	w.timer = nil
	if len(w.ids) == 0 {
		return
	}
	ids := w.ids
	w.ids = nil
	w.flushes.Add(1)
	go func() {
		defer w.flushes.Done()
		ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
		defer cancel()
		if _, err := w.Inserter.Insert(ctx, DeliverBatchArgs{EventIDs: ids}, nil); err != nil {
			logging.Or(w.Log).Warn("events committed but their delivery not woken: the sweep queues them within a minute",
				"events", len(ids), "error", err)
		}
	}()
}

// Close wakes what is gathered and waits for the wakes in flight.
func (w *Waker) Close() {
	w.mu.Lock()
	w.flushLocked()
	w.mu.Unlock()
	w.flushes.Wait()
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
// pending, due and free.
func (w *DeliverBatchWorker) Work(ctx context.Context, job *river.Job[DeliverBatchArgs]) error {
	worker := ""
	if n := len(job.AttemptedBy); n > 0 {
		worker = job.AttemptedBy[n-1]
	}
	_, err := w.Deliverer.AttemptBatch(ctx, job.Args.EventIDs, worker)
	return err
}

// Timeout leaves the HTTP timeout room to expire first: the batch's
// requests run side by side, each bounded by it.
func (w *DeliverBatchWorker) Timeout(*river.Job[DeliverBatchArgs]) time.Duration {
	return w.Deliverer.timeout() + claimMargin
}

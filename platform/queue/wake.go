package queue

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/trace"

	"svc/platform/logging"
)

// LiveStates are the River states of a job that will still run: a unique
// job's ByState, and what a sweep takes for "a job will do it".
var LiveStates = []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
	rivertype.JobStateRetryable, rivertype.JobStateScheduled,
}

// JobInserter inserts a job outside any transaction (River's client).
type JobInserter interface {
	Insert(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// DefaultWakeDelay is how long a Waker gathers ids before it wakes their
// work, unless its Delay says otherwise.
const DefaultWakeDelay = 20 * time.Millisecond

// DefaultWakeMax is the most ids one wake job carries, unless a Waker's Max
// says otherwise.
const DefaultWakeMax = 200

// wakeTimeout bounds one wake job's insert.
const wakeTimeout = 10 * time.Second

// Waker wakes the work on rows this process has committed (outbound
// events, stored processor webhooks) with one River job for many rows
// instead of a job per row inside each row's transaction: it gathers the
// ids it is given for Delay after the first, or until it holds Max, and
// then inserts Job(ids), outside any transaction. A job per row is an
// insert into River's table of seven indexes (two of them GIN) plus the
// client's work, then a fetch and a completion, for every row.
//
// A Waker only hastens: the rows are what guarantee the work, and a wake
// lost (the process killed between a commit and the insert, or the insert
// refused) leaves its rows to the periodic sweep of their module, which
// must find them without it.
type Waker[ID any] struct {
	Inserter JobInserter
	// Job is the job that carries ids.
	Job func(ids []ID) river.JobArgs
	// What the ids name, for the log ("events").
	What  string
	Log   *slog.Logger
	Delay time.Duration // zero: DefaultWakeDelay
	Max   int           // zero: DefaultWakeMax

	mu       sync.Mutex
	ids      []ID
	timer    *time.Timer
	flushing bool // a flush goroutine is inserting; it takes what gathers meanwhile
	closed   bool
	flushes  sync.WaitGroup
}

func (w *Waker[ID]) max() int {
	if w.Max <= 0 {
		return DefaultWakeMax
	}
	return w.Max
}

// Takes reports whether the work on a row written under ctx is left to the
// Waker w: not when w is nil, nor when ctx carries a sampled trace, whose
// row keeps a job of its own in its transaction, which carries the trace
// on to the work (docs/operations.md, "Traces"): a batch's job cannot be
// the child of every trace it wakes. Traces are off unless configured,
// and then no span is sampled.
func (w *Waker[ID]) Takes(ctx context.Context) bool {
	return w != nil && !trace.SpanContextFromContext(ctx).IsSampled()
}

// Add wakes the work on the committed row id within the delay. After
// Close it does nothing: the row's sweep finds it.
func (w *Waker[ID]) Add(id ID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.ids = append(w.ids, id)
	switch {
	case w.flushing:
		// The flush in flight inserts these next.
	case len(w.ids) >= w.max():
		w.startFlushLocked()
	case w.timer == nil:
		w.timer = time.AfterFunc(w.delay(), w.fire)
	}
}

// fire is the delay's end.
func (w *Waker[ID]) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = nil
	if !w.flushing && !w.closed && len(w.ids) > 0 {
		w.startFlushLocked()
	}
}

// startFlushLocked starts the one flush goroutine: it inserts what is
// gathered, Max ids a job, for as long as full jobs are gathered; a rest
// short of Max waits for the delay again (so that a burst still makes
// full jobs), or for Close. At most one insert is in flight, whatever the
// rate or the database's pace.
func (w *Waker[ID]) startFlushLocked() {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	w.flushing = true
	w.flushes.Add(1)
	go func() {
		defer w.flushes.Done()
		for first := true; ; first = false {
			w.mu.Lock()
			if len(w.ids) == 0 || (!first && !w.closed && len(w.ids) < w.max()) {
				w.flushing = false
				if len(w.ids) > 0 && w.timer == nil {
					w.timer = time.AfterFunc(w.delay(), w.fire)
				}
				w.mu.Unlock()
				return
			}
			n := min(len(w.ids), w.max())
			ids := w.ids[:n:n]
			w.ids = w.ids[n:]
			w.mu.Unlock()
			w.insert(ids)
		}
	}()
}

func (w *Waker[ID]) delay() time.Duration {
	if w.Delay <= 0 {
		return DefaultWakeDelay
	}
	return w.Delay
}

func (w *Waker[ID]) insert(ids []ID) {
	ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
	defer cancel()
	if _, err := w.Inserter.Insert(ctx, w.Job(ids), nil); err != nil {
		logging.Or(w.Log).Warn("work on committed rows not woken: their sweep picks them up", "what", w.What,
			"count", len(ids), "error", err)
	}
}

// Close wakes what is gathered, waits for the wakes in flight, and makes
// every later Add a no-op (the rows' sweep finds those).
func (w *Waker[ID]) Close() {
	w.mu.Lock()
	w.closed = true
	if !w.flushing && len(w.ids) > 0 {
		w.startFlushLocked()
	} else if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	w.mu.Unlock()
	w.flushes.Wait()
}

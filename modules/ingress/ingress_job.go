package ingress

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/uptrace/bun"

	"svc/platform/btcpay"
	"svc/platform/db"
	"svc/platform/queue"
)

// ProcessArgs asks for one stored delivery to be processed.
type ProcessArgs struct {
	DeliveryID int64 `json:"delivery_id"`
}

// Kind is the job kind.
func (ProcessArgs) Kind() string { return "processor_webhook" }

// InsertOpts makes the job unique among live ones by its delivery: a
// batch's retry and a sweep never queue a second.
func (ProcessArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: queue.LiveStates}}
}

// Worker processes stored deliveries: it hands the event to the handler of
// its kind, then marks the delivery processed. A handler's failure is
// recorded and retried by River; a delivery already processed is skipped.
type Worker struct {
	river.WorkerDefaults[ProcessArgs]
	Service *Service
}

// Work processes one delivery.
func (w *Worker) Work(ctx context.Context, job *river.Job[ProcessArgs]) error {
	gone, err := w.Service.process(ctx, job.Args.DeliveryID)
	if gone != nil {
		return river.JobCancel(gone)
	}
	return err
}

// process processes the stored delivery id unless it was already: it hands
// the event to the handler of its kind, then marks the delivery processed,
// or records the handler's failure and returns it. gone is a delivery that
// no retry can process (missing, or a body that no longer parses).
func (s *Service) process(ctx context.Context, id int64) (gone, err error) {
	d, err := s.Get(ctx, id)
	if db.IsNoRows(err) {
		return fmt.Errorf("processor webhook %d does not exist", id), nil
	}
	if err != nil {
		return nil, err
	}
	if d.ProcessedAt != nil {
		return nil, nil
	}
	hctx, h := withHandling(ctx, []int64{d.ID}, s.Now().UTC())
	if gone, err := s.hand(hctx, parse(d)); gone != nil || err != nil {
		return gone, err
	}
	if h.marked.Load() { // in the handler's own transaction (ProcessedWith)
		return nil, nil
	}
	return nil, s.markProcessed(ctx, d.ID)
}

// parsed is a stored delivery with its event, or why its body no longer
// parses.
type parsed struct {
	d   Delivery
	ev  btcpay.WebhookEvent
	err error
}

func parse(d Delivery) parsed {
	ev, err := btcpay.ParseWebhookEvent(d.Body)
	return parsed{d: d, ev: ev, err: err}
}

// subject names what the delivery is about, for a batch to hand one
// delivery per subject: an invoice (with the deposit its metadata names)
// or a payout; "" when it cannot tell (it is handed on its own).
func (p parsed) subject() string {
	switch {
	case p.err != nil:
		return ""
	case p.ev.IsInvoiceEvent() && p.ev.InvoiceID != "":
		return "invoice\x00" + p.ev.InvoiceID + "\x00" + p.ev.OrderID()
	case p.ev.IsPayoutEvent() && p.ev.PayoutID != "":
		return "payout\x00" + p.ev.PayoutID
	}
	return ""
}

// hand hands the stored delivery p to the handler of its kind; a failure is
// recorded on it and returned.
func (s *Service) hand(ctx context.Context, p parsed) (gone, err error) {
	d, ev := p.d, p.ev
	if p.err != nil { // it parsed when it was stored; the body never changes
		gone = fmt.Errorf("processor webhook %d: %w", d.ID, p.err)
		// Counted as an attempt, so that the sweep (never attempted
		// deliveries) leaves it.
		if merr := s.markFailed(ctx, d.ID, gone); merr != nil {
			s.log().ErrorContext(ctx, "record processor webhook failure", "delivery", d.ID, "error", merr)
		}
		return gone, nil
	}
	if err := s.dispatch(ctx, d, ev); err != nil {
		if merr := s.markFailed(ctx, d.ID, err); merr != nil {
			s.log().ErrorContext(ctx, "record processor webhook failure", "delivery", d.ID, "error", merr)
		}
		return nil, fmt.Errorf("process processor webhook %d (%s): %w", d.ID, ev.Type, err)
	}
	return nil, nil
}

// ProcessBatchArgs wakes the processing of the deliveries a Waker gathered
// (store).
type ProcessBatchArgs struct {
	DeliveryIDs []int64 `json:"delivery_ids"`
}

// Kind is the job kind.
func (ProcessBatchArgs) Kind() string { return "processor_webhook_batch" }

// NewWaker returns the Waker of the deliveries this process stores: at
// most wakeMax a job, all handed at once, so that a job lasts as long as
// its slowest handler (a reconcile's few processor calls), within the
// job's timeout.
func NewWaker(ins queue.JobInserter, log *slog.Logger) *queue.Waker[int64] {
	return &queue.Waker[int64]{Inserter: ins, Log: log, What: "processor webhooks", Max: wakeMax,
		Job: func(ids []int64) river.JobArgs { return ProcessBatchArgs{DeliveryIDs: ids} }}
}

const (
	wakeMax         = batchProcessors
	batchProcessors = 16
	// retryAloneAfter is when a delivery whose processing failed in a
	// batch is tried again, by a job of its own.
	retryAloneAfter = 10 * time.Second
)

// BatchWorker processes the deliveries of a wake job.
type BatchWorker struct {
	river.WorkerDefaults[ProcessBatchArgs]
	Service *Service
}

// Work processes the job's deliveries not processed yet, with the reads
// and the processed marks shared: one statement reads them all, one marks
// those handled whose handler did not mark them in its own transaction
// (ProcessedWith: a deposit's reconcile does). Of the deliveries about one
// subject (an invoice, a payout) only the last is handed to its handler,
// batchProcessors subjects at once: a handler acts on the subject's state
// as it reads it from the processor (see InvoiceHandler), which is at
// least as new as
// every delivery stored before this job was, so the others would only
// repeat it; they are marked with it. A delivery whose handler fails gets
// a job of its own (ProcessArgs), which River retries on its schedule, so
// that it holds up none of the others (its subject's other deliveries are
// marked: the retry reads the subject again). The batch fails, and River
// runs it again (the deliveries marked are skipped, the others handed
// again, which their handlers allow), only when a retry's job or the marks
// cannot be written.
func (w *BatchWorker) Work(ctx context.Context, job *river.Job[ProcessBatchArgs]) error {
	s := w.Service
	var ds []Delivery
	if err := s.DB.NewSelect().Model(&ds).Where("id IN (?) AND processed_at IS NULL", bun.In(job.Args.DeliveryIDs)).
		OrderExpr("id").Scan(ctx); err != nil && !db.IsNoRows(err) {
		return fmt.Errorf("read %d processor webhooks: %w", len(job.Args.DeliveryIDs), err)
	}
	type group struct {
		last   parsed
		others []int64
	}
	var (
		groups []*group
		bySubj = map[string]*group{}
	)
	for _, d := range ds {
		p := parse(d)
		key := p.subject()
		if g, ok := bySubj[key]; ok && key != "" {
			g.others = append(g.others, g.last.d.ID)
			g.last = p
			continue
		}
		g := &group{last: p}
		groups = append(groups, g)
		if key != "" {
			bySubj[key] = g
		}
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		handled  []int64
		firstErr error
		sem      = make(chan struct{}, batchProcessors)
	)
	now := s.Now().UTC()
	for _, g := range groups {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			d := g.last.d
			hctx, h := withHandling(ctx, append(append([]int64(nil), g.others...), d.ID), now)
			gone, err := s.hand(hctx, g.last)
			mu.Lock()
			defer mu.Unlock()
			if h.marked.Load() {
				// Marked in the transaction that made its effect
				// (ProcessedWith): handled, whatever the handler did
				// after it.
				if err != nil {
					s.log().WarnContext(ctx, "processor webhook handled, then its handler failed", "delivery", d.ID, "error", err)
				}
				return
			}
			handled = append(handled, g.others...)
			switch {
			case gone != nil:
				s.log().WarnContext(ctx, "processor webhook not processed: it cannot be", "delivery", d.ID, "error", gone)
			case err != nil:
				s.log().WarnContext(ctx, "processor webhook failed in a batch: retried by a job of its own", "delivery", d.ID, "error", err)
				if ierr := s.retryAlone(ctx, d.ID); ierr != nil && firstErr == nil {
					firstErr = fmt.Errorf("processor webhook %d: %w (and its retry not queued: %v)", d.ID, err, ierr)
				}
			default:
				handled = append(handled, d.ID)
			}
		}()
	}
	wg.Wait()
	if len(handled) > 0 {
		if err := s.markProcessed(ctx, handled...); err != nil {
			return fmt.Errorf("mark %d processor webhooks processed: %w", len(handled), err)
		}
	}
	return firstErr
}

// retryAlone queues the processing of delivery id as a job of its own.
func (s *Service) retryAlone(ctx context.Context, id int64) error {
	return db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		_, err := s.Inserter.InsertTx(ctx, tx.Tx, ProcessArgs{DeliveryID: id}, &river.InsertOpts{ScheduledAt: s.Now().Add(retryAloneAfter)})
		return err
	})
}

// SweepEvery is how often Sweep runs (and once when a worker starts).
const SweepEvery = time.Minute

// sweepAfter is how long after it was stored a delivery never attempted is
// taken for one whose wake was lost.
const sweepAfter = time.Minute

// Sweep queues the processing of every delivery stored more than
// sweepAfter ago that was never attempted and that no live wake job names:
// one whose wake was lost, the process killed between the delivery's
// commit and its wake. It returns how many it queued.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	var ids []int64
	err := s.DB.NewRaw(`SELECT id FROM processor_webhooks
 WHERE processed_at IS NULL AND attempts = 0 AND received_at < ?
   AND id NOT IN (SELECT x.id::bigint FROM river_job j,
          jsonb_array_elements_text(CASE jsonb_typeof(j.args->'delivery_ids') WHEN 'array' THEN j.args->'delivery_ids' END) AS x (id)
        WHERE j.state IN (?) AND j.kind = ? AND x.id IS NOT NULL)
 ORDER BY received_at LIMIT 1000`, s.Now().UTC().Add(-sweepAfter), bun.In(queue.LiveStates), ProcessBatchArgs{}.Kind()).Scan(ctx, &ids)
	if err != nil {
		return 0, fmt.Errorf("sweep processor webhooks: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	n := 0
	err = db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		n = 0
		for _, id := range ids {
			res, err := s.Inserter.InsertTx(ctx, tx.Tx, ProcessArgs{DeliveryID: id}, nil)
			if err != nil {
				return err
			}
			if !res.UniqueSkippedAsDuplicate {
				n++
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sweep processor webhooks: queue: %w", err)
	}
	return n, nil
}

// SweepArgs asks for a Sweep.
type SweepArgs struct{}

// Kind is the job kind.
func (SweepArgs) Kind() string { return "processor_webhook_sweep" }

// SweepWorker runs Sweep.
type SweepWorker struct {
	river.WorkerDefaults[SweepArgs]
	Service *Service
}

// Work sweeps.
func (w *SweepWorker) Work(ctx context.Context, _ *river.Job[SweepArgs]) error {
	n, err := w.Service.Sweep(ctx)
	if n > 0 {
		w.Service.log().WarnContext(ctx, "queued processor webhooks whose wake was lost", "count", n)
	}
	return err
}

func (s *Service) dispatch(ctx context.Context, d Delivery, ev btcpay.WebhookEvent) error {
	switch {
	case ev.IsInvoiceEvent():
		if s.Invoices == nil {
			return nil
		}
		return s.Invoices.InvoiceEvent(ctx, InvoiceEvent{
			DeliveryKey: d.DeliveryKey, Type: ev.Type, InvoiceID: ev.InvoiceID, OrderID: ev.OrderID(),
			AfterExpiration: ev.AfterExpiration, PaymentMethodID: ev.PaymentMethodID, Payment: ev.Payment,
			OverPaid: ev.OverPaid, ManuallyMarked: ev.ManuallyMarked, PartiallyPaid: ev.PartiallyPaid, At: ev.Timestamp.Time,
		})
	case ev.IsPayoutEvent():
		if s.Payouts == nil {
			return nil
		}
		return s.Payouts.PayoutEvent(ctx, PayoutEvent{DeliveryKey: d.DeliveryKey, Type: ev.Type, PayoutID: ev.PayoutID,
			State: ev.PayoutState, At: ev.Timestamp.Time})
	}
	return nil
}

// PruneArgs asks for processed deliveries past INGRESS_RETENTION to be
// deleted (hourly).
type PruneArgs struct{}

// Kind is the job kind.
func (PruneArgs) Kind() string { return "processor_webhook_prune" }

// PruneWorker runs Service.Prune.
type PruneWorker struct {
	river.WorkerDefaults[PruneArgs]
	Service   *Service
	Retention time.Duration
}

// Work prunes.
func (w *PruneWorker) Work(ctx context.Context, _ *river.Job[PruneArgs]) error {
	_, err := w.Service.Prune(ctx, w.Service.Now().Add(-w.Retention))
	return err
}

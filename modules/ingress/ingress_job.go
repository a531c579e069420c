package ingress

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"svc/platform/btcpay"
	"svc/platform/db"
)

// ProcessArgs asks for one stored delivery to be processed.
type ProcessArgs struct {
	DeliveryID int64 `json:"delivery_id"`
}

// Kind is the job kind.
func (ProcessArgs) Kind() string { return "processor_webhook" }

// Worker processes stored deliveries: it hands the event to the handler of
// its kind, then marks the delivery processed. A handler's failure is
// recorded and retried by River; a delivery already processed is skipped.
type Worker struct {
	river.WorkerDefaults[ProcessArgs]
	Service *Service
}

// Work processes one delivery.
func (w *Worker) Work(ctx context.Context, job *river.Job[ProcessArgs]) error {
	s := w.Service
	d, err := s.Get(ctx, job.Args.DeliveryID)
	if db.IsNoRows(err) {
		return river.JobCancel(fmt.Errorf("processor webhook %d does not exist", job.Args.DeliveryID))
	}
	if err != nil {
		return err
	}
	if d.ProcessedAt != nil {
		return nil
	}
	ev, err := btcpay.ParseWebhookEvent(d.Body)
	if err != nil { // it parsed when it was stored; the body never changes
		return river.JobCancel(fmt.Errorf("processor webhook %d: %w", d.ID, err))
	}
	if err := s.dispatch(ctx, d, ev); err != nil {
		if merr := s.markFailed(ctx, d.ID, err); merr != nil {
			s.log().ErrorContext(ctx, "record processor webhook failure", "delivery", d.ID, "error", merr)
		}
		return fmt.Errorf("process processor webhook %d (%s): %w", d.ID, ev.Type, err)
	}
	return s.markProcessed(ctx, d.ID)
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

package ingress

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"svc/platform/btcpay"
	"svc/platform/db"
)

// Delivery is one stored webhook delivery.
type Delivery struct {
	bun.BaseModel `bun:"table:processor_webhooks"`

	ID          int64      `bun:"id,pk,autoincrement"`
	DeliveryKey string     `bun:"delivery_key"`
	DeliveryID  *string    `bun:"delivery_id"`
	EventType   string     `bun:"event_type"`
	StoreID     string     `bun:"store_id"`
	InvoiceID   *string    `bun:"invoice_id"`
	PayoutID    *string    `bun:"payout_id"`
	Body        []byte     `bun:"body"`
	ReceivedAt  time.Time  `bun:"received_at"`
	ProcessedAt *time.Time `bun:"processed_at"`
	Attempts    int        `bun:"attempts"`
	LastError   *string    `bun:"last_error"`
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// store records a delivery, and wakes its processing once it committed
// (Waker) or, without a Waker, inserts its processing job in the same
// transaction; a type stored only for the record (recordOnly) is stored as
// processed in one statement. It reports false when the delivery was
// already stored (a duplicate), in which case nothing is inserted.
func (s *Service) store(ctx context.Context, key string, ev btcpay.WebhookEvent, body []byte) (bool, error) {
	d := &Delivery{DeliveryKey: key, DeliveryID: nullable(ev.DeliveryID), EventType: ev.Type, StoreID: ev.StoreID,
		InvoiceID: nullable(ev.InvoiceID), PayoutID: nullable(ev.PayoutID), Body: body, ReceivedAt: s.Now().UTC()}
	if recordOnly[ev.Type] {
		d.ProcessedAt = &d.ReceivedAt
		stored, err := insertDelivery(ctx, s.DB, d)
		if err != nil {
			return false, fmt.Errorf("store processor webhook: %w", err)
		}
		return stored, nil
	}
	if s.Waker.Takes(ctx) {
		// One statement that commits on its own; its processing is woken
		// once it has (Waker), and Sweep finds it if that wake is lost.
		// (A delivery in a sampled trace keeps its own job: Waker.Takes.)
		stored, err := insertDelivery(ctx, s.DB, d)
		if err != nil {
			return false, fmt.Errorf("store processor webhook: %w", err)
		}
		if stored {
			s.Waker.Add(d.ID)
		}
		return stored, nil
	}
	var stored bool
	err := db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		var err error
		if stored, err = insertDelivery(ctx, tx, d); err != nil || !stored {
			return err // already stored, and its job with it
		}
		if _, err := s.Inserter.InsertTx(ctx, tx.Tx, ProcessArgs{DeliveryID: d.ID}, nil); err != nil {
			stored = false
			return fmt.Errorf("queue processor webhook %d: %w", d.ID, err)
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store processor webhook: %w", err)
	}
	return stored, nil
}

// insertDelivery inserts d and sets its id; false when a delivery with its
// key is stored already (nothing inserted). The statement sends real
// parameters (db.Querier): it runs for every webhook.
func insertDelivery(ctx context.Context, idb bun.IDB, d *Delivery) (bool, error) {
	q, err := db.SQLOf(idb)
	if err != nil {
		return false, err
	}
	err = q.QueryRowContext(ctx, `INSERT INTO processor_webhooks (delivery_key, delivery_id, event_type, store_id, invoice_id, payout_id, body, received_at, processed_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (delivery_key) DO NOTHING
RETURNING id`, d.DeliveryKey, d.DeliveryID, d.EventType, d.StoreID, d.InvoiceID, d.PayoutID, d.Body, d.ReceivedAt, d.ProcessedAt).Scan(&d.ID)
	if db.IsNoRows(err) {
		return false, nil
	}
	return err == nil, err
}

// Get returns a stored delivery.
func (s *Service) Get(ctx context.Context, id int64) (Delivery, error) {
	var d Delivery
	err := db.GetModel(ctx, s.DB, &d, "WHERE id = $1", id)
	return d, err
}

// ByKey returns the stored delivery with the given identity.
func (s *Service) ByKey(ctx context.Context, key string) (Delivery, error) {
	var d Delivery
	err := s.DB.NewSelect().Model(&d).Where("delivery_key = ?", key).Scan(ctx)
	return d, err
}

// markProcessed marks the deliveries ids processed (a batch's in one
// statement); markFailed records one's failure. Real parameters (db.Exec).
func (s *Service) markProcessed(ctx context.Context, ids ...int64) error {
	_, err := db.Exec(ctx, s.DB, markProcessedSQL(1), s.Now().UTC(), ids)
	return err
}

// markProcessedSQL is the processed mark of the deliveries whose ids are
// parameter first+1, as of parameter first: markProcessed's statement,
// and ProcessedWith's in the caller's.
func markProcessedSQL(first int) string {
	return fmt.Sprintf(`UPDATE processor_webhooks SET processed_at = $%d::timestamptz, attempts = attempts + 1, last_error = NULL
 WHERE id = ANY($%d::bigint[]) AND processed_at IS NULL`, first, first+1)
}

func (s *Service) markFailed(ctx context.Context, id int64, cause error) error {
	_, err := db.Exec(ctx, s.DB, "UPDATE processor_webhooks SET attempts = attempts + 1, last_error = $1 WHERE id = $2 AND processed_at IS NULL",
		truncate(cause.Error(), 1000), id)
	return err
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Prune deletes the deliveries handed over (processed) before cutoff and
// returns how many. Deliveries not yet processed are kept whatever their
// age. A delivery BTCPay repeats after its row was pruned is stored and
// processed again, which the idempotent reconcile makes harmless.
func (s *Service) Prune(ctx context.Context, cutoff time.Time) (int64, error) {
	res, err := s.DB.NewDelete().Model((*Delivery)(nil)).
		Where("processed_at IS NOT NULL AND received_at < ?", cutoff).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("ingress: prune: %w", err)
	}
	return res.RowsAffected()
}

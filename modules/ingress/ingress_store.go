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

// store records a delivery and its processing job in one transaction, or,
// for a type stored only for the record (recordOnly), the delivery as
// processed in one statement. It reports false when the delivery was
// already stored (a duplicate), in which case nothing is inserted.
func (s *Service) store(ctx context.Context, key string, ev btcpay.WebhookEvent, body []byte) (bool, error) {
	d := &Delivery{DeliveryKey: key, DeliveryID: nullable(ev.DeliveryID), EventType: ev.Type, StoreID: ev.StoreID,
		InvoiceID: nullable(ev.InvoiceID), PayoutID: nullable(ev.PayoutID), Body: body, ReceivedAt: s.Now().UTC()}
	if recordOnly[ev.Type] {
		d.ProcessedAt = &d.ReceivedAt
		res, err := s.DB.NewInsert().Model(d).On("CONFLICT (delivery_key) DO NOTHING").Exec(ctx)
		if err != nil {
			return false, fmt.Errorf("store processor webhook: %w", err)
		}
		n, err := res.RowsAffected()
		return n == 1, err
	}
	var stored bool
	err := db.RunInTx(ctx, s.DB, func(ctx context.Context, tx bun.Tx) error {
		stored = false
		res, err := tx.NewInsert().Model(d).On("CONFLICT (delivery_key) DO NOTHING").Returning("id").Exec(ctx)
		if err != nil {
			return fmt.Errorf("store processor webhook: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // already stored, and its job with it
		}
		if _, err := s.Inserter.InsertTx(ctx, tx.Tx, ProcessArgs{DeliveryID: d.ID}, nil); err != nil {
			return fmt.Errorf("queue processor webhook %d: %w", d.ID, err)
		}
		stored = true
		return nil
	})
	return stored, err
}

// Get returns a stored delivery.
func (s *Service) Get(ctx context.Context, id int64) (Delivery, error) {
	var d Delivery
	err := s.DB.NewSelect().Model(&d).Where("id = ?", id).Scan(ctx)
	return d, err
}

// ByKey returns the stored delivery with the given identity.
func (s *Service) ByKey(ctx context.Context, key string) (Delivery, error) {
	var d Delivery
	err := s.DB.NewSelect().Model(&d).Where("delivery_key = ?", key).Scan(ctx)
	return d, err
}

func (s *Service) markProcessed(ctx context.Context, id int64) error {
	_, err := s.DB.NewUpdate().Model((*Delivery)(nil)).
		Set("processed_at = ?, attempts = attempts + 1, last_error = NULL", s.Now().UTC()).
		Where("id = ? AND processed_at IS NULL", id).Exec(ctx)
	return err
}

func (s *Service) markFailed(ctx context.Context, id int64, cause error) error {
	_, err := s.DB.NewUpdate().Model((*Delivery)(nil)).
		Set("attempts = attempts + 1, last_error = ?", truncate(cause.Error(), 1000)).
		Where("id = ? AND processed_at IS NULL", id).Exec(ctx)
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

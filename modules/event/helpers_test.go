package event_test

import (
	"context"
	"database/sql"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/alert"
	"svc/modules/event"
	"svc/platform/clock"
	"svc/platform/db"
	"svc/platform/dbtest"
	"svc/platform/queue"
)

const secret = "test-signing-secret"

type bundle struct {
	db     *db.DB
	fake   *clock.Fake
	ins    *river.Client[*sql.Tx]
	events *event.Service
	alerts *alert.Service
}

func setup(t *testing.T) *bundle {
	t.Helper()
	d := dbtest.New(t)
	ins, err := queue.NewInserter(d.SQL, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	fake := clock.NewFake(time.Date(2026, 5, 4, 10, 0, 0, 123456000, time.UTC))
	return &bundle{
		db: d, fake: fake, ins: ins,
		events: &event.Service{DB: d.Bun, Inserter: ins, Now: fake.Now},
		alerts: &alert.Service{DB: d.Bun, Log: slog.New(slog.DiscardHandler), Now: fake.Now},
	}
}

func (b *bundle) deliverer(url string, timeout time.Duration) *event.Deliverer {
	return &event.Deliverer{DB: b.db.Bun, Inserter: b.ins, Alerts: b.alerts, Now: b.fake.Now,
		Log: slog.New(slog.DiscardHandler), URL: url, Secret: []byte(secret), Timeout: timeout}
}

func (b *bundle) emit(t *testing.T, typ event.Type, data any) event.Event {
	t.Helper()
	return emitWith(t, b.db.Bun, b.events, typ, data)
}

func emitWith(t *testing.T, idb *bun.DB, s *event.Service, typ event.Type, data any) event.Event {
	t.Helper()
	var e event.Event
	err := db.RunInTx(context.Background(), idb, func(ctx context.Context, tx bun.Tx) error {
		var err error
		e, err = s.Emit(ctx, tx, typ, data)
		return err
	})
	require.NoError(t, err)
	return e
}

func (b *bundle) get(t *testing.T, id uuid.UUID) event.Event {
	t.Helper()
	e, err := b.events.Get(context.Background(), id)
	require.NoError(t, err)
	return e
}

// job is a delivery job as River stored it.
type job struct {
	ID          int64     `bun:"id"`
	State       string    `bun:"state"`
	ScheduledAt time.Time `bun:"scheduled_at"`
	Attempt     int       `bun:"attempt_arg"`
	Cycle       int       `bun:"cycle_arg"`
}

// deliveryJobs returns the delivery jobs of an event, oldest first.
func deliveryJobs(t testing.TB, idb bun.IDB, id uuid.UUID) []job {
	t.Helper()
	var out []job
	err := idb.NewRaw(`SELECT id, state, scheduled_at, (args->>'attempt')::int AS attempt_arg, (args->>'cycle')::int AS cycle_arg
		FROM river_job WHERE kind = 'event_deliver' AND args->>'event_id' = ? ORDER BY id`, id.String()).Scan(context.Background(), &out)
	require.NoError(t, err)
	return out
}

func countRows(t testing.TB, idb bun.IDB, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, idb.NewRaw(query, args...).Scan(context.Background(), &n))
	return n
}

func ptr[T any](v T) *T { return &v }

// samples returns valid data for every type, with and without the
// optional values.
func samples() []event.Data {
	dep := "0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b"
	return []event.Data{
		event.DepositDetectedData{DepositID: dep, ExternalUserID: ptr("user-1"), Asset: "BTC", Status: "confirming", PaymentID: "a1b2c3-0", Amount: "0.00012345"},
		event.DepositSettledData{DepositID: dep, ExternalUserID: ptr("user-1"), Asset: "BTC", Status: "settled", AmountCredited: "0.00012345"},
		event.DepositReviewRequiredData{DepositID: dep, ExternalUserID: ptr("user-1"), Asset: "USDT_TRC20", Status: "review", AmountCredited: "0",
			PaymentID: ptr("9f8e7d"), Amount: ptr("10.500000"), ReviewReason: "payment after expiry"},
		event.DepositReviewRequiredData{DepositID: dep, ExternalUserID: ptr("user-1"), Asset: "BTC", Status: "review", AmountCredited: "0.00010000",
			ReviewReason: "invoice marked settled in the processor"},
		event.DepositExpiredData{DepositID: dep, ExternalUserID: ptr("user-1"), Asset: "BTC_LN", Status: "expired"},
		event.WithdrawalPendingApprovalData{WithdrawalID: "wd-1", ExternalUserID: ptr("user-2"), Asset: "BTC", Status: "pending_approval",
			AmountGross: "1.50000000", ApprovalReason: "above the per-withdrawal auto-approval limit"},
		event.WithdrawalBroadcastData{WithdrawalID: "wd-1", ExternalUserID: ptr("user-2"), Asset: "BTC", Status: "broadcast",
			AmountGross: "1.50000000", Fee: "0.00002000", AmountNet: "1.49998000", Txid: "f00dfeed"},
		event.WithdrawalCompletedData{WithdrawalID: "wd-1", ExternalUserID: ptr("user-2"), Asset: "BTC", Status: "confirmed",
			AmountGross: "1.50000000", Fee: "0.00002000", AmountNet: "1.49998000", Txid: ptr("f00dfeed")},
		event.WithdrawalCompletedData{WithdrawalID: "wd-2", ExternalUserID: ptr("user-2"), Asset: "BTC_LN", Status: "confirmed",
			AmountGross: "0.00100000", Fee: "0.00000010", AmountNet: "0.00099990"},
		event.WithdrawalFailedData{WithdrawalID: "wd-3", ExternalUserID: ptr("user-2"), Asset: "USDT_TRC20", Status: "failed",
			AmountGross: "25.000000", FailureReason: "processor refused the payout"},
		event.WithdrawalFailedData{WithdrawalID: "wd-4", ExternalUserID: ptr("user-2"), Asset: "BTC", Status: "failed",
			AmountGross: "0.01000000", Fee: ptr("0.00001000"), AmountNet: ptr("0.00999000"), Txid: ptr("abcd"), FailureReason: "payout failed"},
		event.TransferCompletedData{TransferID: dep, Status: "completed", Legs: []event.TransferLegData{
			{From: event.AccountRefData{ExternalUserID: "user-1"}, To: event.AccountRefData{PlatformAccount: "prize_pool"}, Asset: "USDT_TRC20", Amount: "5.000000"},
			{From: event.AccountRefData{PlatformAccount: "prize_pool"}, To: event.AccountRefData{ExternalUserID: "user-2"}, Asset: "BTC", Amount: "0.00010000"},
		}, Metadata: map[string]string{"game_id": "918"}, ClientReference: ptr("game-918"), CreatedAt: "2025-01-31T12:34:56.789012+00:00"},
		event.HoldCapturedData(holdSample("captured", "0.00095000", "0.00005000", []event.HoldCapture{
			{To: event.AccountRefData{ExternalUserID: "seller-3"}, Amount: "0.00090000"},
			{To: event.AccountRefData{PlatformAccount: "commission"}, Amount: "0.00005000"}})),
		event.HoldVoidedData(holdSample("voided", "0.00000000", "0.00100000", []event.HoldCapture{})),
		event.HoldExpiredData(holdSample("expired", "0.00000000", "0.00100000", []event.HoldCapture{})),
	}
}

// holdSample is an escrow hold's data in the status given.
func holdSample(status, captured, released string, captures []event.HoldCapture) event.HoldData {
	return event.HoldData{HoldID: "0190b7e2-5a4c-7d3e-9f10-2b3c4d5e6f70", Status: status,
		From: event.AccountRefData{ExternalUserID: "buyer-7"}, Asset: "BTC", Amount: "0.00100000", CapturedAmount: captured,
		ReleasedAmount: released, Captures: captures, ExpiresAt: "2026-07-08T12:00:00+00:00", Description: ptr("order 1042"),
		Metadata: map[string]string{"order_id": "1042"}, ClientReference: ptr("order-1042"),
		CreatedAt: "2026-07-01T12:00:00+00:00", UpdatedAt: "2026-07-02T09:30:00+00:00"}
}

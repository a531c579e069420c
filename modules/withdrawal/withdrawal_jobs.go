package withdrawal

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"svc/platform/queue"
)

// ConfirmUSDTArgs asks for one pass over the broadcast USDT_TRC20
// withdrawals (every USDTConfirmEvery).
type ConfirmUSDTArgs struct{}

// Kind is the job kind.
func (ConfirmUSDTArgs) Kind() string { return "withdrawal_usdt_confirm" }

// ConfirmUSDTWorker runs Service.ConfirmUSDT. A withdrawal whose transfer
// cannot be read now is retried by the next pass, so only a failure to
// read the list or the solidified block fails the job.
type ConfirmUSDTWorker struct {
	river.WorkerDefaults[ConfirmUSDTArgs]
	Service *Service
}

// Work confirms what is final.
func (w *ConfirmUSDTWorker) Work(ctx context.Context, _ *river.Job[ConfirmUSDTArgs]) error {
	_, err := w.Service.ConfirmUSDT(ctx)
	return err
}

// Timeout gives a pass over a full batch room beyond River's default.
func (w *ConfirmUSDTWorker) Timeout(*river.Job[ConfirmUSDTArgs]) time.Duration {
	return queue.LongestJobTimeout
}

// PayoutsArgs asks for one pass of the payout work (every PAYOUT_POLL_INTERVAL):
// submit what is due, follow every open payout.
type PayoutsArgs struct{}

// Kind is the job kind.
func (PayoutsArgs) Kind() string { return "withdrawal_payouts" }

// PayoutsWorker runs Service.ProcessPayouts. Every step is guarded by the
// withdrawal's state and the submitter's claim, so passes that overlap (two
// workers) or repeat are safe.
type PayoutsWorker struct {
	river.WorkerDefaults[PayoutsArgs]
	Service *Service
}

// Work runs one pass.
func (w *PayoutsWorker) Work(ctx context.Context, _ *river.Job[PayoutsArgs]) error {
	return w.Service.ProcessPayouts(ctx)
}

// Timeout gives a pass over full batches room beyond River's default.
func (w *PayoutsWorker) Timeout(*river.Job[PayoutsArgs]) time.Duration {
	return queue.LongestJobTimeout
}

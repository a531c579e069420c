package withdrawal

import (
	"context"
	"time"

	"svc/platform/queue"
)

// ConfirmUSDTWorker runs Service.ConfirmUSDT. A withdrawal whose transfer
// cannot be read now is retried by the next pass, so only a failure to
// read the list or the solidified block fails the job.
type ConfirmUSDTWorker = queue.Pass[ConfirmUSDTArgs, *Service]

// PayoutsWorker runs Service.ProcessPayouts. Every step is guarded by the
// withdrawal's state and the submitter's claim, so passes that overlap (two
// workers) or repeat are safe.
type PayoutsWorker = queue.Pass[PayoutsArgs, *Service]

// ConfirmUSDTArgs asks for one pass over the broadcast USDT_TRC20
// withdrawals (every USDTConfirmEvery).
type ConfirmUSDTArgs struct{}

// Kind is the job kind.
func (ConfirmUSDTArgs) Kind() string { return "withdrawal_usdt_confirm" }

// Pass confirms what is final.
func (ConfirmUSDTArgs) Pass(ctx context.Context, s *Service) error {
	return queue.Err(s.ConfirmUSDT(ctx))
}

// Timeout allows a pass over a full batch the longest any job may run (queue.LongestJobTimeout).
func (ConfirmUSDTArgs) Timeout() time.Duration { return queue.LongestJobTimeout }

// PayoutsArgs asks for one pass of the payout work (every PAYOUT_POLL_INTERVAL):
// submit what is due, follow every open payout.
type PayoutsArgs struct{}

// Kind is the job kind.
func (PayoutsArgs) Kind() string { return "withdrawal_payouts" }

// Pass runs one pass.
func (PayoutsArgs) Pass(ctx context.Context, s *Service) error { return s.ProcessPayouts(ctx) }

// Timeout allows a pass over full batches the longest any job may run (queue.LongestJobTimeout).
func (PayoutsArgs) Timeout() time.Duration { return queue.LongestJobTimeout }

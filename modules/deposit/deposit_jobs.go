package deposit

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"svc/platform/queue"
)

// PollArgs asks for one poll of the deposits (every DEPOSIT_POLL_INTERVAL).
type PollArgs struct{}

// Kind is the job kind.
func (PollArgs) Kind() string { return "deposit_poll" }

// PollWorker runs Service.Poll.
type PollWorker struct {
	river.WorkerDefaults[PollArgs]
	Service *Service
}

// Work polls. A deposit that cannot be reconciled is retried by the next
// poll, so only a failure to read the list, or a processor found
// unreachable, fails the job.
func (w *PollWorker) Work(ctx context.Context, _ *river.Job[PollArgs]) error {
	_, err := w.Service.Poll(ctx)
	return err
}

// Timeout gives a poll of a full batch room beyond River's default.
func (w *PollWorker) Timeout(*river.Job[PollArgs]) time.Duration { return queue.LongestJobTimeout }

// PoolReleaseArgs asks for the USDT reservations that have ended to be
// returned to the pool (every PoolReleaseEvery).
type PoolReleaseArgs struct{}

// Kind is the job kind.
func (PoolReleaseArgs) Kind() string { return "deposit_pool_release" }

// PoolReleaseWorker runs Service.ReleasePool.
type PoolReleaseWorker struct {
	river.WorkerDefaults[PoolReleaseArgs]
	Service *Service
}

// Work releases.
func (w *PoolReleaseWorker) Work(ctx context.Context, _ *river.Job[PoolReleaseArgs]) error {
	_, err := w.Service.ReleasePool(ctx)
	return err
}

// WalletScanArgs asks for one scan of the BTC wallet's receives (every
// WALLET_SCAN_INTERVAL).
type WalletScanArgs struct{}

// Kind is the job kind.
func (WalletScanArgs) Kind() string { return "deposit_wallet_scan" }

// WalletScanWorker runs Service.ScanWallet.
type WalletScanWorker struct {
	river.WorkerDefaults[WalletScanArgs]
	Service *Service
}

// Work scans.
func (w *WalletScanWorker) Work(ctx context.Context, _ *river.Job[WalletScanArgs]) error {
	_, err := w.Service.ScanWallet(ctx)
	return err
}

// Timeout gives a long wallet history room beyond River's default.
func (w *WalletScanWorker) Timeout(*river.Job[WalletScanArgs]) time.Duration {
	return queue.LongestJobTimeout
}

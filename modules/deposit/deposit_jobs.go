package deposit

import (
	"context"
	"time"

	"svc/platform/queue"
)

// The deposit passes' workers: each makes its job's call on the Service.
type (
	// PollWorker runs Service.Poll.
	PollWorker = queue.Pass[PollArgs, *Service]
	// PoolReleaseWorker runs Service.ReleasePool.
	PoolReleaseWorker = queue.Pass[PoolReleaseArgs, *Service]
	// WalletScanWorker runs Service.ScanWallet.
	WalletScanWorker = queue.Pass[WalletScanArgs, *Service]
)

// PollArgs asks for one poll of the deposits (every DEPOSIT_POLL_INTERVAL).
type PollArgs struct{}

// Kind is the job kind.
func (PollArgs) Kind() string { return "deposit_poll" }

// Pass polls. A deposit that cannot be reconciled is retried by the next
// poll, so only a failure to read the list, or a processor found
// unreachable, fails the job.
func (PollArgs) Pass(ctx context.Context, s *Service) error { return queue.Err(s.Poll(ctx)) }

// Timeout allows a poll of a full batch the longest any job may run (queue.LongestJobTimeout).
func (PollArgs) Timeout() time.Duration { return queue.LongestJobTimeout }

// PoolReleaseArgs asks for the USDT reservations that have ended to be
// returned to the pool (every PoolReleaseEvery).
type PoolReleaseArgs struct{}

// Kind is the job kind.
func (PoolReleaseArgs) Kind() string { return "deposit_pool_release" }

// Pass releases.
func (PoolReleaseArgs) Pass(ctx context.Context, s *Service) error {
	return queue.Err(s.ReleasePool(ctx))
}

// WalletScanArgs asks for one scan of the BTC wallet's receives (every
// WALLET_SCAN_INTERVAL).
type WalletScanArgs struct{}

// Kind is the job kind.
func (WalletScanArgs) Kind() string { return "deposit_wallet_scan" }

// Pass scans.
func (WalletScanArgs) Pass(ctx context.Context, s *Service) error {
	return queue.Err(s.ScanWallet(ctx))
}

// Timeout allows a long wallet history the longest any job may run (queue.LongestJobTimeout).
func (WalletScanArgs) Timeout() time.Duration { return queue.LongestJobTimeout }

package reconcile

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"svc/platform/queue"
)

// RunArgs asks for the hourly reconciliation.
type RunArgs struct{}

// Kind is the job kind.
func (RunArgs) Kind() string { return "reconciliation" }

// RunWorker runs and stores the report (Service.RunHourly: the full
// ledger check when one is due). River's periodic jobs are enqueued
// by the elected leader only, so several workers reconcile once an hour
// between them, not once each.
type RunWorker struct {
	river.WorkerDefaults[RunArgs]
	Service *Service
}

// Work reconciles.
func (w *RunWorker) Work(ctx context.Context, _ *river.Job[RunArgs]) error {
	_, err := w.Service.RunHourly(ctx)
	return err
}

// Timeout leaves a large ledger room beyond River's default.
func (w *RunWorker) Timeout(*river.Job[RunArgs]) time.Duration { return queue.LongestJobTimeout }

// GasArgs asks for the hot wallet's gas check.
type GasArgs struct{}

// Kind is the job kind.
func (GasArgs) Kind() string { return "gas_check" }

// GasWorker runs Service.CheckGas.
type GasWorker struct {
	river.WorkerDefaults[GasArgs]
	Service *Service
}

// Work checks the gas.
func (w *GasWorker) Work(ctx context.Context, _ *river.Job[GasArgs]) error {
	return w.Service.CheckGas(ctx)
}

package reconcile

import (
	"context"
	"time"

	"svc/platform/queue"
)

// RunWorker runs and stores the report (Service.RunHourly: the full
// ledger check when one is due). River's periodic jobs are enqueued
// by the elected leader only, so several workers reconcile once an hour
// between them, not once each.
type RunWorker = queue.Pass[RunArgs, *Service]

// GasWorker runs Service.CheckGas.
type GasWorker = queue.Pass[GasArgs, *Service]

// RunArgs asks for the hourly reconciliation.
type RunArgs struct{}

// Kind is the job kind.
func (RunArgs) Kind() string { return "reconciliation" }

// Pass reconciles.
func (RunArgs) Pass(ctx context.Context, s *Service) error { return queue.Err(s.RunHourly(ctx)) }

// Timeout allows a large ledger the longest any job may run (queue.LongestJobTimeout).
func (RunArgs) Timeout() time.Duration { return queue.LongestJobTimeout }

// GasArgs asks for the hot wallet's gas check.
type GasArgs struct{}

// Kind is the job kind.
func (GasArgs) Kind() string { return "gas_check" }

// Pass checks the gas.
func (GasArgs) Pass(ctx context.Context, s *Service) error { return s.CheckGas(ctx) }

package ledger

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"svc/platform/queue"
)

// CheckpointArgs asks for a ledger checkpoint. River's periodic jobs are
// enqueued by the elected leader only, and the kind is single-flight, so
// several workers checkpoint once per interval between them; a run beside
// svc admin ledger checkpoint waits for it (Checkpointer.Checkpoint).
type CheckpointArgs struct{}

// Kind is the job kind.
func (CheckpointArgs) Kind() string { return "ledger_checkpoint" }

// CheckpointWorker runs Checkpointer.Checkpoint.
type CheckpointWorker struct {
	river.WorkerDefaults[CheckpointArgs]
	Checkpointer *Checkpointer
}

// Work checkpoints.
func (w *CheckpointWorker) Work(ctx context.Context, _ *river.Job[CheckpointArgs]) error {
	_, err := w.Checkpointer.Checkpoint(ctx)
	return err
}

// Timeout leaves a large range room beyond River's default.
func (w *CheckpointWorker) Timeout(*river.Job[CheckpointArgs]) time.Duration {
	return queue.LongestJobTimeout
}

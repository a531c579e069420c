package ledger

import (
	"context"
	"time"

	"svc/platform/queue"
)

// CheckpointArgs asks for a ledger checkpoint. River's periodic jobs are
// enqueued by the elected leader only, and the kind is single-flight, so
// several workers checkpoint once per interval between them; a run beside
// svc admin ledger checkpoint waits for it (Checkpointer.Checkpoint).
type CheckpointArgs struct{}

// Kind is the job kind.
func (CheckpointArgs) Kind() string { return "ledger_checkpoint" }

// Pass checkpoints.
func (CheckpointArgs) Pass(ctx context.Context, c *Checkpointer) error {
	return queue.Err(c.Checkpoint(ctx))
}

// Timeout allows a large range the longest any job may run (queue.LongestJobTimeout).
func (CheckpointArgs) Timeout() time.Duration { return queue.LongestJobTimeout }

// CheckpointWorker runs Checkpointer.Checkpoint (its Service).
type CheckpointWorker = queue.Pass[CheckpointArgs, *Checkpointer]

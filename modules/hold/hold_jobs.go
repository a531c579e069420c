package hold

import (
	"context"
	"time"

	"svc/platform/queue"
)

// ExpireWorker runs Service.Expire. Each hold is expired in its own
// transaction guarded by its status, so passes that overlap or repeat are
// safe; a hold that failed is retried by the next pass.
type ExpireWorker = queue.Pass[ExpireArgs, *Service]

// ExpireArgs asks for one pass over the open holds past their expires_at
// (every ExpireEvery).
type ExpireArgs struct{}

// Kind is the job kind.
func (ExpireArgs) Kind() string { return "hold_expire" }

// Pass expires what is due.
func (ExpireArgs) Pass(ctx context.Context, s *Service) error { return queue.Err(s.Expire(ctx)) }

// Timeout allows a pass over many batches the longest any job may run (queue.LongestJobTimeout).
func (ExpireArgs) Timeout() time.Duration { return queue.LongestJobTimeout }

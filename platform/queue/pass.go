package queue

import (
	"context"
	"time"

	"github.com/riverqueue/river"
)

// PassArgs is the job of a pass: a kind without arguments whose whole work
// is one call on a module's service (of type S). A pass that may take long
// also has a Timeout method returning LongestJobTimeout, which is the
// client's JobTimeout today: the method keeps that pass's allowance if the
// default for every other job is ever lowered.
type PassArgs[S any] interface {
	river.JobArgs
	Pass(ctx context.Context, s S) error
}

// Pass is the worker of the passes (the periodic jobs scheduled with
// jobs.Periodic): it makes its job's call on Service. A module names one
// per kind, as an alias: type PollWorker = queue.Pass[PollArgs, *Service].
type Pass[A PassArgs[S], S any] struct {
	river.WorkerDefaults[A]
	Service S
}

// Work makes the pass's call.
func (w *Pass[A, S]) Work(ctx context.Context, job *river.Job[A]) error {
	return job.Args.Pass(ctx, w.Service)
}

// Timeout is the job's own Timeout when its kind has one, River's default
// (the client's JobTimeout) otherwise.
func (w *Pass[A, S]) Timeout(job *river.Job[A]) time.Duration {
	if t, ok := any(job.Args).(interface{ Timeout() time.Duration }); ok {
		return t.Timeout()
	}
	return w.WorkerDefaults.Timeout(job)
}

// Err drops a pass's result and keeps its error: a pass reports what it did
// through its own logs and metrics, the job only whether it failed.
func Err[T any](_ T, err error) error { return err }

package queue

import (
	"context"
	"errors"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// The outcomes of a job's run (JobRun.Outcome).
const (
	OutcomeCompleted = "completed" // it succeeded
	OutcomeFailed    = "failed"    // it failed (or panicked) and will be retried
	OutcomeDiscarded = "discarded" // its last attempt failed: it will not run again
	OutcomeCancelled = "cancelled" // it cancelled itself (river.JobCancel), or was cancelled while it ran (Client.JobCancel)
	OutcomeSnoozed   = "snoozed"   // it asked to run again later (river.JobSnooze)
	OutcomeSkipped   = "skipped"   // a single-flight pass found another one running and did nothing
	// OutcomeInterrupted: its worker was stopping and cancelled it; River
	// puts it back in the queue as it was before the run, without counting
	// the attempt or recording an error (since River v0.44).
	OutcomeInterrupted = "interrupted"
)

// JobRun is one run of a job, as WorkerParams.Observe receives it.
type JobRun struct {
	Kind    string
	Outcome string
	// Ran is how long the run took; Waited how long the job waited after
	// it was due (-1 when unknown).
	Ran, Waited time.Duration
}

// observeJobs is River worker middleware, outermost, that reports every
// run to a hook: how long it ran, what came of it as River will record it,
// and how long the job had waited.
type observeJobs struct {
	river.WorkerMiddlewareDefaults
	observe func(JobRun)
}

type skipKey struct{}

// markSkipped tells observeJobs that the run did no work (singleFlight).
func markSkipped(ctx context.Context) {
	if p, ok := ctx.Value(skipKey{}).(*bool); ok {
		*p = true
	}
}

func (m *observeJobs) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) (err error) {
	start := time.Now()
	skipped := new(bool)
	defer func() {
		// A panic is recorded as River records it (a failed attempt), and
		// goes on up to River.
		p := recover()
		outcome := jobOutcome(ctx, job, err, p != nil, *skipped)
		waited := time.Duration(-1)
		if job.AttemptedAt != nil && !job.ScheduledAt.IsZero() {
			waited = max(0, job.AttemptedAt.Sub(job.ScheduledAt))
		}
		m.observe(JobRun{Kind: job.Kind, Outcome: outcome, Ran: time.Since(start), Waited: waited})
		if p != nil {
			panic(p)
		}
	}()
	return doInner(context.WithValue(ctx, skipKey{}, skipped))
}

func jobOutcome(ctx context.Context, job *rivertype.JobRow, err error, panicked, skipped bool) string {
	var (
		cancel *river.JobCancelError
		snooze *river.JobSnoozeError
	)
	switch {
	case err == nil && !panicked && skipped:
		return OutcomeSkipped
	case err == nil && !panicked:
		return OutcomeCompleted
	case errors.As(err, &cancel), cancelledRemotely(ctx, err):
		return OutcomeCancelled
	case interrupted(ctx, err):
		return OutcomeInterrupted
	case errors.As(err, &snooze):
		return OutcomeSnoozed
	case job.Attempt >= job.MaxAttempts:
		return OutcomeDiscarded
	default:
		return OutcomeFailed
	}
}

// cancelledRemotely reports a run that failed after its job was cancelled
// while running (Client.JobCancel, the River UI): River records the job as
// cancelled, whatever the worker returned.
func cancelledRemotely(ctx context.Context, err error) bool {
	return err != nil && errors.Is(context.Cause(ctx), rivertype.ErrJobCancelledRemotely)
}

// interrupted reports a run that ended because its worker was stopping:
// River cancelled the job's context with a cause of its own (not exported;
// its only other cause is a remote cancellation, and the job's timeout is
// set below the middleware) and the worker returned that cancellation. River
// then makes the job available again as it was before the run.
func interrupted(ctx context.Context, err error) bool {
	return errors.Is(err, context.Canceled) && errors.Is(ctx.Err(), context.Canceled) &&
		!errors.Is(context.Cause(ctx), rivertype.ErrJobCancelledRemotely)
}

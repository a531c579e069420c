package queue

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
)

// TestObserveJobsOutcomes: every run is reported with the outcome River
// records for it, a single-flight pass that did nothing as skipped, and a
// panic as a failed attempt that still reaches River.
func TestObserveJobsOutcomes(t *testing.T) {
	t.Parallel()
	due := time.Now().Add(-3 * time.Second)
	started := due.Add(2 * time.Second)
	for _, tc := range []struct {
		name     string
		attempt  int
		work     func(ctx context.Context) error
		outcome  string
		panicked bool
		cause    error // the job's context is cancelled with it before the run
	}{
		{"Completed", 1, func(context.Context) error { return nil }, OutcomeCompleted, false, nil},
		{"Failed", 1, func(context.Context) error { return errors.New("boom") }, OutcomeFailed, false, nil},
		{"Discarded", 10, func(context.Context) error { return errors.New("boom") }, OutcomeDiscarded, false, nil},
		{"Cancelled", 1, func(context.Context) error { return river.JobCancel(errors.New("no")) }, OutcomeCancelled, false, nil},
		{"Snoozed", 1, func(context.Context) error { return river.JobSnooze(time.Minute) }, OutcomeSnoozed, false, nil},
		{"Skipped", 1, func(ctx context.Context) error { markSkipped(ctx); return nil }, OutcomeSkipped, false, nil},
		{"Panicked", 1, func(context.Context) error { panic("boom") }, OutcomeFailed, true, nil},
		{"CancelledRemotely", 1, func(ctx context.Context) error { return ctx.Err() }, OutcomeCancelled, false, rivertype.ErrJobCancelledRemotely},
		{"CancelledRemotelyWrapped", 1, func(ctx context.Context) error { return fmt.Errorf("sync: %w", ctx.Err()) }, OutcomeCancelled, false, rivertype.ErrJobCancelledRemotely},
		{"InterruptedByStop", 10, func(ctx context.Context) error { return fmt.Errorf("sync: %w", ctx.Err()) }, OutcomeInterrupted, false, errors.New("stop initiated")},
		{"FailedAfterStop", 1, func(context.Context) error { return errors.New("boom") }, OutcomeFailed, false, errors.New("stop initiated")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []JobRun
			m := &observeJobs{observe: func(r JobRun) { got = append(got, r) }}
			job := &rivertype.JobRow{Kind: "k", Attempt: tc.attempt, MaxAttempts: 10, ScheduledAt: due, AttemptedAt: &started}
			ctx := context.Background()
			if tc.cause != nil {
				var cancel context.CancelCauseFunc
				ctx, cancel = context.WithCancelCause(ctx)
				cancel(tc.cause)
			}
			run := func() { _ = m.Work(ctx, job, tc.work) }
			if tc.panicked {
				require.Panics(t, run)
			} else {
				run()
			}
			require.Len(t, got, 1)
			require.Equal(t, "k", got[0].Kind)
			require.Equal(t, tc.outcome, got[0].Outcome)
			require.Equal(t, 2*time.Second, got[0].Waited)
			require.GreaterOrEqual(t, got[0].Ran, time.Duration(0))
		})
	}
}

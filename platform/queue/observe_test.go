package queue

import (
	"context"
	"errors"
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
	}{
		{"Completed", 1, func(context.Context) error { return nil }, OutcomeCompleted, false},
		{"Failed", 1, func(context.Context) error { return errors.New("boom") }, OutcomeFailed, false},
		{"Discarded", 10, func(context.Context) error { return errors.New("boom") }, OutcomeDiscarded, false},
		{"Cancelled", 1, func(context.Context) error { return river.JobCancel(errors.New("no")) }, OutcomeCancelled, false},
		{"Snoozed", 1, func(context.Context) error { return river.JobSnooze(time.Minute) }, OutcomeSnoozed, false},
		{"Skipped", 1, func(ctx context.Context) error { markSkipped(ctx); return nil }, OutcomeSkipped, false},
		{"Panicked", 1, func(context.Context) error { panic("boom") }, OutcomeFailed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []JobRun
			m := &observeJobs{observe: func(r JobRun) { got = append(got, r) }}
			job := &rivertype.JobRow{Kind: "k", Attempt: tc.attempt, MaxAttempts: 10, ScheduledAt: due, AttemptedAt: &started}
			run := func() { _ = m.Work(context.Background(), job, tc.work) }
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

package queue

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStartedRemembersRunningJobsHoweverLong: a job whose work is still
// running is never taken for one the process did not receive, however
// long ago it began; a finished one is remembered for the keep, then
// forgotten; one never begun is reported.
func TestStartedRemembersRunningJobsHoweverLong(t *testing.T) {
	t.Parallel()
	s := NewStarted()
	s.keep = 50 * time.Millisecond
	s.begin(1) // a long job, still running
	s.begin(2)
	s.end(2) // finished just now
	require.Equal(t, []int64{3}, s.Unbegun([]int64{1, 2, 3}))

	time.Sleep(2 * s.keep)
	require.Equal(t, []int64{2, 3}, s.Unbegun([]int64{1, 2, 3}), "the long job is still known; the finished one is forgotten after the keep")

	// A retried job begins again under the same id while an earlier
	// attempt's end has not been seen: it stays running until both end.
	s.begin(4)
	s.begin(4)
	s.end(4)
	time.Sleep(2 * s.keep)
	require.Empty(t, s.Unbegun([]int64{4, 1}))
	s.end(4)
	s.end(1)
	require.Empty(t, s.Unbegun([]int64{4, 1}), "just returned")
}

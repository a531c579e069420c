package queue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"svc/platform/dbtest"
	"svc/platform/queue"
)

type blockArgs struct {
	N int `json:"n"`
}

func (blockArgs) Kind() string { return "test_block" }

// blockWorker runs until its job's context ends, and returns why.
type blockWorker struct {
	river.WorkerDefaults[blockArgs]
	started chan int64
}

func (w *blockWorker) Work(ctx context.Context, job *river.Job[blockArgs]) error {
	w.started <- job.ID
	<-ctx.Done()
	return ctx.Err()
}

// TestCancelledAndInterruptedRuns: a job cancelled while it runs
// (Client.JobCancel, as the River UI does) is reported as cancelled, and a
// job whose worker stops under it as interrupted: River puts it back in the
// queue as it was, its attempt not counted and no error recorded, even on
// its last attempt, so it is reported neither as failed nor as discarded.
func TestCancelledAndInterruptedRuns(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	w := &blockWorker{started: make(chan int64, 2)}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	var mu sync.Mutex
	outcomes := map[string]int{}
	observe := func(r queue.JobRun) {
		mu.Lock()
		defer mu.Unlock()
		outcomes[r.Outcome]++
	}
	observed := func(o string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return outcomes[o] == 1 }
	}
	c := startWorker(t, d.Pool, queue.WorkerParams{Workers: workers, Observe: observe})
	ins, err := river.NewClient(riverpgxv5.New(d.Pool), &river.Config{})
	require.NoError(t, err)
	state := func(id int64) (s string, attempt int, errs int) {
		require.NoError(t, d.Pool.QueryRow(ctx, "SELECT state, attempt, coalesce(array_length(errors, 1), 0) FROM river_job WHERE id = $1", id).
			Scan(&s, &attempt, &errs))
		return
	}

	res, err := ins.Insert(ctx, blockArgs{N: 1}, &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	require.Equal(t, res.Job.ID, <-w.started)
	_, err = c.JobCancel(ctx, res.Job.ID)
	require.NoError(t, err)
	require.Eventually(t, observed(queue.OutcomeCancelled), 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { s, _, _ := state(res.Job.ID); return s == "cancelled" }, 10*time.Second, 20*time.Millisecond)

	res, err = ins.Insert(ctx, blockArgs{N: 2}, &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	require.Equal(t, res.Job.ID, <-w.started)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, c.StopAndCancel(sctx))
	require.True(t, observed(queue.OutcomeInterrupted)())
	s, attempt, errs := state(res.Job.ID)
	require.Equal(t, "available", s, "back in the queue")
	require.Equal(t, 0, attempt, "the attempt is not counted")
	require.Equal(t, 0, errs, "no error is recorded")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{queue.OutcomeCancelled: 1, queue.OutcomeInterrupted: 1}, outcomes)
}

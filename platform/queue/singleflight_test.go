package queue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"svc/platform/dbtest"
	"svc/platform/queue"
	"svc/platform/queue/queuetest"
)

type passArgs struct {
	N int `json:"n"`
}

func (passArgs) Kind() string { return "test_pass" }

type otherArgs struct {
	N int `json:"n"`
}

func (otherArgs) Kind() string { return "test_other" }

// passWorker counts the passes that really ran and holds each until
// released.
type passWorker[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	ran, running, most atomic.Int64
	release            chan struct{}
}

// held blocks a job until release is closed or its context ends.
func held(ctx context.Context, release <-chan struct{}) {
	select {
	case <-release:
	case <-ctx.Done():
	}
}

func (w *passWorker[T]) Work(ctx context.Context, _ *river.Job[T]) error {
	w.ran.Add(1)
	n := w.running.Add(1)
	defer w.running.Add(-1)
	for {
		m := w.most.Load()
		if n <= m || w.most.CompareAndSwap(m, n) {
			break
		}
	}
	held(ctx, w.release)
	return nil
}

// TestSingleFlight: of a single-flight kind, one job runs at a time across
// two worker clients; the others complete at once without working. Other
// kinds run side by side as usual.
func TestSingleFlight(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	pass := &passWorker[passArgs]{release: make(chan struct{})}
	other := &passWorker[otherArgs]{release: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, pass)
	river.AddWorker(workers, other)
	for i := 0; i < 2; i++ {
		startWorker(t, d.Pool, queue.WorkerParams{Workers: workers, Concurrency: 5, SingleFlight: []string{"test_pass"}})
	}
	ins, err := river.NewClient(riverpgxv5.New(d.Pool), &river.Config{})
	require.NoError(t, err)
	for i := 0; i < 6; i++ {
		_, err := ins.Insert(ctx, passArgs{N: i}, nil)
		require.NoError(t, err)
		_, err = ins.Insert(ctx, otherArgs{N: i}, nil)
		require.NoError(t, err)
	}
	count := func(kind, state string) (n int) {
		require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = $1 AND state = $2", kind, state).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return count("test_pass", "completed") == 5 }, 10*time.Second, 20*time.Millisecond,
		"five passes complete at once while the first holds the kind")
	require.Eventually(t, func() bool { return other.running.Load() >= 2 }, 10*time.Second, 20*time.Millisecond,
		"other kinds run side by side")
	require.Equal(t, int64(1), pass.ran.Load(), "only one pass of the kind worked")
	close(pass.release)
	close(other.release)
	require.Eventually(t, func() bool { return count("test_pass", "completed") == 6 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, int64(1), pass.most.Load(), "never two passes at once")

	// The lock went with the pass: the next one runs.
	_, err = ins.Insert(ctx, passArgs{N: 99}, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return pass.ran.Load() == 2 }, 10*time.Second, 20*time.Millisecond)
}

// startWorker starts a worker client that polls often, stopped when the
// test ends.
func startWorker(t *testing.T, pool *pgxpool.Pool, p queue.WorkerParams) *river.Client[pgx.Tx] {
	t.Helper()
	p.FetchPollInterval = 50 * time.Millisecond
	c, err := queue.NewWorker(pool, p)
	require.NoError(t, err)
	queuetest.Start(t, c, 5*time.Second)
	return c
}

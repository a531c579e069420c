package queue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"svc/platform/dbtest"
	"svc/platform/queue"
)

type stuckArgs struct{}

func (stuckArgs) Kind() string { return "test_stuck" }

// stuckWorker blocks its first run until released; later runs return.
type stuckWorker struct {
	river.WorkerDefaults[stuckArgs]
	runs    atomic.Int64
	release chan struct{}
}

// newStuckWorker returns a stuckWorker not yet released and the workers
// that run it.
func newStuckWorker() (*stuckWorker, *river.Workers) {
	w := &stuckWorker{release: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	return w, workers
}

func (w *stuckWorker) Work(ctx context.Context, _ *river.Job[stuckArgs]) error {
	if w.runs.Add(1) == 1 {
		held(ctx, w.release)
	}
	return nil
}

// TestDeadWorkerRescue: a job running on a worker whose liveness lock is
// gone goes back to the queue within seconds and another worker runs it;
// while the lock is held, it is left alone however long it runs.
func TestDeadWorkerRescue(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	w, workers := newStuckWorker()
	newClient := func() (string, func()) {
		c := startWorker(t, d.Pool, queue.WorkerParams{Workers: workers, Concurrency: 2})
		rctx, stop := context.WithCancel(ctx)
		go queue.DeadWorkerRescue{Pool: d.Pool, ClientID: c.ID(), Every: 100 * time.Millisecond, Grace: time.Second}.Run(rctx)
		t.Cleanup(stop)
		return c.ID(), stop
	}
	firstID, dieFirst := newClient()
	t.Cleanup(func() { close(w.release) }) // before the clients stop (cleanups run last first)

	ins, err := river.NewClient(riverpgxv5.New(d.Pool), &river.Config{})
	require.NoError(t, err)
	_, err = ins.Insert(ctx, stuckArgs{}, nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.runs.Load() == 1 }, 10*time.Second, 20*time.Millisecond)

	// A second worker, alive, watching: the first one's job is left alone
	// while the first one holds its lock, however long the job takes.
	newClient()
	time.Sleep(3 * time.Second)
	var state string
	var attemptedBy []string
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT state, attempted_by FROM river_job WHERE kind = 'test_stuck'").Scan(&state, &attemptedBy))
	require.Equal(t, "running", state)
	require.Equal(t, firstID, attemptedBy[len(attemptedBy)-1])
	require.Equal(t, int64(1), w.runs.Load())

	// The first worker dies (its liveness session ends; its job is still
	// "running" in River): the job is rescued and run again elsewhere.
	dieFirst()
	require.Eventually(t, func() bool { return w.runs.Load() == 2 }, 20*time.Second, 50*time.Millisecond,
		"the dead worker's job ran again within seconds")
	var errs []string
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT array(SELECT e->>'error' FROM unnest(errors) e) FROM river_job WHERE kind = 'test_stuck'").Scan(&errs))
	require.Contains(t, errs, "its worker "+firstID+" died; rescued")
}

// TestRescueReconnect: when the liveness session is lost (the database
// restarted) and taken again, OnReconnect is called, once per recovery.
func TestRescueReconnect(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	var reconnects atomic.Int64
	go queue.DeadWorkerRescue{Pool: d.Pool, ClientID: "reconnect-test", Every: 50 * time.Millisecond, Grace: time.Hour,
		OnReconnect: func(context.Context) { reconnects.Add(1) }}.Run(ctx)
	sessions := func() (n int) {
		require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
			queue.LivenessApplicationName).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return sessions() == 1 }, 5*time.Second, 20*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	require.Zero(t, reconnects.Load(), "the first session is not a recovery")
	_, err := d.Pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
		queue.LivenessApplicationName)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return reconnects.Load() == 1 }, 5*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return sessions() == 1 }, 5*time.Second, 20*time.Millisecond, "the lock is held again")
}

// TestDeadWorkerRescueDecidesAsRiver: a dead worker's job that an operator
// cancelled while it ran (the River UI's cancel) is cancelled, not run
// again; one on its last attempt is discarded; any other is retryable. Each
// counts a rescue, as River's own rescuer does. A live worker's job is left
// alone.
func TestDeadWorkerRescueDecidesAsRiver(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	ins, err := river.NewClient(riverpgxv5.New(d.Pool), &river.Config{})
	require.NoError(t, err)
	running := func(attempt, maxAttempts int, worker, metadata string) int64 {
		res, err := ins.Insert(ctx, stuckArgs{}, &river.InsertOpts{MaxAttempts: maxAttempts})
		require.NoError(t, err)
		_, err = d.Pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = $2, attempted_at = now() - interval '1 minute',
			attempted_by = ARRAY[$3], metadata = $4::jsonb WHERE id = $1`, res.Job.ID, attempt, worker, metadata)
		require.NoError(t, err)
		return res.Job.ID
	}
	cancelled := running(1, 25, "dead-worker", `{"cancel_attempted_at": "2026-11-25T12:00:00Z"}`)
	last := running(3, 3, "dead-worker", `{}`)
	retry := running(1, 25, "dead-worker", `{"river:rescue_count": 1}`)
	alive := running(1, 25, "live-worker", `{}`)

	rctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go queue.DeadWorkerRescue{Pool: d.Pool, ClientID: "live-worker", Every: 100 * time.Millisecond, Grace: time.Second}.Run(rctx)
	type row struct {
		State     string
		Finalized bool
		Rescues   int
	}
	get := func(id int64) (r row) {
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT state, finalized_at IS NOT NULL, coalesce((metadata->>'river:rescue_count')::int, 0)
			FROM river_job WHERE id = $1`, id).Scan(&r.State, &r.Finalized, &r.Rescues))
		return r
	}
	require.Eventually(t, func() bool { return get(retry).State != "running" }, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, row{"cancelled", true, 1}, get(cancelled))
	require.Equal(t, row{"discarded", true, 1}, get(last))
	require.Equal(t, row{"retryable", false, 2}, get(retry))
	require.Equal(t, row{"running", false, 0}, get(alive), "its worker holds its lock")
}

// TestRescueJobsNeverReceived: a job the database marked running for a
// live worker that never received it (the fetch committed, on a standby
// about to be promoted, and its answer was lost with the old primary) goes
// back to the queue within seconds and runs; a job the worker did receive
// and is still working is left alone.
func TestRescueJobsNeverReceived(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	w, workers := newStuckWorker()
	started := queue.NewStarted()
	c := startWorker(t, d.Pool, queue.WorkerParams{Workers: workers, Concurrency: 2, Started: started})
	t.Cleanup(func() { close(w.release) })
	rctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go queue.DeadWorkerRescue{Pool: d.Pool, ClientID: c.ID(), Every: 100 * time.Millisecond, Grace: time.Second, Started: started}.Run(rctx)

	// Received: the first run blocks, and stays running.
	ins, err := river.NewClient(riverpgxv5.New(d.Pool), &river.Config{})
	require.NoError(t, err)
	res, err := ins.Insert(ctx, stuckArgs{}, nil)
	require.NoError(t, err)
	received := res.Job.ID
	require.Eventually(t, func() bool { return w.runs.Load() == 1 }, 10*time.Second, 20*time.Millisecond)

	// Lost on its way: running for this worker since before the grace,
	// never begun by it.
	res, err = ins.Insert(ctx, stuckArgs{}, &river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	lost := res.Job.ID
	_, err = d.Pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '5 seconds',
		attempted_by = ARRAY[$2] WHERE id = $1`, lost, c.ID())
	require.NoError(t, err)

	require.Eventually(t, func() bool { return w.runs.Load() == 2 }, 10*time.Second, 50*time.Millisecond, "the lost job ran")
	var errs []string
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT array(SELECT e->>'error' FROM unnest(errors) e) FROM river_job WHERE id = $1", lost).Scan(&errs))
	require.Len(t, errs, 1)
	require.Contains(t, errs[0], "never received it")
	time.Sleep(1500 * time.Millisecond) // past the grace for the received one too
	var state string
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT state FROM river_job WHERE id = $1", received).Scan(&state))
	require.Equal(t, "running", state, "a job the worker has is left alone")
	require.Equal(t, int64(2), w.runs.Load())
}

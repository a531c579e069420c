package queue

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// singleFlightClass is the first key of the advisory locks taken by
// singleFlight (pg_try_advisory_lock(class, kind)), apart from every other
// advisory lock of the service.
const singleFlightClass int32 = 0x5f1f

// singleFlight is River worker middleware: of the kinds it names, one job
// at a time runs across every worker process; a job of such a kind that
// finds another one running completes at once without working. It holds a
// session-level PostgreSQL advisory lock for the job's run, on a
// connection of its own, so a worker killed mid-job frees the lock the
// moment PostgreSQL sees its connection close, not when River rescues the
// job minutes later (a River uniqueness on the running state would wait for
// that rescue).
type singleFlight struct {
	river.WorkerMiddlewareDefaults
	pool  *pgxpool.Pool
	kinds map[string]int32
	log   *slog.Logger
}

func newSingleFlight(pool *pgxpool.Pool, kinds []string, log *slog.Logger) *singleFlight {
	m := &singleFlight{pool: pool, kinds: map[string]int32{}, log: log}
	for _, k := range kinds {
		h := fnv.New32a()
		h.Write([]byte(k))
		m.kinds[k] = int32(h.Sum32())
	}
	return m
}

// Work runs the job when it holds its kind's lock, and skips it when
// another job of the kind holds it.
func (m *singleFlight) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	key, ok := m.kinds[job.Kind]
	if !ok {
		return doInner(ctx)
	}
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("single-flight %s: %w", job.Kind, err)
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, $2)", singleFlightClass, key).Scan(&got); err != nil {
		return fmt.Errorf("single-flight %s: %w", job.Kind, err)
	}
	if !got {
		return nil // another worker's pass is running; the next one is due within its interval
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1, $2)", singleFlightClass, key); err != nil {
			// The lock must not outlive the job: end the session that holds it.
			m.log.Warn("single-flight: unlock failed; closing the connection", "kind", job.Kind, "error", err)
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	return doInner(ctx)
}

package queue

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// singleFlightClass is the first key of the advisory locks taken by
// singleFlight (pg_try_advisory_lock(class, kind)), apart from every other
// advisory lock of the service.
const singleFlightClass int32 = 0x5f1f

// lockCallTimeout bounds one lock or unlock statement.
const lockCallTimeout = 5 * time.Second

// singleFlight is River worker middleware: of the kinds it names, one job
// at a time runs across every worker process; a job of such a kind that
// finds another one running completes at once without working.
//
// It holds a session-level PostgreSQL advisory lock for the job's run, so
// a worker killed mid-job frees the lock the moment PostgreSQL sees its
// session end, not when River rescues the job minutes later (a River
// uniqueness on the running state would wait for that rescue). The locks
// live on one connection of their own, outside the worker's pool: a pass
// holding a pool connection for its lock while its work waits for another
// one would starve the pool (the fault harness saw exactly that).
type singleFlight struct {
	river.WorkerMiddlewareDefaults
	cfg   *pgx.ConnConfig
	kinds map[string]int64
	log   *slog.Logger

	mu   sync.Mutex
	conn *pgx.Conn
	gen  int            // the session's generation: its locks die with it
	held map[int64]bool // kinds this process runs now (advisory locks are reentrant within a session)
}

func newSingleFlight(pool *pgxpool.Pool, kinds []string, log *slog.Logger) *singleFlight {
	m := &singleFlight{cfg: pool.Config().ConnConfig.Copy(), kinds: map[string]int64{}, log: log, held: map[int64]bool{}}
	for _, k := range kinds {
		h := fnv.New32a()
		h.Write([]byte(k))
		m.kinds[k] = int64(int32(h.Sum32()))
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
	gen, got, err := m.lock(ctx, key)
	if err != nil {
		return fmt.Errorf("single-flight %s: %w", job.Kind, err)
	}
	if !got {
		markSkipped(ctx)
		return nil // another pass of the kind is running; the next one is due within its interval
	}
	defer m.unlock(ctx, gen, key, job.Kind)
	return doInner(ctx)
}

func (m *singleFlight) lock(ctx context.Context, key int64) (int, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held[key] {
		return 0, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, lockCallTimeout)
	defer cancel()
	if m.conn == nil || m.conn.IsClosed() {
		c, err := pgx.ConnectConfig(ctx, m.cfg)
		if err != nil {
			return 0, false, err
		}
		m.conn, m.gen = c, m.gen+1
	}
	var got bool
	if err := m.conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, $2)", singleFlightClass, key).Scan(&got); err != nil {
		m.drop()
		return 0, false, err
	}
	if got {
		m.held[key] = true
	}
	return m.gen, got, nil
}

func (m *singleFlight) unlock(ctx context.Context, gen int, key int64, kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.held, key)
	if gen != m.gen || m.conn == nil || m.conn.IsClosed() {
		return // the session that held it is gone, and its locks with it
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lockCallTimeout)
	defer cancel()
	if _, err := m.conn.Exec(ctx, "SELECT pg_advisory_unlock($1, $2)", singleFlightClass, key); err != nil {
		// The lock must not outlive the job: end the session that holds
		// it (the other kinds' locks go too; a second pass beside a
		// running one is harmless, only wasteful).
		m.log.Warn("single-flight: unlock failed; closing its session", "kind", kind, "error", err)
		m.drop()
	}
}

// drop closes the lock session (its locks are released by PostgreSQL).
func (m *singleFlight) drop() {
	if m.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), lockCallTimeout)
		defer cancel()
		_ = m.conn.Close(ctx)
	}
	m.conn = nil
}

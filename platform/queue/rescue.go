package queue

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"svc/platform/logging"
)

// livenessClass is the first key of the advisory lock a worker holds for
// as long as it lives: pg_advisory_lock(livenessClass, hashtext(client id)).
const livenessClass int32 = 0x5f20

// DeadWorkerRescue is how the jobs of a dead worker get back to the queue
// in seconds rather than after RescueAfter. River's own rescuer can only go
// by time: a job "running" for longer than any job may run. Here every
// worker process holds an advisory lock named after its River client for
// as long as it lives, on a session of its own; PostgreSQL frees it the
// moment the process dies (kill -9 included: the connection closes). A job
// still running whose worker holds no such lock belonged to a dead worker,
// and is handed back to the queue (retryable at once, with an error naming
// the dead worker, as River's rescuer does), where another worker takes it;
// a job an operator cancelled meanwhile is cancelled, and one on its last
// attempt discarded, as River's rescuer decides.
//
// Every job must be safe to run twice, as it must for River's rescuer: a
// worker whose lock session broke while it lives (its connection to the
// database cut, the database restarted) may still be running the job. To
// keep that rare, a worker rescues only while it has held its own lock for
// Grace, so that after a database restart every live worker has had the
// time to take its lock again, and only jobs that started more than Grace
// ago are candidates.
type DeadWorkerRescue struct {
	Pool     *pgxpool.Pool
	ClientID string        // the River client's ID (Client.ID)
	Every    time.Duration // how often (default 5s)
	Grace    time.Duration // default 15s
	Log      *slog.Logger
	// Started, when set, is the record of the jobs this process began
	// (WorkerParams.Started of its client): a job running under this
	// worker's own ClientID for longer than Grace that the process never
	// began was lost on its way from the database (see Started), and is
	// handed back to the queue as a dead worker's is.
	Started *Started
	// OnReconnect, when set, is called each time the liveness session is
	// taken again after it was lost: the database is back after an outage
	// (the worker kicks the passes that catch up on it, rather than wait
	// for their intervals).
	OnReconnect func(context.Context)
	// Release, when set, frees on every pass, before the jobs are handed
	// back, what dead workers hold outside River: claims a job took on a
	// row (an outbound event's delivery claim,
	// event.Deliverer.ReleaseDeadClaims), which would otherwise keep the
	// job handed back from acting until they lapse. Each is given Grace,
	// and frees only what was taken more than Grace ago by a worker that
	// WorkerDeadSQL finds dead; it returns how much it freed.
	Release []func(ctx context.Context, grace time.Duration) (int64, error)
}

// WorkerDeadSQL is a SQL condition that holds when the worker whose River
// client ID is the SQL expression worker holds no liveness lock: the
// process died (or its liveness session broke; see DeadWorkerRescue).
func WorkerDeadSQL(worker string) string {
	return fmt.Sprintf(`NOT EXISTS (
           SELECT 1 FROM pg_catalog.pg_locks l
            WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
              AND l.classid = %d::int::oid
              AND l.objid::bigint = (hashtext(%s)::bigint & 4294967295))`, livenessClass, worker)
}

// LivenessApplicationName names the liveness sessions in pg_stat_activity.
const LivenessApplicationName = "svc-worker-liveness"

// Run holds the liveness lock and rescues dead workers' jobs until ctx
// ends.
func (r DeadWorkerRescue) Run(ctx context.Context) {
	if r.Every <= 0 {
		r.Every = 5 * time.Second
	}
	if r.Grace <= 0 {
		r.Grace = 15 * time.Second
	}
	log := logging.Or(r.Log)
	cfg := r.Pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = LivenessApplicationName
	var (
		conn  *pgx.Conn
		since time.Time
		lost  bool // a session was held, then lost
	)
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(r.Every)
	defer t.Stop()
	for {
		if conn != nil && !alive(ctx, conn) {
			_ = conn.Close(context.Background())
			conn, lost = nil, true
		}
		if conn == nil {
			if conn, since = r.hold(ctx, cfg, log); conn != nil && lost {
				lost = false
				if r.OnReconnect != nil {
					r.OnReconnect(ctx)
				}
			}
		}
		if conn != nil && time.Since(since) >= r.Grace {
			for _, release := range r.Release {
				if n, err := release(ctx, r.Grace); err != nil {
					log.Warn("release of dead workers' claims failed", "error", err)
				} else if n > 0 {
					log.Warn("released the claims of dead workers", "claims", n)
				}
			}
			if n, err := r.rescue(ctx); err != nil {
				log.Warn("dead-worker rescue failed", "error", err)
			} else if n > 0 {
				log.Warn("rescued the running jobs of dead workers", "jobs", n)
			}
			if r.Started != nil {
				if n, err := r.rescueUnreceived(ctx); err != nil {
					log.Warn("rescue of jobs never received failed", "error", err)
				} else if n > 0 {
					log.Warn("rescued jobs marked running for this worker that never reached it (the database went away as they were fetched)", "jobs", n)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// alive pings the liveness session (a session the server ended is only
// noticed when used).
func alive(ctx context.Context, c *pgx.Conn) bool {
	if c.IsClosed() {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, lockCallTimeout)
	defer cancel()
	return c.Ping(ctx) == nil
}

// hold connects and takes the liveness lock, or returns nil (tried again
// on the next tick).
func (r DeadWorkerRescue) hold(ctx context.Context, cfg *pgx.ConnConfig, log *slog.Logger) (*pgx.Conn, time.Time) {
	cctx, cancel := context.WithTimeout(ctx, lockCallTimeout)
	defer cancel()
	c, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return nil, time.Time{}
	}
	if _, err := c.Exec(cctx, "SELECT pg_advisory_lock($1, hashtext($2))", livenessClass, r.ClientID); err != nil {
		log.Warn("liveness lock not taken", "error", err)
		_ = c.Close(context.Background())
		return nil, time.Time{}
	}
	return c, time.Now()
}

// rescue hands back the running jobs whose worker holds no liveness lock,
// deciding each as River's own rescuer does: a job an operator cancelled
// while it ran (Client.JobCancel, the River UI: cancel_attempted_at in its
// metadata) is cancelled, one on its last attempt is discarded, any other
// is retryable at once; each counts one more rescue (river:rescue_count)
// and records why.
func (r DeadWorkerRescue) rescue(ctx context.Context) (int64, error) {
	return r.handBack(ctx, `
     AND `+WorkerDeadSQL("j.attempted_by[array_length(j.attempted_by, 1)]"),
		"its worker ' || dead.worker || ' died; rescued")
}

// rescueUnreceived hands back, as rescue does, the jobs running under this
// worker's own ClientID that the process never began (Started). The
// database names the candidates (running here past the grace: the jobs
// working now, a few), and the process picks those it never began, so
// that the record of every job begun is never copied or sent.
func (r DeadWorkerRescue) rescueUnreceived(ctx context.Context) (int64, error) {
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := r.Pool.Query(qctx, `
SELECT j.id FROM river_job j
 WHERE j.state = 'running'
   AND j.attempted_at < now() - make_interval(secs => $1)
   AND j.attempted_by[array_length(j.attempted_by, 1)] = $2`, r.Grace.Seconds(), r.ClientID)
	if err != nil {
		return 0, err
	}
	candidates, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, err
	}
	lost := r.Started.Unbegun(candidates)
	if len(lost) == 0 {
		return 0, nil
	}
	return r.handBack(ctx, `
     AND j.attempted_by[array_length(j.attempted_by, 1)] = $2
     AND j.id = ANY($3::bigint[])`,
		"fetched for its worker ' || dead.worker || ', which never received it (the database went away as it answered); rescued",
		r.ClientID, lost)
}

// handBack decides each running job that started more than Grace ago and
// matches cond (SQL on j, the job; $1 is Grace, args are $2 on) as River's
// rescuer does, recording why ('...' || dead.worker || '...').
func (r DeadWorkerRescue) handBack(ctx context.Context, cond, why string, args ...any) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tag, err := r.Pool.Exec(ctx, `
WITH dead AS (
  SELECT j.id, j.attempted_at, j.attempted_by[array_length(j.attempted_by, 1)] AS worker,
         CASE WHEN j.metadata ? 'cancel_attempted_at' THEN 'cancelled'
              WHEN j.attempt >= j.max_attempts THEN 'discarded'
              ELSE 'retryable' END AS next_state
    FROM river_job j
   WHERE j.state = 'running'
     AND j.attempted_at < now() - make_interval(secs => $1)
     AND array_length(j.attempted_by, 1) > 0`+cond+`
)
UPDATE river_job j
   SET state = dead.next_state::river_job_state,
       finalized_at = CASE WHEN dead.next_state = 'retryable' THEN NULL ELSE now() END,
       scheduled_at = CASE WHEN dead.next_state = 'retryable' THEN now() ELSE j.scheduled_at END,
       metadata = j.metadata || jsonb_build_object('river:rescue_count',
                    coalesce(CASE WHEN jsonb_typeof(j.metadata -> 'river:rescue_count') = 'number'
                                  THEN (j.metadata ->> 'river:rescue_count')::int END, 0) + 1),
       errors = array_append(j.errors, jsonb_build_object('at', now(), 'attempt', j.attempt,
                  'error', '`+why+`', 'trace', ''))
  FROM dead
 WHERE j.id = dead.id AND j.state = 'running'
   AND j.attempted_at = dead.attempted_at -- not taken again by a live worker meanwhile`,
		append([]any{r.Grace.Seconds()}, args...)...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

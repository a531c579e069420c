// Package queue builds the River clients: an insert-only client on
// database/sql, so jobs are inserted inside bun transactions (InsertTx with
// tx.Tx), and the worker client on the pgx pool, which LISTENs for those
// inserts and elects the leader that runs periodic jobs. River's own schema
// is migrated by svc migrate (migrations.River).
package queue

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"svc/platform/logging"
)

// Inserter inserts jobs inside a caller's transaction. Declared here so that
// modules can name it; a module may declare a narrower interface of its own.
type Inserter interface {
	InsertTx(ctx context.Context, tx *sql.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// NewInserter returns an insert-only River client over sqldb; mw are its
// insert middleware (TraceMiddleware).
func NewInserter(sqldb *sql.DB, log *slog.Logger, mw ...rivertype.Middleware) (*river.Client[*sql.Tx], error) {
	c, err := river.NewClient(riverdatabasesql.New(sqldb), &river.Config{Logger: Quiet(log), Middleware: mw})
	if err != nil {
		return nil, fmt.Errorf("river inserter: %w", err)
	}
	return c, nil
}

// LongestJobTimeout is the most any worker may allow one job: the passes
// over many rows (the deposit poll, the wallet scan, the payout and USDT
// passes) commit each row's work on its own, so a pass
// cut short loses nothing and the next one carries on. A dead worker's jobs
// come back within seconds through DeadWorkerRescue; RescueAfter, River's
// own time-based rescue, is the fallback. It stays
// above it: a job still "running" that long belonged to a worker that
// died, and goes back to the queue within a few minutes instead of the
// quarter of an hour a platform event could otherwise wait.
const (
	LongestJobTimeout = 2 * time.Minute
	RescueAfter       = LongestJobTimeout + time.Minute
)

// WorkerParams configures the working client.
type WorkerParams struct {
	Workers      *river.Workers
	PeriodicJobs []*river.PeriodicJob
	Concurrency  int
	Log          *slog.Logger
	// FetchPollInterval bounds how long a job can wait when a NOTIFY is
	// missed; tests shorten it.
	FetchPollInterval time.Duration
	// SingleFlight are job kinds of which one job at a time runs across
	// every worker process; another one that finds it running completes at
	// once (the periodic passes).
	SingleFlight []string
	// Observe, when set, is told of every run of every job (metrics).
	Observe func(JobRun)
	// Middleware run outside every other (TraceMiddleware).
	Middleware []rivertype.Middleware
	// Started, when set, records every job the client begins to work,
	// for the process's DeadWorkerRescue (NewStarted).
	Started *Started
}

// NewWorker returns the River client that works jobs (not yet started).
func NewWorker(pool *pgxpool.Pool, p WorkerParams) (*river.Client[pgx.Tx], error) {
	if p.Concurrency < 1 {
		p.Concurrency = 10
	}
	cfg := &river.Config{
		Logger:       Quiet(p.Log),
		Queues:       map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: p.Concurrency}},
		Workers:      p.Workers,
		PeriodicJobs: p.PeriodicJobs,
		JobTimeout:   LongestJobTimeout,
		// A job still "running" this long belonged to a worker that died;
		// give it back to the queue (River's default is an hour, too long for
		// a payment's webhook or sync). It must exceed the longest timeout
		// any worker sets (RescueAfter), or a slow but live job would be
		// rescued and run a second time beside itself.
		RescueStuckJobsAfter: RescueAfter,
		MaxAttempts:          25,
		// River waits 100 ms between fetches by default, which caps a
		// worker at about ten webhook-driven settlements a second
		// (docs/performance.md); 20 ms lifts that at a small polling cost.
		FetchCooldown: 20 * time.Millisecond,
		// River's daily REINDEX CONCURRENTLY of its job indexes needs their
		// ownership, which the runtime role does not have (docs/operations.md:
		// the owner reindexes them when they bloat). An empty, non-nil list
		// reindexes nothing.
		ReindexerIndexNames: []string{},
	}
	cfg.Middleware = []rivertype.Middleware{newJobLog(Quiet(p.Log))}
	if p.Observe != nil {
		// Outermost: it sees what River will record.
		cfg.Middleware = append([]rivertype.Middleware{&observeJobs{observe: p.Observe}}, cfg.Middleware...)
	}
	cfg.Middleware = append(append([]rivertype.Middleware{}, p.Middleware...), cfg.Middleware...)
	if p.Started != nil {
		// Outermost of all: a job counts as received the moment it starts.
		cfg.Middleware = append([]rivertype.Middleware{&startedJobs{s: p.Started}}, cfg.Middleware...)
	}
	if len(p.SingleFlight) > 0 {
		cfg.Middleware = append(cfg.Middleware, newSingleFlight(pool, p.SingleFlight, Quiet(p.Log)))
	}
	if p.FetchPollInterval > 0 {
		cfg.FetchPollInterval = p.FetchPollInterval
	}
	c, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		return nil, fmt.Errorf("river worker: %w", err)
	}
	return c, nil
}

// Quiet keeps River's own info chatter out of the service log: only its
// warnings and errors pass (the River UI's logger too).
func Quiet(log *slog.Logger) *slog.Logger {
	return slog.New(levelFloor{logging.Or(log).Handler(), slog.LevelWarn})
}

type levelFloor struct {
	slog.Handler
	min slog.Level
}

func (h levelFloor) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}
func (h levelFloor) WithAttrs(a []slog.Attr) slog.Handler {
	return levelFloor{h.Handler.WithAttrs(a), h.min}
}
func (h levelFloor) WithGroup(n string) slog.Handler {
	return levelFloor{h.Handler.WithGroup(n), h.min}
}

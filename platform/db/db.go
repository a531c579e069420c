// Package db owns the connection to PostgreSQL: one pgx pool per process,
// bun on top of it through database/sql, transactions with a bounded retry
// on serialization failures and deadlocks, and the translation of the
// PostgreSQL errors that business code cares about.
package db

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"go.opentelemetry.io/otel/trace"

	"svc/platform/tracing"
)

// DB is the process's database handle.
type DB struct {
	Pool *pgxpool.Pool
	SQL  *sql.DB
	Bun  *bun.DB
}

// Option changes how Open connects.
type Option func(*pgxpool.Config)

// WithTracer makes a client span of every statement sent within a
// recording span (otelpgx; statements outside one make none), for the pgx
// pool and bun alike. The spans are named by the statement's operation
// ("SELECT") and carry no SQL text: bun writes values into it (amounts,
// addresses, webhook bodies) and a trace is no place for them. Nil adds
// nothing.
func WithTracer(tp trace.TracerProvider) Option {
	return func(c *pgxpool.Config) {
		if tp == nil {
			return
		}
		c.ConnConfig.Tracer = otelpgx.NewTracer(otelpgx.WithTracerProvider(tp), otelpgx.WithMeterProvider(tracing.MeterProvider),
			otelpgx.WithDisableSQLStatementInAttributes(), otelpgx.WithDisableConnectionDetailsInAttributes(),
			// One span per statement is enough: bun takes a pool connection
			// per statement, and acquire spans would double the count.
			otelpgx.WithDisableAcquireTracer())
	}
}

// Open connects to url with at most maxConns connections and checks that the
// server answers.
func Open(ctx context.Context, url string, maxConns int, opts ...Option) (*DB, error) {
	pcfg, err := poolConfig(url, maxConns, opts...)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	var scs string
	if err := pool.QueryRow(pingCtx, "SHOW standard_conforming_strings").Scan(&scs); err != nil || scs != "on" {
		pool.Close()
		return nil, fmt.Errorf("connect to database: standard_conforming_strings must be on (the server says %q): string literals would not be safe", scs)
	}
	return wrap(pool), nil
}

// poolConfig is the pool configuration of url that Open and OpenReplica
// share.
func poolConfig(url string, maxConns int, opts ...Option) (*pgxpool.Config, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(pcfg)
	}
	if maxConns > 0 {
		pcfg.MaxConns = int32(maxConns)
	}
	pcfg.ConnConfig.RuntimeParams["timezone"] = "UTC"
	// bun writes values into the SQL text as literals; with
	// standard_conforming_strings off, backslashes in them would be escapes
	// and quoting unsafe. Pinned for every connection, and checked (Open,
	// requireSafeStrings).
	pcfg.ConnConfig.RuntimeParams["standard_conforming_strings"] = "on"
	return pcfg, nil
}

// requireSafeStrings refuses a connection whose server does not take
// standard_conforming_strings (see poolConfig), for a pool that Open does
// not check up front.
func requireSafeStrings(ctx context.Context, c *pgx.Conn) error {
	if v := c.PgConn().ParameterStatus("standard_conforming_strings"); v != "on" {
		return fmt.Errorf("standard_conforming_strings must be on (the server says %q): string literals would not be safe", v)
	}
	return nil
}

// wrap puts database/sql and bun over pool.
func wrap(pool *pgxpool.Pool) *DB {
	// As stdlib.OpenDBFromPool, with simpleConnector: the pool keeps the
	// idle connections, database/sql none.
	sqldb := sql.OpenDB(simpleConnector{stdlib.GetPoolConnector(pool)})
	sqldb.SetMaxIdleConns(0)
	return &DB{Pool: pool, SQL: sqldb, Bun: bun.NewDB(sqldb, pgdialect.New())}
}

// Close releases every connection.
func (d *DB) Close() {
	_ = d.Bun.Close()
	d.Pool.Close()
}

// maxTxAttempts bounds RunInTx's retries of transient failures.
const maxTxAttempts = 5

// RunInTx runs fn in a transaction and commits it, retrying the whole
// transaction a bounded number of times when PostgreSQL reports a
// serialization failure or a deadlock. fn must therefore be safe to run
// again: it must not call the network or keep state across attempts.
//
// fn's ctx carries the transaction's commit hooks (AfterCommit), unless db
// is itself a transaction: then RunInTx runs a savepoint, which commits
// nothing, and a hook waits for the outer transaction's commit.
func RunInTx(ctx context.Context, db bun.IDB, fn func(ctx context.Context, tx bun.Tx) error) error {
	if _, nested := db.(bun.Tx); nested {
		return retryTransient(ctx, "transaction", func() error { return db.RunInTx(ctx, nil, fn) })
	}
	return retryTransient(ctx, "transaction", func() error {
		hctx, h := withCommitHooks(ctx)
		if err := db.RunInTx(hctx, nil, fn); err != nil {
			return err
		}
		h.run()
		return nil
	})
}

// commitHooks are the functions one attempt of a transaction runs once it
// has committed.
type commitHooks struct {
	mu  sync.Mutex
	fns []func()
}

type commitHooksKey struct{}

func withCommitHooks(ctx context.Context) (context.Context, *commitHooks) {
	h := &commitHooks{}
	return context.WithValue(ctx, commitHooksKey{}, h), h
}

func (h *commitHooks) run() {
	h.mu.Lock()
	fns := h.fns
	h.fns = nil
	h.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// AfterCommit registers fn to run right after the transaction that RunInTx
// or BatchTx runs with ctx commits, and reports whether ctx belongs to such
// a transaction (false: nothing is registered). fn runs at most once, not
// when the transaction rolls back or is retried (the attempt that commits
// registers its own), and not at all when the process dies between the
// commit and fn: so fn may only hasten what something the transaction
// wrote already guarantees, never be that guarantee (event.Waker).
func AfterCommit(ctx context.Context, fn func()) bool {
	h, ok := ctx.Value(commitHooksKey{}).(*commitHooks)
	if !ok {
		return false
	}
	h.mu.Lock()
	h.fns = append(h.fns, fn)
	h.mu.Unlock()
	return true
}

// retryTransient runs one transaction's attempt, again while it fails with
// a serialization failure or a deadlock, at most maxTxAttempts times.
func retryTransient(ctx context.Context, what string, attempt func() error) error {
	var err error
	for n := 1; n <= maxTxAttempts; n++ {
		err = attempt()
		if err == nil || !IsTransient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(n*n) * 5 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s failed after %d attempts: %w", what, maxTxAttempts, err)
}

// PostgreSQL error codes used by the service.
const (
	codeUniqueViolation      = "23505"
	codeCheckViolation       = "23514"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
)

func pgCode(err error) (string, string) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code, pe.ConstraintName
	}
	return "", ""
}

// IsTransient reports a failure that a retry of the whole transaction may cure.
func IsTransient(err error) bool {
	c, _ := pgCode(err)
	return c == codeSerializationFailure || c == codeDeadlockDetected
}

// IsUniqueViolation reports a unique-constraint violation; with a non-empty
// constraint it must be that constraint.
func IsUniqueViolation(err error, constraint string) bool {
	c, name := pgCode(err)
	return c == codeUniqueViolation && (constraint == "" || constraint == name)
}

// IsCheckViolation reports a CHECK-constraint violation; with a non-empty
// constraint it must be that constraint.
func IsCheckViolation(err error, constraint string) bool {
	c, name := pgCode(err)
	return c == codeCheckViolation && (constraint == "" || constraint == name)
}

// IsNoRows reports sql.ErrNoRows.
func IsNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// Found is the error of a read of one row: notFound when there was no row,
// err wrapped with what (a format and its args) when the read failed, nil
// when it found the row.
func Found(err, notFound error, what string, args ...any) error {
	switch {
	case err == nil:
		return nil
	case IsNoRows(err):
		return notFound
	}
	return fmt.Errorf("%s: %w", fmt.Sprintf(what, args...), err)
}

// lastRefusal is when this process last saw the database refuse work
// (NoteRefusal): what its own requests observed, for readiness.
var lastRefusal atomic.Int64

// NoteRefusal records that the database refused a request's work for a
// condition an operator fixes (IsUnavailable, not a lost connection).
func NoteRefusal(at time.Time) { lastRefusal.Store(at.UnixNano()) }

// LastRefusal is when NoteRefusal was last called (zero: never).
func LastRefusal() time.Time {
	if n := lastRefusal.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// IsUnavailable reports an error that means the database cannot serve the
// request now, through no fault of the request: the connection was lost
// (IsConnectionLoss), or the server refuses the work for a condition an
// operator fixes (disk full 53100, out of memory 53200, too many
// connections 53300, a read-only transaction 25006 after a failover to a
// standby or with default_transaction_read_only). The request may be
// retried with the same Idempotency-Key; nothing it did was committed.
func IsUnavailable(err error) bool {
	if IsConnectionLoss(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "53100", "53200", "53300", "25006":
			return true
		}
	}
	return false
}

// IsConnectionLoss reports an error that means the database could not be
// reached or the connection broke (a restart, a failover, a terminated
// backend): a dependency unavailable, not a bug. The request may be
// retried with the same Idempotency-Key.
func IsConnectionLoss(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// 08: connection exception; 57P01-57P03: shutdown, crash shutdown,
		// cannot connect now.
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) {
		return true
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	// A server that goes away mid-message (pg_ctl -m immediate, a crash, a
	// failover) makes pgx return a bare io.ErrUnexpectedEOF, with no word of
	// its own around it (the fault harness saw "look up API key: unexpected
	// EOF" answered 500). Only untyped errors are asked about here, and the
	// other readers of a request (the body, the processor's answers) type
	// their failures, so an unexpected EOF that reaches here is the
	// database's. A bare io.EOF is not taken for one.
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	// pgconn's own words for a connection that broke under a query.
	msg := err.Error()
	for _, s := range []string{"failed to receive message", "failed to write", "failed to send", "conn closed", "failed to connect"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// SerialReadSettings makes the rest of a transaction run each statement in
// one server process, without parallel workers or JIT: for the long reads of
// background jobs (checkpoints, liabilities snapshots), which would
// otherwise take every core from the writers for no gain on a small server.
const SerialReadSettings = "SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL jit = off"

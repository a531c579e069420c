package db

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
)

// Querier is the database/sql side of a bun handle. Hot statements are sent
// through it with real parameters ($1, $2, ...) instead of bun's
// interpolated literals: the driver then prepares each statement shape once
// per connection and reuses it, where an interpolated query that returns
// rows is a new statement every time (an extra round trip to prepare it,
// and churn in the connection's statement cache).
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQLOf returns the database/sql handle under a bun handle: the same
// transaction when idb is one.
func SQLOf(idb bun.IDB) (Querier, error) {
	switch v := idb.(type) {
	case bun.Tx:
		return v.Tx, nil
	case *bun.Tx:
		return v.Tx, nil
	case *bun.DB:
		return v.DB, nil
	case bun.Conn:
		return v.Conn, nil
	case *bun.Conn:
		return v.Conn, nil
	}
	return nil, fmt.Errorf("db: unsupported database handle %T", idb)
}

// Exec runs a statement that returns no rows with real parameters ($1, $2,
// ...) through idb's database/sql handle (see Querier): prepared once per
// connection, for the statements that run on every request or job.
func Exec(ctx context.Context, idb bun.IDB, query string, args ...any) (sql.Result, error) {
	q, err := SQLOf(idb)
	if err != nil {
		return nil, err
	}
	return q.ExecContext(ctx, query, args...)
}

// QueryModel runs query, a statement that returns the rows of a bun model
// (a SELECT, or an INSERT, UPDATE or DELETE with RETURNING), with real
// parameters ($1, $2, ...) through idb's database/sql handle (see
// Querier), and scans its first row into dest, a pointer to the model, as
// bun scans. It returns sql.ErrNoRows when there is no row, as bun's Scan
// does. The statement is prepared once per connection; bun's own query
// would be parsed and planned anew for every call, which for a short
// statement costs PostgreSQL more than running it.
func QueryModel(ctx context.Context, idb bun.IDB, dest any, query string, args ...any) error {
	rows, err := queryRows(ctx, idb, query, args)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := idb.NewSelect().DB().ScanRow(ctx, rows, dest); err != nil {
		return err
	}
	for rows.Next() { // drain, so that an error after the first row shows
	}
	return rows.Err()
}

// QueryModels is QueryModel for every row: it scans the rows of query into
// dest, a pointer to a slice of a bun model, as bun's Scan does, and leaves
// the slice empty when there is none (no sql.ErrNoRows).
func QueryModels(ctx context.Context, idb bun.IDB, dest any, query string, args ...any) error {
	rows, err := queryRows(ctx, idb, query, args)
	if err != nil {
		return err
	}
	return idb.NewSelect().DB().ScanRows(ctx, rows, dest) // closes rows
}

// queryRows runs query with real parameters through idb's database/sql
// handle.
func queryRows(ctx context.Context, idb bun.IDB, query string, args []any) (*sql.Rows, error) {
	q, err := SQLOf(idb)
	if err != nil {
		return nil, err
	}
	return q.QueryContext(ctx, query, args...)
}

// GetModels is GetModel for every row: dest points to a slice of a bun
// model, and tail ("WHERE deposit_id = $1 ORDER BY id") follows the
// model's SELECT, run with QueryModels.
func GetModels(ctx context.Context, idb bun.IDB, dest any, tail string, args ...any) error {
	return QueryModels(ctx, idb, dest, selectHead(idb, dest)+" "+tail, args...)
}

// GetModel reads one row into dest, a pointer to a bun model, with
// QueryModel: SELECT the model's columns FROM its table AS its alias (as
// bun writes them), then tail, the rest of the statement ("WHERE id = $1
// FOR UPDATE"), with args.
func GetModel(ctx context.Context, idb bun.IDB, dest any, tail string, args ...any) error {
	return QueryModel(ctx, idb, dest, selectHead(idb, dest)+" "+tail, args...)
}

// GetByID reads the row whose id is id into dest with GetModel, and locks
// it until idb's transaction ends when lock is set (FOR UPDATE).
func GetByID(ctx context.Context, idb bun.IDB, dest, id any, lock bool) error {
	tail := "WHERE id = $1"
	if lock {
		tail += " FOR UPDATE"
	}
	return GetModel(ctx, idb, dest, tail, id)
}

// Columns returns the columns of the bun model dest points to, quoted and
// comma-separated, for a RETURNING clause of QueryModel: named rather than
// "*", so that a column added by a migration while the service runs does
// not change the result of a statement a connection has prepared (which
// PostgreSQL refuses to run until it is prepared again).
func Columns(idb bun.IDB, dest any) string {
	t := reflect.TypeOf(dest)
	if c, ok := modelColumns.Load(t); ok {
		return c.(string)
	}
	table := idb.Dialect().Tables().Get(t)
	names := make([]string, len(table.Fields))
	for i, f := range table.Fields {
		names[i] = string(f.SQLName)
	}
	c := strings.Join(names, ", ")
	modelColumns.Store(t, c)
	return c
}

// modelColumns caches Columns by model type.
var modelColumns sync.Map // reflect.Type -> string

// selectHeads caches selectHead by model type: the text never changes.
var selectHeads sync.Map // reflect.Type -> string

// selectHead is "SELECT <columns> FROM <table> AS <alias>" of the model
// dest points to, as bun writes it.
func selectHead(idb bun.IDB, dest any) string {
	t := reflect.TypeOf(dest)
	if h, ok := selectHeads.Load(t); ok {
		return h.(string)
	}
	h := idb.NewSelect().Model(dest).String()
	selectHeads.Store(t, h)
	return h
}

// Pipeline sends the statements queued on b in one round trip, as one
// implicit transaction: they commit together after the last one, or not at
// all when any of them fails. read reads each statement's result from br in
// queue order; Pipeline returns read's error, else the batch's.
//
// Only the pool can pipeline (idb must be the *bun.DB, not a transaction),
// and only through pgx, which database/sql does not expose: the statements
// are pgx's, with real parameters, prepared once per connection.
//
// As RunInTx does for a transaction, a batch the server refused with a
// serialization failure or a deadlock is sent again a bounded number of
// times, so read may run more than once. An error that is a
// *pgconn.PgError means the server refused and nothing committed; any
// other error after the batch was sent (the connection lost) leaves the
// outcome unknown, as for a COMMIT.
func Pipeline(ctx context.Context, idb bun.IDB, b *pgx.Batch, read func(br pgx.BatchResults) error) error {
	pool, ok := idb.(*bun.DB)
	if !ok {
		return fmt.Errorf("db: a pipeline runs on the pool, not on a %T", idb)
	}
	return retryTransient(ctx, "pipeline", func() error { return pipelineOnce(ctx, pool, b, read) })
}

// PipelineOnce is Pipeline without its retries, for a batch that holds
// more than one transaction (explicit BEGIN and COMMIT statements in it):
// when a later transaction fails, an earlier one may have committed, and
// only the caller knows what sending the batch again would do.
func PipelineOnce(ctx context.Context, idb bun.IDB, b *pgx.Batch, read func(br pgx.BatchResults) error) error {
	pool, ok := idb.(*bun.DB)
	if !ok {
		return fmt.Errorf("db: a pipeline runs on the pool, not on a %T", idb)
	}
	return pipelineOnce(ctx, pool, b, read)
}

func pipelineOnce(ctx context.Context, pool *bun.DB, b *pgx.Batch, read func(br pgx.BatchResults) error) error {
	conn, err := pool.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		c, err := pgxConn(dc)
		if err != nil {
			return err
		}
		// A batch must be sent only once (pgx keeps each query's statement
		// description from the first send), and a retry may run on another
		// connection: send a fresh copy of the queued statements.
		var fresh pgx.Batch
		for _, q := range b.QueuedQueries {
			fresh.Queue(q.SQL, q.Arguments...)
		}
		br := c.SendBatch(ctx, &fresh)
		err = read(br)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		endTx(ctx, c)
		return err
	})
}

// endTx rolls back the transaction a batch left open. A batch whose
// explicit transaction (BEGIN ... COMMIT) the server refused ends in a
// failed transaction block: PostgreSQL skipped the rest of the batch, the
// COMMIT with it, up to the Sync. Nothing of that transaction committed,
// and the pool would destroy the connection on its release and open a new
// one for the next statement: a refusal, an expected answer, would cost a
// connection each time. Rolled back, the connection goes back to the pool
// healthy. A connection that cannot be rolled back is left to the pool,
// which destroys it.
func endTx(ctx context.Context, c *pgx.Conn) {
	pc := c.PgConn()
	if pc.IsClosed() || pc.IsBusy() || pc.TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = c.Exec(ctx, "ROLLBACK", pgx.QueryExecModeSimpleProtocol)
}

// RawPgx runs fn with the pgx connection under conn, a connection of
// Open's pool taken from database/sql (bun.DB.Conn): for what database/sql
// cannot do, or does slowly, such as reading millions of rows in binary
// or COPY. fn must leave the connection as it found it (no transaction
// open).
func RawPgx(conn *sql.Conn, fn func(c *pgx.Conn) error) error {
	return conn.Raw(func(dc any) error {
		c, err := pgxConn(dc)
		if err != nil {
			return err
		}
		return fn(c)
	})
}

// SendBatch sends the statements queued on a pgx.Batch in one round trip
// (BatchTx).
type SendBatch func(b *pgx.Batch, read func(br pgx.BatchResults) error) error

// BatchTx runs fn in a transaction on one connection of the pool (idb must
// be the *bun.DB) and commits it when fn returns nil, else rolls it back.
// fn has the transaction both as database/sql's, for callers that take
// one (River's InsertTx), and as send, which sends statements queued on a
// pgx.Batch inside it in one round trip: read reads each statement's
// result from br in queue order, and send returns read's error, else the
// batch's. A statement the server refuses fails the transaction: the rest
// of the batch is skipped and nothing of the transaction commits.
//
// fn's ctx carries the transaction's commit hooks (AfterCommit).
//
// It never retries: fn runs once. An error that fn returned means nothing
// committed; so does a *pgconn.PgError from the commit; any other error of
// the commit (the connection lost) leaves the outcome unknown.
func BatchTx(ctx context.Context, idb bun.IDB, fn func(ctx context.Context, tx *sql.Tx, send SendBatch) error) error {
	pool, ok := idb.(*bun.DB)
	if !ok {
		return fmt.Errorf("db: a batch transaction runs on the pool, not on a %T", idb)
	}
	conn, err := pool.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback() // before conn.Close, which waits for the transaction's end
			panic(p)
		}
	}()
	send := func(b *pgx.Batch, read func(br pgx.BatchResults) error) error {
		var panicked any
		err := conn.Raw(func(dc any) (err error) {
			defer func() {
				if p := recover(); p != nil {
					// Raw would release the connection as bad, which
					// waits for the open transaction's end: a hang.
					panicked, err = p, fmt.Errorf("db: panic in a batch: %v", p)
				}
			}()
			c, err := pgxConn(dc)
			if err != nil {
				return err
			}
			br := c.SendBatch(ctx, b)
			err = read(br)
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			return err
		})
		if panicked != nil {
			panic(panicked)
		}
		return err
	}
	hctx, hooks := withCommitHooks(ctx)
	if err := fn(hctx, tx, send); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	hooks.run()
	return nil
}

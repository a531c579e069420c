package db_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/platform/db"
	"svc/platform/dbtest"
)

func openEmpty(t *testing.T) *db.DB {
	t.Helper()
	d, err := db.Open(context.Background(), dbtest.NewEmptyURL(t), 4)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

// TestPipeline: the statements of a batch commit together, or none of
// them when a later one fails; a pipeline needs the pool.
func TestPipeline(t *testing.T) {
	t.Parallel()
	d := openEmpty(t)
	ctx := context.Background()
	_, err := d.Bun.ExecContext(ctx, "CREATE TABLE p (n int PRIMARY KEY)")
	require.NoError(t, err)
	count := func() int {
		var n int
		require.NoError(t, d.Bun.NewRaw("SELECT count(*) FROM p").Scan(ctx, &n))
		return n
	}
	send := func(ns ...int) error {
		var b pgx.Batch
		for _, n := range ns {
			b.Queue("INSERT INTO p VALUES ($1)", n)
		}
		return db.Pipeline(ctx, d.Bun, &b, func(br pgx.BatchResults) error {
			for range ns {
				if _, err := br.Exec(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, send(1, 2))
	require.Equal(t, 2, count())
	err = send(3, 4, 1) // the last repeats a key
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "23505", pe.Code)
	require.Equal(t, 2, count(), "3 and 4 were rolled back with the failed statement")

	// A serialization failure is retried with the whole batch, whose first
	// attempt left nothing behind.
	_, err = d.Bun.ExecContext(ctx, `CREATE SEQUENCE attempts;
CREATE FUNCTION fail_first() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF nextval('attempts') = 1 THEN
        RAISE EXCEPTION 'first attempt' USING ERRCODE = 'serialization_failure';
    END IF;
    RETURN true;
END $$`)
	require.NoError(t, err)
	var b pgx.Batch
	b.Queue("INSERT INTO p VALUES ($1)", 5)
	b.Queue("SELECT fail_first()")
	reads := 0
	require.NoError(t, db.Pipeline(ctx, d.Bun, &b, func(br pgx.BatchResults) error {
		reads++
		if _, err := br.Exec(); err != nil {
			return err
		}
		_, err := br.Exec()
		return err
	}))
	require.Equal(t, 2, reads, "sent twice")
	require.Equal(t, 3, count(), "the row once")

	tx, err := d.Bun.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck // the test's own transaction
	require.Error(t, db.Pipeline(ctx, tx, &pgx.Batch{}, func(pgx.BatchResults) error { return nil }))
}

// TestQueriesWithoutArgumentsAreNotPrepared: bun's queries, whose values are
// in the text, are not prepared as named statements (one round trip, no
// statement cache churn); queries with arguments are, once per shape.
func TestQueriesWithoutArgumentsAreNotPrepared(t *testing.T) {
	t.Parallel()
	d := openEmpty(t)
	ctx := context.Background()
	conn, err := d.SQL.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	prepared := func() int {
		var n int
		require.NoError(t, conn.QueryRowContext(ctx, "SELECT count(*) FROM pg_prepared_statements WHERE $1", true).Scan(&n))
		return n
	}
	before := prepared()
	for i := range 3 {
		var n int
		require.NoError(t, conn.QueryRowContext(ctx, "SELECT "+string(rune('1'+i))).Scan(&n))
		require.Equal(t, i+1, n)
	}
	require.Equal(t, before, prepared(), "no statement without arguments was prepared, and the counting one only once")
}

// modelRow is a bun model of every kind of column the service scans.
type modelRow struct {
	bun.BaseModel `bun:"table:m,alias:row"`

	ID      uuid.UUID       `bun:"id,pk"`
	N       int64           `bun:"n"`
	Name    *string         `bun:"name"`
	At      time.Time       `bun:"at"`
	Maybe   *time.Time      `bun:"maybe"`
	Body    []byte          `bun:"body"`
	Payload json.RawMessage `bun:"payload,type:jsonb"`
	On      bool            `bun:"on"`
}

// TestQueryModel: a model read with real parameters (GetModel, and
// QueryModel with RETURNING) holds what bun's own Scan reads, in a
// transaction too; no row is sql.ErrNoRows; each statement is prepared
// once per connection, however often it runs.
func TestQueryModel(t *testing.T) {
	t.Parallel()
	d := openEmpty(t)
	ctx := context.Background()
	_, err := d.Bun.ExecContext(ctx, `CREATE TABLE m (id uuid PRIMARY KEY, n bigint NOT NULL, name text, at timestamptz NOT NULL,
		maybe timestamptz, body bytea, payload jsonb, "on" boolean NOT NULL)`)
	require.NoError(t, err)
	name := "a 'quoted' name"
	in := modelRow{ID: uuid.New(), N: 42, Name: &name, At: time.Now().UTC().Truncate(time.Microsecond), Body: []byte{0, 1, 2},
		Payload: json.RawMessage(`{"a": [1, "x"]}`), On: true}
	_, err = d.Bun.NewInsert().Model(&in).Exec(ctx)
	require.NoError(t, err)
	var viaBun modelRow
	require.NoError(t, d.Bun.NewSelect().Model(&viaBun).Where("id = ?", in.ID).Scan(ctx))
	for range 3 {
		var got modelRow
		require.NoError(t, db.GetModel(ctx, d.Bun, &got, "WHERE id = $1", in.ID))
		require.Equal(t, viaBun, got)
	}
	var got modelRow
	require.ErrorIs(t, db.GetModel(ctx, d.Bun, &got, "WHERE id = $1", uuid.New()), sql.ErrNoRows)
	err = db.RunInTx(ctx, d.Bun, func(ctx context.Context, tx bun.Tx) error {
		var locked modelRow
		if err := db.GetModel(ctx, tx, &locked, "WHERE id = $1 FOR UPDATE", in.ID); err != nil {
			return err
		}
		return db.QueryModel(ctx, tx, &got, `UPDATE m SET n = n + $2, maybe = $3 WHERE id = $1 RETURNING `+db.Columns(tx, &got), in.ID, 1, in.At)
	})
	require.NoError(t, err)
	require.Equal(t, int64(43), got.N)
	require.Equal(t, in.At, got.Maybe.UTC())
	require.Equal(t, name, *got.Name)

	// Every row (GetModels), as bun's Scan reads them; none is an empty
	// slice, not an error.
	second := in
	second.ID, second.N, second.Name = uuid.New(), 7, nil
	_, err = d.Bun.NewInsert().Model(&second).Exec(ctx)
	require.NoError(t, err)
	var allViaBun, all []modelRow
	require.NoError(t, d.Bun.NewSelect().Model(&allViaBun).OrderExpr("n").Scan(ctx))
	require.NoError(t, db.GetModels(ctx, d.Bun, &all, "WHERE n >= $1 ORDER BY n", 0))
	require.Len(t, all, 2)
	require.Equal(t, allViaBun, all)
	none := []modelRow{}
	require.NoError(t, db.GetModels(ctx, d.Bun, &none, "WHERE n < $1", 0))
	require.Empty(t, none)

	conn, err := d.Bun.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	for range 3 {
		require.NoError(t, db.GetModel(ctx, conn, &got, "WHERE id = $1", in.ID))
	}
	var prepared int
	require.NoError(t, conn.Conn.QueryRowContext(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%FROM "m" AS "row" WHERE id = _1' AND $1`, true).Scan(&prepared))
	require.Equal(t, 1, prepared, "prepared once on the connection, for three reads")

	// A column added while the statements stay prepared changes neither
	// their columns nor what they return ("RETURNING *" would fail here:
	// cached plan must not change result type).
	update := `UPDATE m SET n = n + 1 WHERE id = $1 RETURNING ` + db.Columns(conn, &got)
	require.NoError(t, db.QueryModel(ctx, conn, &got, update, in.ID))
	_, err = d.Bun.ExecContext(ctx, "ALTER TABLE m ADD COLUMN extra int")
	require.NoError(t, err)
	require.NoError(t, db.QueryModel(ctx, conn, &got, update, in.ID))
	require.NoError(t, db.GetModel(ctx, conn, &got, "WHERE id = $1", in.ID))
	require.Equal(t, int64(45), got.N)
}

// TestArraysAndUUIDsTravelAsText: lib/pq's arrays (River's database/sql
// driver passes every column of its job insert as one) and uuids reach pgx
// as their text, a NULL array as nil, other arguments untouched; and each
// kind reads back through the pool as it was sent.
func TestArraysAndUUIDsTravelAsText(t *testing.T) {
	t.Parallel()
	args := []driver.NamedValue{
		{Ordinal: 1, Value: pq.Array([]int64{1, -2})},
		{Ordinal: 2, Value: pq.Array([]string{`a "b"`, `c\d`, "{e,}"})},
		{Ordinal: 3, Value: pq.Array([][]byte{{0, 0xff}})},
		{Ordinal: 4, Value: pq.Array([]time.Time{time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)})},
		{Ordinal: 5, Value: pq.Array([]int64(nil))},
		{Ordinal: 6, Value: int64(7)},
		{Ordinal: 7, Value: uuid.MustParse("0b7e4d2a-9c1f-4e3a-8d5b-6f2a1c9e0d47")},
	}
	got, err := db.TextParams(args)
	require.NoError(t, err)
	require.Equal(t, `{1,-2}`, got[0].Value)
	require.IsType(t, "", got[1].Value)
	require.IsType(t, "", got[2].Value)
	require.IsType(t, "", got[3].Value)
	require.Nil(t, got[4].Value)
	require.Equal(t, int64(7), got[5].Value)
	require.Equal(t, "0b7e4d2a-9c1f-4e3a-8d5b-6f2a1c9e0d47", got[6].Value)
	require.IsType(t, &pq.Int64Array{}, args[0].Value, "the caller's arguments are left as they were")
	plain := []driver.NamedValue{{Ordinal: 1, Value: "x"}}
	same, err := db.TextParams(plain)
	require.NoError(t, err)
	require.Same(t, &plain[0], &same[0], "arguments without an array are passed on as they are")

	d := openEmpty(t)
	var (
		ints  []int64
		strs  []string
		bytes [][]byte
		at    time.Time
		null  bool
		id    uuid.UUID
		asTxt string
	)
	row := d.SQL.QueryRowContext(context.Background(), `SELECT $1::bigint[], $2::text[], $3::bytea[], ($4::timestamptz[])[1], $5::bigint[] IS NULL, $6::uuid, $7::text`,
		args[0].Value, args[1].Value, args[2].Value, args[3].Value, args[4].Value, args[6].Value, args[6].Value)
	require.NoError(t, row.Scan(pq.Array(&ints), pq.Array(&strs), pq.Array(&bytes), &at, &null, &id, &asTxt))
	require.Equal(t, []int64{1, -2}, ints)
	require.Equal(t, []string{`a "b"`, `c\d`, "{e,}"}, strs)
	require.Equal(t, [][]byte{{0, 0xff}}, bytes)
	require.True(t, at.Equal(time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)), "%v", at)
	require.True(t, null)
	require.Equal(t, args[6].Value, id)
	require.Equal(t, "0b7e4d2a-9c1f-4e3a-8d5b-6f2a1c9e0d47", asTxt)
}

// TestPipelineOnceRefusedTransactionKeepsTheConnection: a batch whose
// explicit transaction the server refuses leaves no failed transaction
// block behind. The connection goes back to the pool and serves the next
// statement: ten refusals open no new connection.
func TestPipelineOnceRefusedTransactionKeepsTheConnection(t *testing.T) {
	t.Parallel()
	d := openEmpty(t)
	ctx := context.Background()
	_, err := d.Bun.ExecContext(ctx, `CREATE TABLE q (n int PRIMARY KEY);
CREATE FUNCTION refuse() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'refused' USING ERRCODE = 'SV002';
END $$`)
	require.NoError(t, err)
	refuse := func() error {
		var b pgx.Batch
		b.Queue("BEGIN")
		b.Queue("INSERT INTO q VALUES (1)")
		b.Queue("SELECT refuse()")
		b.Queue("COMMIT")
		return db.PipelineOnce(ctx, d.Bun, &b, func(br pgx.BatchResults) error {
			for range 4 {
				if _, err := br.Exec(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.Error(t, refuse()) // the pool's first connection
	before := d.Pool.Stat().NewConnsCount()
	for range 10 {
		var pe *pgconn.PgError
		require.ErrorAs(t, refuse(), &pe)
		require.Equal(t, "SV002", pe.Code)
	}
	var n int
	require.NoError(t, d.Bun.NewRaw("SELECT count(*) FROM q").Scan(ctx, &n))
	require.Zero(t, n, "nothing of the refused transactions committed")
	require.Equal(t, before, d.Pool.Stat().NewConnsCount(), "no refusal cost a connection")
}

// TestBatchTx: what the transaction's database/sql statements and its
// batch write commit together, or none of it when a statement of the
// batch fails; the connection goes back to the pool usable.
func TestBatchTx(t *testing.T) {
	t.Parallel()
	d := openEmpty(t)
	ctx := context.Background()
	_, err := d.Bun.ExecContext(ctx, "CREATE TABLE p (n int PRIMARY KEY)")
	require.NoError(t, err)
	count := func() int {
		var n int
		require.NoError(t, d.Bun.NewRaw("SELECT count(*) FROM p").Scan(ctx, &n))
		return n
	}
	run := func(first int, ns ...int) error {
		return db.BatchTx(ctx, d.Bun, func(ctx context.Context, tx *sql.Tx, send db.SendBatch) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO p VALUES ($1)", first); err != nil {
				return err
			}
			var b pgx.Batch
			for _, n := range ns {
				b.Queue("INSERT INTO p VALUES ($1)", n)
			}
			return send(&b, func(br pgx.BatchResults) error {
				for range ns {
					if _, err := br.Exec(); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
	require.NoError(t, run(1, 2, 3))
	require.Equal(t, 3, count())
	for range 8 { // more than the pool's connections: each one came back usable
		err = run(4, 5, 1) // the last repeats a key
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "23505", pe.Code)
		require.Equal(t, 3, count(), "4 and 5 were rolled back with the failed statement")
	}
	require.NoError(t, run(4, 5))
	require.Equal(t, 5, count())
	tx, err := d.Bun.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	require.Error(t, db.BatchTx(ctx, tx, func(context.Context, *sql.Tx, db.SendBatch) error { return nil }), "a batch transaction needs the pool")
}

// TestBatchTxPanic: a panic in BatchTx's function, or in a batch's read,
// rolls its transaction back and reaches the caller (whose recover answers
// 500), instead of leaving the goroutine waiting forever for a transaction
// that never ends, with the connection and its locks held.
func TestBatchTxPanic(t *testing.T) {
	d := openEmpty(t)
	ctx := context.Background()
	_, err := d.Bun.ExecContext(ctx, "CREATE TABLE p (n int PRIMARY KEY)")
	require.NoError(t, err)
	for _, where := range []string{"read", "fn"} {
		done := make(chan any, 1)
		go func() {
			defer func() { done <- recover() }()
			_ = db.BatchTx(ctx, d.Bun, func(ctx context.Context, tx *sql.Tx, send db.SendBatch) error {
				if _, err := tx.ExecContext(ctx, "INSERT INTO p VALUES (1)"); err != nil {
					return err
				}
				if where == "fn" {
					panic("boom in fn")
				}
				var b pgx.Batch
				b.Queue("INSERT INTO p VALUES (2)")
				return send(&b, func(br pgx.BatchResults) error { panic("boom in read") })
			})
		}()
		select {
		case p := <-done:
			require.NotNil(t, p, "%s: the panic reaches the caller", where)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: BatchTx did not return after the panic", where)
		}
		var n int
		require.NoError(t, d.Bun.QueryRowContext(ctx, "SELECT count(*) FROM p").Scan(&n))
		require.Zero(t, n, "%s: nothing committed", where)
	}
}

package db_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"svc/platform/db"
	"svc/platform/dbtest"
)

// BenchmarkQueryPath measures how the service's two kinds of query travel
// through database/sql and pgx under each way pgx can send them, with 32
// concurrent clients on the pool, and reports operations per second and
// their latency. One operation is what the service's read paths mix:
//
//   - a query as bun sends it, its value written into the text (an
//     account looked up by owner: one of 100,000, so the text is nearly
//     always new), and
//   - a query with a real parameter (db.Querier's hot paths).
//
// The modes: "cache_statement" is pgx's default (every query prepared as
// a named statement and cached per connection; the service's path before),
// "simple_for_literals" is the service's path now (simpleConnector: a
// query without arguments in the simple protocol, the rest cached),
// "cache_statement_4096" the default with a cache eight times larger,
// "cache_describe", "describe_exec" and "exec" pgx's other extended-protocol
// modes for every query, and "simple" the simple protocol for every query
// (pgx interpolating the parameters). docs/performance.md records a run.
func BenchmarkQueryPath(b *testing.B) {
	admin := os.Getenv("DATABASE_URL")
	if admin == "" {
		b.Skip("DATABASE_URL is not set")
	}
	ctx := context.Background()
	name := fmt.Sprintf("qp_%d", time.Now().UnixNano())
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		b.Fatal(err)
	}
	defer conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") //nolint:errcheck // cleanup
	u, err := url.Parse(admin)
	if err != nil {
		b.Fatal(err)
	}
	u.Path = "/" + name
	dbURL := u.String()
	setup, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := setup.Exec(ctx, `CREATE TABLE accounts (id bigserial PRIMARY KEY, owner text NOT NULL, kind text NOT NULL, balance bigint NOT NULL,
    UNIQUE (owner, kind));
INSERT INTO accounts (owner, kind, balance) SELECT 'user-' || i, k, i FROM generate_series(1, 100000) i, unnest(ARRAY['available', 'hold']) k`); err != nil {
		b.Fatal(err)
	}
	if _, err := setup.Exec(ctx, "VACUUM ANALYZE accounts"); err != nil {
		b.Fatal(err)
	}
	setup.Close(ctx)

	dur := 5 * time.Second
	if s := os.Getenv("QUERYPATH_BENCH_DURATION"); s != "" {
		if dur, err = time.ParseDuration(s); err != nil {
			b.Fatal(err)
		}
	}
	for _, m := range []struct {
		name     string
		mode     pgx.QueryExecMode
		cache    int
		literals bool // simpleConnector
	}{
		{"cache_statement", pgx.QueryExecModeCacheStatement, 0, false},
		{"simple_for_literals", pgx.QueryExecModeCacheStatement, 0, true},
		{"cache_statement_4096", pgx.QueryExecModeCacheStatement, 4096, false},
		{"cache_describe", pgx.QueryExecModeCacheDescribe, 0, false},
		{"describe_exec", pgx.QueryExecModeDescribeExec, 0, false},
		{"exec", pgx.QueryExecModeExec, 0, false},
		{"simple", pgx.QueryExecModeSimpleProtocol, 0, false},
	} {
		b.Run(m.name, func(b *testing.B) {
			cfg, err := pgxpool.ParseConfig(dbURL)
			if err != nil {
				b.Fatal(err)
			}
			cfg.MaxConns = 32
			cfg.ConnConfig.DefaultQueryExecMode = m.mode
			if m.cache > 0 {
				cfg.ConnConfig.StatementCacheCapacity = m.cache
			}
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			var connector = stdlib.GetPoolConnector(pool)
			if m.literals {
				connector = db.SimpleConnector(connector)
			}
			sqldb := sql.OpenDB(connector)
			sqldb.SetMaxIdleConns(0)
			defer sqldb.Close()
			ctx := context.Background()
			dbtest.RunClients(b, 32, dur, func(_ int, seq int64) error {
				i := seq*7919%100000 + 1
				var bal int64
				// As bun sends it: the value in the text.
				err := sqldb.QueryRowContext(ctx, fmt.Sprintf("SELECT balance FROM accounts WHERE owner = 'user-%d' AND kind = 'available'", i)).Scan(&bal)
				if err != nil {
					return err
				}
				// As db.Querier sends it: a real parameter.
				return sqldb.QueryRowContext(ctx, "SELECT balance FROM accounts WHERE owner = $1 AND kind = 'hold'", fmt.Sprint("user-", i)).Scan(&bal)
			}).Report(b)
		})
	}
}

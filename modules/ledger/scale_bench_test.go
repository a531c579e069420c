package ledger_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/modules/reconcile"
	"svc/modules/withdrawal"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// The ledger at scale (make bench; docs/performance.md, "The ledger at ten
// million postings").
//
// A generated book of N postings: N/2 deposit credits (a user posting with
// its running balance and a custody posting each) over N/10 users, each in
// one of the three assets, dated evenly over two years. Every user has at
// least one deposit; the rest go to users drawn with a strong skew (user k
// of U is drawn with probability ((k+1)/U)^(1/3) - (k/U)^(1/3)), so user 0
// has about 1% of all deposits (50,000 at ten million postings), the ten
// hottest about 4%, and most users one to three.
//
// The book is written once per size and migration set into a kept database
// (dbtest.Kept) and every run measures a file copy of it (dbtest.Clone),
// so a rerun does not regenerate and no run measures another's writes.

// scaleVersion names the generator's output: change it with the generator.
// 2: user postings carry their entry's display fields (migration 0025).
const scaleVersion = 2

var scaleAssets = []string{"BTC", "BTC_LN", "USDT_TRC20"}

// scaleBook is the generated book's shape.
type scaleBook struct{ postings, users int64 }

func newScaleBook(postings int64) scaleBook {
	postings -= postings % 2
	return scaleBook{postings: postings, users: max(postings/10, 1)}
}

func (s scaleBook) entries() int64 { return s.postings / 2 }

func scaleUser(k int64) string { return "scale-" + strconv.FormatInt(k, 10) }

// scaleAsset is the one asset of user k.
func scaleAsset(k int64) string { return scaleAssets[k%3] }

// generateScale writes the book into the (fresh, migrated) database of u,
// as its owner, in one transaction with the ledger's triggers disabled:
// row by row checks would make ten million postings take hours. The
// triggers are back on before the transaction commits, and nobody else
// sees the tables meanwhile (ALTER TABLE locks them). So that this
// measures something real, it then checks what the triggers would have:
// every running balance (balance_after) continues its account's chain,
// and ledger.Check finds every entry balanced, every balance equal to
// its postings and every user posting's copies equal to its entry's
// fields.
func generateScale(t testing.TB, u string, book scaleBook) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbtest.OwnerURL(u))
	require.NoError(t, err)
	defer conn.Close(ctx)
	start := time.Now()
	var accountBase, entryBase, postingBase int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT coalesce(max(id), 0) FROM ledger_accounts),
       (SELECT coalesce(max(id), 0) FROM ledger_entries), (SELECT coalesce(max(id), 0) FROM ledger_postings)`).
		Scan(&accountBase, &entryBase, &postingBase))
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	assets := `(ARRAY['BTC', 'BTC_LN', 'USDT_TRC20'])[s.u % 3 + 1]`
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`SET LOCAL work_mem = '256MB'`, nil},
		{`ALTER TABLE ledger_accounts DISABLE TRIGGER USER`, nil},
		{`ALTER TABLE ledger_entries DISABLE TRIGGER USER`, nil},
		{`ALTER TABLE ledger_postings DISABLE TRIGGER USER`, nil},
		// Deposit g (1..E): user g-1 for the first U, then a skewed draw;
		// hashint8 makes every draw the same on every run.
		{`CREATE TEMP TABLE scale_gen ON COMMIT DROP AS
SELECT g, CASE WHEN g <= $1 THEN g - 1
               ELSE least($1 - 1, floor($1 * power((hashint8(g) & 2147483647)::float8 / 2147483648, 3)))::bigint END AS u,
       (1000 + (hashint8(g + 7919) & 2147483647) % 100000)::bigint AS amount,
       timestamptz '2024-11-01 00:00:00+00' + (g - 1) * (interval '730 days' / $2) AS at
  FROM generate_series(1, $2::bigint) g`, []any{book.users, book.entries()}},
		{`INSERT INTO ledger_accounts (id, asset, kind, owner, balance, created_at) OVERRIDING SYSTEM VALUE
SELECT $1 + 1 + s.u, ` + assets + `, 'user_available', 'scale-' || s.u, sum(s.amount), min(s.at)
  FROM scale_gen s GROUP BY s.u ORDER BY s.u`, []any{accountBase}},
		{`INSERT INTO ledger_entries (id, kind, asset, source_ref, created_at) OVERRIDING SYSTEM VALUE
SELECT $1 + s.g, 'deposit_credit', ` + assets + `, 'deposit:scale:' || lpad(s.g::text, 12, '0'), s.at
  FROM scale_gen s ORDER BY s.g`, []any{entryBase}},
		// The user's posting first, with its running balance (the account
		// is new: the chain starts at 0) and its entry's display fields,
		// then custody's; in id order.
		{`INSERT INTO ledger_postings (id, entry_id, account_id, amount, balance_after, entry_kind, entry_ref, entry_at) OVERRIDING SYSTEM VALUE
SELECT $1 + 2 * s.g - 1 + x.side, $2 + s.g, CASE x.side WHEN 0 THEN $3 + 1 + s.u ELSE c.id END,
       CASE x.side WHEN 0 THEN s.amount ELSE -s.amount END, CASE x.side WHEN 0 THEN s.running END,
       CASE x.side WHEN 0 THEN 'deposit_credit' END, CASE x.side WHEN 0 THEN 'deposit:scale:' || lpad(s.g::text, 12, '0') END,
       CASE x.side WHEN 0 THEN s.at END
  FROM (SELECT g, u, amount, at, sum(amount) OVER (PARTITION BY u ORDER BY g) AS running FROM scale_gen) s
  JOIN ledger_accounts c ON c.owner = '' AND c.kind = 'custody' AND c.asset = ` + assets + `
 CROSS JOIN (VALUES (0), (1)) x (side)
 ORDER BY 1`, []any{postingBase, entryBase, accountBase}},
		{`SELECT setval(pg_get_serial_sequence('ledger_accounts', 'id'), (SELECT max(id) FROM ledger_accounts)),
       setval(pg_get_serial_sequence('ledger_entries', 'id'), (SELECT max(id) FROM ledger_entries)),
       setval(pg_get_serial_sequence('ledger_postings', 'id'), (SELECT max(id) FROM ledger_postings))`, nil},
		{`ALTER TABLE ledger_accounts ENABLE TRIGGER USER`, nil},
		{`ALTER TABLE ledger_entries ENABLE TRIGGER USER`, nil},
		{`ALTER TABLE ledger_postings ENABLE TRIGGER USER`, nil},
	} {
		_, err := tx.Exec(ctx, q.sql, q.args...)
		require.NoError(t, err, q.sql)
	}
	require.NoError(t, tx.Commit(ctx))
	written := time.Since(start)
	_, err = conn.Exec(ctx, "VACUUM (FREEZE, ANALYZE) ledger_accounts, ledger_entries, ledger_postings")
	require.NoError(t, err)
	vacuumed := time.Since(start)

	// What the disabled triggers would have refused.
	var broken, total int64
	_, err = conn.Exec(ctx, `SET work_mem = '256MB'`)
	require.NoError(t, err)
	require.NoError(t, conn.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE p.balance_after IS DISTINCT FROM p.running), count(*)
  FROM (SELECT q.balance_after, sum(q.amount) OVER (PARTITION BY q.account_id ORDER BY q.id) AS running
          FROM ledger_postings q JOIN ledger_accounts a ON a.id = q.account_id AND a.balance IS NOT NULL) p`).Scan(&broken, &total))
	require.Zero(t, broken, "postings whose balance_after does not continue their account's chain")
	require.Equal(t, book.entries(), total, "user postings")
	d, err := db.Open(ctx, u, 2)
	require.NoError(t, err)
	defer d.Close()
	r, err := ledger.Check(ctx, d.Bun)
	require.NoError(t, err)
	require.True(t, r.LedgerConsistent, "%+v", r)
	require.Equal(t, book.postings, r.Postings)
	t.Logf("generated %d postings over %d users: written in %s, vacuumed by %s, verified by %s", book.postings, book.users,
		written.Round(time.Second), vacuumed.Round(time.Second), time.Since(start).Round(time.Second))
}

// scaleResult is what measureScale measured on one book.
type scaleResult struct {
	sizeBytes                 int64
	balance, first, deep      dbtest.Load // latencies of reads, in ms
	credits, tpcb             float64     // entries/s, and pgbench TPC-B's tps right before
	check, recon              time.Duration
	incr                      time.Duration // the incremental check after the credits
	incrEntries               int64         // the entries it read
	incrAccounts              int64         // the accounts it checked
	reconIncr                 time.Duration // the report with its default, incremental check, over scaleReportCredits new credits
	hotPostings, deepCursorAt int64         // the hottest user's postings; how deep the deep cursors reach
}

// scaleReaders is how many clients read at once.
const scaleReaders = 8

// scaleWriters is how many clients credit at once, as the other ledger
// benchmarks' headline case.
const scaleWriters = 32

// measureScale measures the book in the database of u: its size, balance
// reads, the first page of a user's history and a page far back in a hot
// user's, deposit credits at 32 writers with pgbench right before, the
// ledger check and the reconciliation report's database work.
func measureScale(t testing.TB, u string, book scaleBook, dur time.Duration) scaleResult {
	t.Helper()
	ctx := context.Background()
	var res scaleResult
	pool, err := db.Open(ctx, u, scaleWriters+8)
	require.NoError(t, err)
	defer pool.Close()
	d := pool.Bun
	require.NoError(t, d.NewRaw(`SELECT pg_database_size(current_database())`).Scan(ctx, &res.sizeBytes))

	// Deep cursors: in each of the ten hottest users' history, the posting
	// 90% of the way back from the newest (a page must remain below it).
	type cursor struct {
		user string
		id   int64
	}
	var deep []cursor
	rows, err := d.QueryContext(ctx, `
SELECT a.owner, n.n, (SELECT id FROM ledger_postings WHERE account_id = a.id ORDER BY id DESC OFFSET least(n.n * 9 / 10, n.n - 2) LIMIT 1)
  FROM ledger_accounts a
 CROSS JOIN LATERAL (SELECT count(*) AS n FROM ledger_postings WHERE account_id = a.id) n
 WHERE a.owner IN (?) AND a.kind = 'user_available' AND n.n >= 2
 ORDER BY n.n DESC`, bun.List(hotUsers(min(10, book.users))))
	require.NoError(t, err)
	for rows.Next() {
		var c cursor
		var n int64
		require.NoError(t, rows.Scan(&c.user, &n, &c.id))
		if len(deep) == 0 {
			res.hotPostings, res.deepCursorAt = n, n*9/10
		}
		deep = append(deep, c)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	require.NotEmpty(t, deep)

	rngs := make([]*rand.Rand, scaleWriters)
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i)))
	}
	randomUser := func(c int) int64 { return rngs[c].Int64N(book.users) }
	res.balance = dbtest.RunClients(t, scaleReaders, dur, func(c int, _ int64) error {
		list, err := ledger.Balances(ctx, d, scaleUser(randomUser(c)))
		if err == nil && len(list) == 0 {
			err = fmt.Errorf("no balances")
		}
		return err
	})
	res.first = dbtest.RunClients(t, scaleReaders, dur, func(c int, _ int64) error {
		page, _, err := ledger.Transactions(ctx, d, ledger.TransactionsQuery{ExternalUserID: scaleUser(randomUser(c))})
		if err == nil && len(page) == 0 {
			err = fmt.Errorf("empty first page")
		}
		return err
	})
	res.deep = dbtest.RunClients(t, scaleReaders, dur, func(c int, _ int64) error {
		k := deep[rngs[c].IntN(len(deep))]
		page, _, err := ledger.Transactions(ctx, d, ledger.TransactionsQuery{ExternalUserID: k.user, Cursor: k.id})
		if err == nil && len(page) == 0 {
			err = fmt.Errorf("empty page at cursor %d of %s", k.id, k.user)
		}
		return err
	})

	// The check and the report's database work, each timed on its second
	// run: the first reads the files in.
	best := func(run func() time.Duration) time.Duration {
		run()
		return run()
	}
	res.check = best(func() time.Duration {
		r, err := ledger.Check(ctx, d)
		require.NoError(t, err)
		require.True(t, r.LedgerConsistent, "%+v", r)
		return r.Took
	})
	// Reconciliation without chain sources (their answers do not depend on
	// the ledger's size) and without the deposits' credit check: the book
	// has no deposits rows, so that check would flag every credit. With
	// the full ledger check, as measured before the report's check became
	// incremental (BenchmarkCheck times the incremental one).
	rs := &reconcile.Service{DB: d, Checks: []ledger.WithdrawalCheck{withdrawal.CheckHolds}, Now: time.Now}
	res.recon = best(func() time.Duration {
		t0 := time.Now()
		rep, err := rs.ComputeFull(ctx)
		require.NoError(t, err)
		require.True(t, rep.LedgerConsistent, "%+v", rep)
		return time.Since(t0)
	})

	// Credits: one deposit per transaction to a random user in the user's
	// asset, after a vacuum and a checkpoint, pgbench right before.
	dbtest.VacuumAnalyze(t, u)
	if admin, err := pgx.Connect(ctx, dbtest.AdminURLOf(t, u)); err == nil {
		_, _ = admin.Exec(ctx, "CHECKPOINT")
		admin.Close(ctx)
	}
	res.tpcb = dbtest.PgbenchTPS(t, scaleWriters, dur)
	run := time.Now().UnixNano()
	var n atomic.Int64
	load := dbtest.RunClients(t, scaleWriters, dur, func(c int, seq int64) error {
		k := randomUser(c)
		n.Add(1)
		return db.RunInTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.CreditDeposit(ctx, tx, scaleAsset(k), ledger.UserHolder(scaleUser(k)), 1+rngs[c].Int64N(100_000),
				fmt.Sprintf("scale-%d-%d", run, seq), "")

			return err
		})
	})
	res.credits = float64(n.Load()) / load.Elapsed.Seconds()

	// The incremental check after the credits (the full checks above
	// recorded the boundary): the credits' entries, and the accounts written since.
	t0 := time.Now()
	rep, err := ledger.CheckIncremental(ctx, d, withdrawal.CheckHolds)
	require.NoError(t, err)
	require.True(t, rep.LedgerConsistent, "%+v", rep)
	require.Equal(t, ledger.ScopeIncremental, rep.Coverage.Scope, "the full checks recorded a boundary")
	res.incr, res.incrEntries, res.incrAccounts = time.Since(t0), rep.Entries, rep.Accounts

	// The report as the hourly job computes it, with the incremental
	// check, over the same number of new credits at every size measured
	// (fewer in the short test).
	credits := scaleReportCredits
	if book.postings < 100_000 {
		credits = int(book.postings / 20)
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < credits; i += 8 {
				k := randomUser(w)
				err := db.RunInTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
					_, err := ledger.CreditDeposit(ctx, tx, scaleAsset(k), ledger.UserHolder(scaleUser(k)), 1+int64(i), fmt.Sprintf("scale-report-%d-%d", run, i), "")
					return err
				})
				if err != nil {
					t.Errorf("credit: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t0 = time.Now()
	rep2, err := rs.Compute(ctx)
	require.NoError(t, err)
	require.True(t, rep2.LedgerConsistent, "%+v", rep2)
	require.Equal(t, ledger.ScopeIncremental, rep2.LedgerCheck.Scope)
	res.reconIncr = time.Since(t0)
	return res
}

// scaleReportCredits is how many credits the incremental report reads.
const scaleReportCredits = 10_000

func hotUsers(n int64) []string {
	out := make([]string, n)
	for k := range n {
		out[k] = scaleUser(k)
	}
	return out
}

// scaleSizes is LEDGER_SCALE_POSTINGS (sizes separated by spaces or
// commas), by default 100,000 and 10,000,000.
func scaleSizes(b *testing.B) []int64 {
	s := os.Getenv("LEDGER_SCALE_POSTINGS")
	if s == "" {
		s = "100000 10000000"
	}
	var out []int64
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' }) {
		n, err := strconv.ParseInt(strings.ReplaceAll(f, "_", ""), 10, 64)
		require.NoError(b, err, "LEDGER_SCALE_POSTINGS")
		require.GreaterOrEqual(b, n, int64(20), "LEDGER_SCALE_POSTINGS")
		out = append(out, n)
	}
	return out
}

// BenchmarkLedgerScale measures the generated book at every size of
// LEDGER_SCALE_POSTINGS, each case for LEDGER_BENCH_DURATION
// (scripts/bench.sh prints them side by side).
func BenchmarkLedgerScale(b *testing.B) {
	dur := benchDuration(b)
	for _, n := range scaleSizes(b) {
		book := newScaleBook(n)
		b.Run(fmt.Sprintf("postings=%d", book.postings), func(b *testing.B) {
			kept := dbtest.Kept(b, fmt.Sprintf("ledger_scale_v%d_%d", scaleVersion, book.postings), func(u string) {
				generateScale(b, u, book)
			})
			t0 := time.Now()
			u := dbtest.Clone(b, kept)
			b.Logf("cloned the kept book in %s", time.Since(t0).Round(time.Millisecond))
			if os.Getenv("LEDGER_SCALE_PREWARM") != "" {
				prewarmLedger(b, u)
			}
			res := measureScale(b, u, book, dur)
			b.ReportMetric(float64(res.sizeBytes)/(1<<20), "db_MB")
			b.ReportMetric(res.balance.P50, "balance_p50_ms")
			b.ReportMetric(res.balance.P99, "balance_p99_ms")
			b.ReportMetric(res.first.P50, "first_page_p50_ms")
			b.ReportMetric(res.first.P99, "first_page_p99_ms")
			b.ReportMetric(res.deep.P50, "deep_page_p50_ms")
			b.ReportMetric(res.deep.P99, "deep_page_p99_ms")
			b.ReportMetric(res.check.Seconds(), "check_s")
			b.ReportMetric(res.recon.Seconds(), "reconcile_s")
			b.ReportMetric(res.incr.Seconds(), "incremental_check_s")
			b.ReportMetric(res.reconIncr.Seconds(), "reconcile_incremental_s")
			b.ReportMetric(res.credits, "credits/s")
			if res.tpcb > 0 {
				b.ReportMetric(res.tpcb, "tpcb_tps")
				b.ReportMetric(100*res.credits/res.tpcb, "pct_of_tpcb")
			}
			b.Logf("postings=%d users=%d: database %d MB; hottest user %d postings (deep cursor %d back); "+
				"balance p50/p99 %.2f/%.2f ms (%.0f/s), first page %.2f/%.2f ms (%.0f/s), deep page %.2f/%.2f ms (%.0f/s) at %d readers; "+
				"check %s, reconciliation %s; credits %.0f/s at %d writers, TPC-B %.0f tps; then the incremental check %s (%d entries, %d accounts); "+
				"the report with it over %d new credits %s",
				book.postings, book.users, res.sizeBytes>>20, res.hotPostings, res.deepCursorAt,
				res.balance.P50, res.balance.P99, res.balance.Rate, res.first.P50, res.first.P99, res.first.Rate,
				res.deep.P50, res.deep.P99, res.deep.Rate, scaleReaders,
				res.check.Round(time.Millisecond), res.recon.Round(time.Millisecond), res.credits, scaleWriters, res.tpcb,
				res.incr.Round(time.Millisecond), res.incrEntries, res.incrAccounts, scaleReportCredits, res.reconIncr.Round(time.Millisecond))
		})
	}
}

// prewarmLedger reads the ledger's tables and indexes into the server's
// buffers (pg_prewarm), so that a run measures the book with its working
// set cached, as on a server whose shared_buffers hold it
// (LEDGER_SCALE_PREWARM=1; docs/performance.md).
func prewarmLedger(b *testing.B, u string) {
	b.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbtest.AdminURLOf(b, u))
	require.NoError(b, err)
	defer conn.Close(ctx)
	t0 := time.Now()
	_, err = conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_prewarm`)
	require.NoError(b, err, "pg_prewarm (in PostgreSQL's contrib)")
	var blocks, buffers int64
	require.NoError(b, conn.QueryRow(ctx, `
SELECT coalesce(sum(pg_prewarm(c.oid)), 0)::bigint
  FROM pg_class c
 WHERE c.relkind IN ('r', 'i') AND c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'ledger\_%'`).Scan(&blocks))
	require.NoError(b, conn.QueryRow(ctx, `SELECT setting::bigint FROM pg_settings WHERE name = 'shared_buffers'`).Scan(&buffers))
	b.Logf("prewarmed %d MB of ledger tables and indexes in %s (shared_buffers %d MB)",
		blocks*8/1024, time.Since(t0).Round(time.Millisecond), buffers*8/1024)
}

// TestLedgerScaleShort runs the scale benchmark's generator and every
// measurement on a tiny book, with no timing asserted, so that make test
// keeps them working: the generated book must pass the ledger check and
// the balance chain, and the service must go on posting to it with its
// triggers back on.
func TestLedgerScaleShort(t *testing.T) {
	t.Parallel()
	book := newScaleBook(2_000)
	u := dbtest.NewURL(t)
	generateScale(t, u, book)
	res := measureScale(t, u, book, 200*time.Millisecond)
	require.Positive(t, res.sizeBytes)
	require.Positive(t, res.credits)
	require.Greater(t, res.hotPostings, int64(10), "the skew gives user 0 many deposits")

	d := newDBAt(t, u)
	// The service goes on where the generator stopped: a credit, a hold
	// and its release on the hottest user, every check still on.
	credit(t, d, "BTC", scaleUser(0), 500, "after-generation")
	_, err := hold(t, d, "BTC", scaleUser(0), 700, "after-generation-hold")
	require.NoError(t, err)
	requireInvariants(t, d)
	// And the triggers are back: a balance moved by hand is refused.
	_, err = d.ExecContext(context.Background(), `UPDATE ledger_accounts SET balance = balance + 1 WHERE owner = ?`, scaleUser(1))
	require.ErrorContains(t, err, "balances move only with their postings")
}

func newDBAt(t testing.TB, u string) *bun.DB {
	t.Helper()
	d, err := db.Open(context.Background(), u, 4)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d.Bun
}

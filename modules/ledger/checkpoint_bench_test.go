package ledger_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// BenchmarkCheckpoint times one checkpoint over a ledger of
// CHECKPOINT_BENCH_ENTRIES deposit entries (default 100,000; the issue's
// scale is 1,000,000), written beforehand set-based with the triggers off
// (bulkLedger): reading the range, encoding and hashing every entry with
// its postings, the Merkle root, and storing the checkpoint and its
// leaves, at normal priority (at the lowest, a shared machine's other work
// would be timed). Then it times verify over the same checkpoint, three
// times.
func BenchmarkCheckpoint(b *testing.B) {
	n := 100_000
	if s := os.Getenv("CHECKPOINT_BENCH_ENTRIES"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(b, err, "CHECKPOINT_BENCH_ENTRIES")
	}
	u := dbtest.NewURL(b)
	o, err := db.Open(context.Background(), u, 4)
	require.NoError(b, err)
	b.Cleanup(o.Close)
	d := o.Bun
	ctx := context.Background()
	built := time.Now()
	bulkLedger(b, u, "BTC", "ck-", 100_000, n)
	b.Logf("built %d entries in %s", n, time.Since(built).Round(time.Second))
	dbtest.VacuumAnalyze(b, u)
	c := &ledger.Checkpointer{DB: d, Now: time.Now}
	b.ResetTimer()
	var sealed int64
	start := time.Now()
	for time.Since(start) < time.Minute {
		cp, err := c.Checkpoint(ctx)
		require.NoError(b, err)
		if cp != nil {
			sealed += cp.EntryCount
		}
		if sealed >= int64(n) {
			break
		}
	}
	took := time.Since(start)
	b.StopTimer()
	require.GreaterOrEqual(b, sealed, int64(n))
	b.ReportMetric(took.Seconds(), "checkpoint_s")
	b.ReportMetric(float64(sealed)/took.Seconds(), "entries/s")
	// Verify reads the same range again, and the leaves: three times, for
	// the spread on a shared machine.
	var verify []time.Duration
	for range 3 {
		vs := time.Now()
		r, err := ledger.VerifyCheckpoints(ctx, d, 1, nil)
		require.NoError(b, err)
		require.True(b, r.OK)
		verify = append(verify, time.Since(vs))
	}
	b.Logf("checkpoint of %d entries %s; verify %v", n, took.Round(time.Millisecond), verify)
	b.ReportMetric(slices.Min(verify).Seconds(), "verify_fastest_s")
	b.ReportMetric(slices.Max(verify).Seconds(), "verify_slowest_s")
}

// BenchmarkEntryIndexCost measures what the checkpoints cost the write
// path: the index on ledger_entries (created_xact, id) of migration 0017
// (the column itself exists since 0002). It runs the deposit_spread case
// with 8 writers, alternately with the index and without it, three times
// each, LEDGER_BENCH_DURATION (default 10s) per run, and reports both
// rates and their ratio.
func BenchmarkEntryIndexCost(b *testing.B) {
	d := newDBAs(b, 20, dbtest.OwnerURL) // the owner may drop the index
	ctx := context.Background()
	bulkDeposits(b, d, "BTC", "bench-", benchUsers, benchUsers, 1_000_000_000)
	sc := benchScenarios[0]
	rates := map[bool][]float64{}
	for round := range 6 {
		with := round%2 == 0
		if with {
			_, err := d.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS ledger_entries_xact ON ledger_entries (created_xact, id)`)
			require.NoError(b, err)
		} else {
			_, err := d.ExecContext(ctx, `DROP INDEX ledger_entries_xact`)
			require.NoError(b, err)
		}
		_, err := d.ExecContext(ctx, "VACUUM ANALYZE ledger_entries, ledger_postings, ledger_accounts")
		require.NoError(b, err)
		dur := benchDuration(b)
		rngs := []*rand.Rand{}
		for w := range 8 {
			rngs = append(rngs, rand.New(rand.NewPCG(uint64(round), uint64(w))))
		}
		var entries int64
		load := dbtest.RunClients(b, 8, dur, func(w int, _ int64) error {
			n, err := sc.op(ctx, d, rngs[w], fmt.Sprintf("idx-%d-%d-%d", round, w, time.Now().UnixNano()))
			if err == nil {
				entriesAdd(&entries, int64(n))
			}
			return err
		})
		rates[with] = append(rates[with], float64(entriesLoad(&entries))/load.Elapsed.Seconds())
	}
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	b.ReportMetric(mean(rates[true]), "with_index_entries/s")
	b.ReportMetric(mean(rates[false]), "without_index_entries/s")
	b.ReportMetric(100*mean(rates[true])/mean(rates[false]), "pct")
	b.Logf("with index %v, without %v (entries/s)", rates[true], rates[false])
}

func entriesAdd(p *int64, n int64) { atomic.AddInt64(p, n) }
func entriesLoad(p *int64) int64   { return atomic.LoadInt64(p) }

// bulkLedger writes n deposit entries of asset (two postings each: the
// user's, with its running balance, and the custody account's), spread
// round-robin over users accounts prefix0..prefix(users-1), and sets the
// users' balances to match. It writes set-based as a superuser with the
// triggers off (dbtest.ExecBehindTriggers), so that a million entries take
// about a minute rather than an hour; the rows are those the ledger itself
// would write, which svc admin ledger check confirms on small sizes
// (TestBulkLedgerIsConsistent).
func bulkLedger(tb testing.TB, u, asset, prefix string, users, n int) {
	tb.Helper()
	const amount = 1_000
	dbtest.ExecBehindTriggers(tb, u, `INSERT INTO ledger_accounts (asset, kind, owner, balance)
SELECT $1, 'user_available', $2 || g, 0 FROM generate_series(0, $3::int - 1) g ON CONFLICT DO NOTHING`, asset, prefix, users)
	tag := fmt.Sprintf("bulk-%s-%d:", asset, time.Now().UnixNano())
	dbtest.ExecBehindTriggers(tb, u, `INSERT INTO ledger_entries (kind, asset, source_ref)
SELECT 'deposit_credit', $1, $2 || g FROM generate_series(0, $3::int - 1) g`, asset, tag, n)
	dbtest.ExecBehindTriggers(tb, u, `ANALYZE ledger_entries, ledger_accounts`)
	// Entry k (in id order) credits user k % users; that user's running
	// balance after it is its balance before plus amount * (k / users + 1).
	dbtest.ExecBehindTriggers(tb, u, `INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after)
SELECT e.id, CASE WHEN s.side = 0 THEN a.id ELSE c.id END, CASE WHEN s.side = 0 THEN $1::bigint ELSE -$1::bigint END,
       CASE WHEN s.side = 0 THEN a.balance + $1::bigint * (e.k / $2::int + 1) END
  FROM (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM ledger_entries WHERE starts_with(source_ref, $3)) e
  JOIN ledger_accounts a ON a.asset = $4 AND a.kind = 'user_available' AND a.owner = $5 || (e.k % $2::int)
  JOIN ledger_accounts c ON c.asset = $4 AND c.kind = 'custody' AND c.owner = ''
 CROSS JOIN (VALUES (0), (1)) s (side)
 ORDER BY e.id, s.side`, amount, users, tag, asset, prefix)
	dbtest.ExecBehindTriggers(tb, u, `UPDATE ledger_accounts a SET balance = a.balance + x.total
  FROM (SELECT p.account_id, sum(p.amount) AS total FROM ledger_postings p JOIN ledger_entries e ON e.id = p.entry_id
         WHERE starts_with(e.source_ref, $1) GROUP BY p.account_id) x
 WHERE a.id = x.account_id AND a.balance IS NOT NULL`, tag)
}

// BenchmarkCheckpointWrites measures what checkpoints cost the ledger's
// writers: the deposit_spread case of BenchmarkLedger with 8 writers for
// CHECKPOINT_BENCH_WRITES (default 30s) per run, alternately (dbtest.Alternate,
// CHECKPOINT_BENCH_ROUNDS rounds, default 2):
//
//	alone        no checkpoint
//	cadence      one checkpoint in the middle of the run, as the service
//	             takes them (at background.Nice); it seals what was written
//	             since the previous one: the whole run before (alone) and
//	             half of this one, one and a half runs of writes
//	back_to_back checkpoints one after the other for the whole run, at
//	             background.Nice
//	back_to_back_normal the same at normal priority
//
// The cost of a checkpoint is proportional to the entries it seals, so
// what the cadence run shows holds for any interval: a 10-minute interval
// seals 20 times the entries of a 30-second one, 20 times less often.
func BenchmarkCheckpointWrites(b *testing.B) {
	dur := 30 * time.Second
	if s := os.Getenv("CHECKPOINT_BENCH_WRITES"); s != "" {
		var err error
		dur, err = time.ParseDuration(s)
		require.NoError(b, err, "CHECKPOINT_BENCH_WRITES")
	}
	rounds := 2
	if s := os.Getenv("CHECKPOINT_BENCH_ROUNDS"); s != "" {
		var err error
		rounds, err = strconv.Atoi(s)
		require.NoError(b, err, "CHECKPOINT_BENCH_ROUNDS")
	}
	d := newDBAs(b, 20, func(u string) string { return u })
	ctx := context.Background()
	bulkDeposits(b, d, "BTC", "bench-", benchUsers, benchUsers, 1_000_000_000)
	sc := benchScenarios[0]
	var sealed, runs atomic.Int64
	checkpoint := func(nice int) func() {
		c := &ledger.Checkpointer{DB: d, Now: time.Now, Nice: nice}
		return func() {
			cp, err := c.Checkpoint(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			runs.Add(1)
			if cp != nil {
				sealed.Add(cp.EntryCount)
			}
		}
	}
	background := checkpoint(19)
	normal := checkpoint(0)
	background() // the setup's entries
	modes := []dbtest.Mode{
		{Name: "alone"},
		{Name: "cadence", Job: func(stop <-chan struct{}) { dbtest.Every(stop, dur/2, time.Hour, background) }},
		{Name: "back_to_back", Job: func(stop <-chan struct{}) { dbtest.Loop(stop, background) }},
		{Name: "back_to_back_normal", Job: func(stop <-chan struct{}) { dbtest.Loop(stop, normal) }},
	}
	round := 0
	rates := dbtest.Alternate(b, rounds, modes, func() float64 {
		round++
		_, err := d.ExecContext(ctx, "VACUUM ANALYZE ledger_entries, ledger_postings, ledger_accounts")
		require.NoError(b, err)
		sealed.Store(0)
		runs.Store(0)
		rngs := make([]*rand.Rand, 8)
		for w := range rngs {
			rngs[w] = rand.New(rand.NewPCG(uint64(round), uint64(w)))
		}
		var entries int64
		load := dbtest.RunClients(b, 8, dur, func(w int, seq int64) error {
			n, err := sc.op(ctx, d, rngs[w], fmt.Sprintf("cw-%d-%d-%d", round, seq, time.Now().UnixNano()))
			if err == nil {
				entriesAdd(&entries, int64(n))
			}
			return err
		})
		fmt.Printf("run %d: %d checkpoints sealed %d entries\n", round, runs.Load(), sealed.Load())
		return float64(entriesLoad(&entries)) / load.Elapsed.Seconds()
	})
	fmt.Printf("entries/s with 8 writers, %s per run:\n%s", dur,
		dbtest.Ratios(b, rates, "alone", []string{"alone", "cadence", "back_to_back", "back_to_back_normal"}))
}

// TestBulkLedgerIsConsistent: the benchmark's set-based ledger is one the
// ledger itself could have written: svc admin ledger check finds nothing,
// and it seals and verifies.
func TestBulkLedgerIsConsistent(t *testing.T) {
	t.Parallel()
	u := dbtest.NewURL(t)
	bulkLedger(t, u, "BTC", "bulk-", 7, 100)
	bulkLedger(t, u, "BTC", "bulk-", 7, 50) // on top of balances already there
	o, err := db.Open(context.Background(), u, 2)
	require.NoError(t, err)
	defer o.Close()
	r, err := ledger.Check(context.Background(), o.Bun)
	require.NoError(t, err)
	require.True(t, r.LedgerConsistent, "%+v", r)
	require.Equal(t, int64(150), count(t, o.Bun, `SELECT count(*) FROM ledger_entries`))
	sealAll(t, checkpointer(o.Bun, nil))
	requireChain(t, o.Bun, nil)
}

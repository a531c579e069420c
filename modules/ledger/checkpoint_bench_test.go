package ledger_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/ledger"
	"svc/platform/background"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// BenchmarkCheckpoint times one checkpoint over a ledger of
// CHECKPOINT_BENCH_ENTRIES deposit entries (default 100,000; the issue's
// scale is 1,000,000), written beforehand set-based with the triggers off
// (bulkLedger): reading the range, encoding and hashing every entry with
// its postings, the Merkle root, and storing the checkpoint and its
// leaves, at normal priority (at the lowest, a shared machine's other work
// would be timed), and the CPU it takes: this process's and its server
// process's. Then it times verify over the same checkpoint, three times.
func BenchmarkCheckpoint(b *testing.B) {
	n := dbtest.IntEnv(b, "CHECKPOINT_BENCH_ENTRIES", 100_000)
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
	// The checkpoint's own connection, whose server process is measured.
	job, err := db.Open(ctx, u, 1)
	require.NoError(b, err)
	b.Cleanup(job.Close)
	pid := dbtest.BackendPID(b, job.Pool)
	c := &ledger.Checkpointer{DB: job.Bun, Now: time.Now}
	runtime.GC() // the build's garbage, collected before the checkpoint is measured
	b.ResetTimer()
	var sealed int64
	start := time.Now()
	cost := dbtest.MeasureJob(pid, func() float64 {
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
		return float64(sealed)
	})
	took := time.Since(start)
	b.StopTimer()
	require.GreaterOrEqual(b, sealed, int64(n))
	b.ReportMetric(took.Seconds(), "checkpoint_s")
	b.ReportMetric(float64(sealed)/took.Seconds(), "entries/s")
	// CPU, whatever else the machine runs: the process's (nothing else of
	// it runs meanwhile) and the checkpoint's server process's.
	fmt.Printf("a checkpoint of %d entries took %s of this process's CPU and %s of its server process's (readable: %v)\n",
		sealed, cost.Process.Round(time.Millisecond), cost.Server.Round(time.Millisecond), cost.ServerOK)
	b.ReportMetric(cost.Process.Seconds()*1e6/float64(sealed), "process_cpu_s/1M_entries")
	if cost.ServerOK {
		b.ReportMetric(cost.Server.Seconds()*1e6/float64(sealed), "server_cpu_s/1M_entries")
	}
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
	// The user's posting carries its entry's display fields (migration 0025).
	dbtest.ExecBehindTriggers(tb, u, `INSERT INTO ledger_postings (entry_id, account_id, amount, balance_after, entry_kind, entry_ref, entry_memo, entry_at)
SELECT e.id, CASE WHEN s.side = 0 THEN a.id ELSE c.id END, CASE WHEN s.side = 0 THEN $1::bigint ELSE -$1::bigint END,
       CASE WHEN s.side = 0 THEN a.balance + $1::bigint * (e.k / $2::int + 1) END,
       CASE WHEN s.side = 0 THEN e.kind END, CASE WHEN s.side = 0 THEN e.source_ref END,
       CASE WHEN s.side = 0 THEN e.memo END, CASE WHEN s.side = 0 THEN e.created_at END
  FROM (SELECT id, kind, source_ref, memo, created_at, row_number() OVER (ORDER BY id) - 1 AS k
          FROM ledger_entries WHERE starts_with(source_ref, $3)) e
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
// CHECKPOINT_BENCH_ROUNDS rounds, default 2) in the conditions named by
// CHECKPOINT_BENCH_CONDITIONS (default all four, in this order):
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
//
// Since the machine's speed varies between runs, it also accounts the
// CPU, which does not depend on what else the machine runs: the
// checkpoints take theirs on a connection of their own (one server
// process) and on their thread (background.CPU); every run reports the
// writers' CPU per entry (this process's and their server processes').
// Then CHECKPOINT_BENCH_QUIET times (default 3) the writers run for half a
// run and stop, and a checkpoint seals what they wrote with nothing else
// of the process running, so that the whole process's CPU is its own (the
// garbage collector's share of it included). The summary gives the
// checkpoint's CPU per million entries and what that is, at the service's
// interval, of the machine's CPUs (docs/performance.md).
func BenchmarkCheckpointWrites(b *testing.B) {
	dur := dbtest.DurationEnv(b, "CHECKPOINT_BENCH_WRITES", 30*time.Second)
	rounds := dbtest.IntEnv(b, "CHECKPOINT_BENCH_ROUNDS", 2)
	quiet := dbtest.IntEnv(b, "CHECKPOINT_BENCH_QUIET", 3)
	ctx := context.Background()
	u := dbtest.NewURL(b)
	writers, err := db.Open(ctx, u, 20)
	require.NoError(b, err)
	b.Cleanup(writers.Close)
	d := writers.Bun
	// The checkpoints' own connection, whose server process is measured.
	job, pid := dbtest.JobConn(b, u)
	meter := dbtest.NewLoadMeter(b, writers, pid)
	bulkDeposits(b, d, "BTC", "bench-", benchUsers, benchUsers, 1_000_000_000)
	sc := benchScenarios[0]
	var (
		sealed, runs atomic.Int64
		mu           sync.Mutex
		loaded       []dbtest.JobCost // the cadence's checkpoints, under the writers' load
	)
	checkpoint := func(nice int, measured bool) func() {
		c := &ledger.Checkpointer{DB: job.Bun, Now: time.Now, Nice: nice}
		return func() {
			cost := dbtest.MeasureJob(pid, func() float64 {
				cp, err := c.Checkpoint(ctx)
				if err != nil {
					b.Error(err)
					return 0
				}
				runs.Add(1)
				if cp == nil {
					return 0
				}
				sealed.Add(cp.EntryCount)
				return float64(cp.EntryCount)
			})
			if measured {
				fmt.Printf("a checkpoint of %.0f entries in %s under the writers' load: thread %s, server process %s\n",
					cost.Units, cost.Took.Round(time.Millisecond), cost.Thread.Round(time.Millisecond), cost.Server.Round(time.Millisecond))
				mu.Lock()
				loaded = append(loaded, cost)
				mu.Unlock()
			}
		}
	}
	cadence := checkpoint(background.Nice, true)
	lowest := checkpoint(background.Nice, false)
	normal := checkpoint(0, false)
	lowest() // the setup's entries
	modes := dbtest.Conditions(b, "CHECKPOINT_BENCH_CONDITIONS", []dbtest.Mode{
		{Name: "alone"},
		{Name: "cadence", Job: func(stop <-chan struct{}) { dbtest.Every(stop, dur/2, time.Hour, cadence) }},
		{Name: "back_to_back", Job: func(stop <-chan struct{}) { dbtest.Loop(stop, lowest) }},
		{Name: "back_to_back_normal", Job: func(stop <-chan struct{}) { dbtest.Loop(stop, normal) }},
	})
	round := 0
	// write runs the writers for dur and returns their entries/s, what
	// they cost, and the slowest write in ms.
	write := func(dur time.Duration) (float64, dbtest.LoadCost, float64) {
		round++
		_, err := d.ExecContext(ctx, "VACUUM ANALYZE ledger_entries, ledger_postings, ledger_accounts")
		require.NoError(b, err)
		rngs := make([]*rand.Rand, 8)
		for w := range rngs {
			rngs[w] = rand.New(rand.NewPCG(uint64(round), uint64(w)))
		}
		var entries int64
		end := meter.Start()
		load := dbtest.RunClients(b, 8, dur, func(w int, seq int64) error {
			n, err := sc.op(ctx, d, rngs[w], fmt.Sprintf("cw-%d-%d-%d", round, seq, time.Now().UnixNano()))
			if err == nil {
				entriesAdd(&entries, int64(n))
			}
			return err
		})
		cost := end(float64(entriesLoad(&entries)))
		return float64(entriesLoad(&entries)) / load.Elapsed.Seconds(), cost, load.Max
	}
	// By run, in Alternate's order: round by round, the modes in order.
	var costs []dbtest.LoadCost
	var slowest []float64
	rates := dbtest.Alternate(b, rounds, modes, func() float64 {
		sealed.Store(0)
		runs.Store(0)
		rate, cost, slow := write(dur)
		costs, slowest = append(costs, cost), append(slowest, slow)
		fmt.Printf("run %d: %d checkpoints sealed %d entries; slowest write %.0f ms; writers' %s\n", round, runs.Load(), sealed.Load(), slow, cost)
		return rate
	})
	names := []string{"alone", "cadence", "back_to_back", "back_to_back_normal"}
	fmt.Printf("entries/s with 8 writers, %s per run:\n%s", dur, dbtest.Ratios(b, rates, "alone", names))

	// The checkpoint with the writers stopped, the process to itself.
	var alone []dbtest.LoadCost
	for i, c := range costs {
		if modes[i%len(modes)].Name == "alone" {
			alone = append(alone, c)
		}
	}
	var still []dbtest.JobCost
	for range quiet {
		_, cost, _ := write(dur / 2)
		alone = append(alone, cost)
		runtime.GC() // the writers' garbage, collected before the checkpoint is measured
		c := &ledger.Checkpointer{DB: job.Bun, Now: time.Now, Nice: background.Nice}
		jc := dbtest.MeasureJob(pid, func() float64 {
			cp, err := c.Checkpoint(ctx)
			require.NoError(b, err)
			if cp == nil {
				return 0
			}
			return float64(cp.EntryCount)
		})
		if jc.Units == 0 {
			// A checkpoint seals up to the oldest transaction still open
			// on the server, in any database: another client's can hold
			// it back.
			fmt.Printf("a checkpoint with the writers stopped found nothing to seal yet\n")
			continue
		}
		fmt.Printf("a checkpoint of %.0f entries in %s with the writers stopped: thread %s, process %s, server process %s\n",
			jc.Units, jc.Took.Round(time.Millisecond), jc.Thread.Round(time.Millisecond), jc.Process.Round(time.Millisecond), jc.Server.Round(time.Millisecond))
		still = append(still, jc)
	}
	require.Equal(b, pid, dbtest.BackendPID(b, job.Pool), "the checkpoints' connection was replaced: its server process's CPU is not all counted")

	// The slowest write of a run, by condition: a write that waited for a
	// checkpoint would have waited for the whole of it.
	for _, m := range modes {
		var v []float64
		for i, s := range slowest {
			if modes[i%len(modes)].Name == m.Name {
				v = append(v, s)
			}
		}
		if len(v) == 0 {
			continue
		}
		fmt.Printf("slowest write, %s: %.0f ms (by run %.0f)\n", m.Name, slices.Max(v), v)
	}
	fmt.Printf("a checkpoint's CPU, writers stopped:\n%s", dbtest.JobSummary(still, 1e6, "entries", true))
	fmt.Printf("a checkpoint's CPU at cadence, under the writers' load:\n%s", dbtest.JobSummary(loaded, 1e6, "entries", false))
	var perEntry []float64
	for _, c := range alone {
		perEntry = append(perEntry, c.PerOp())
	}
	writerCPU, lo, hi := dbtest.Spread(perEntry)
	jobCPU := dbtest.JobPerUnit(still, true)
	if len(still) == 0 {
		jobCPU = dbtest.JobPerUnit(loaded, false)
	}
	fmt.Printf("the writers' CPU (client + their backends) per entry, alone: %.0f µs (median of %d; %.0f to %.0f)\n",
		1e6*writerCPU, len(perEntry), 1e6*lo, 1e6*hi)
	if writerCPU > 0 && jobCPU > 0 {
		rate := 0.0
		if v := rates["alone"]; len(v) > 0 {
			rate, _, _ = dbtest.Spread(v)
		}
		interval := ledger.CheckpointEvery
		perInterval := jobCPU * rate * interval.Seconds()
		fmt.Printf("a checkpoint costs %.2f%% of the CPU of the writes it seals; every %s at %.0f entries/s (the median alone): %.2f CPU-s, %.3f%% of %d CPUs\n",
			100*jobCPU/writerCPU, interval, rate, perInterval, 100*perInterval/(interval.Seconds()*float64(runtime.NumCPU())), runtime.NumCPU())
		b.ReportMetric(1e6*jobCPU, "checkpoint_cpu_s/1M_entries")
		b.ReportMetric(1e6*writerCPU, "writer_cpu_us/entry")
		b.ReportMetric(100*jobCPU/writerCPU, "checkpoint_cpu_pct_of_writes")
	}
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

package liabilities_test

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
	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/modules/liabilities"
	"svc/platform/background"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// BenchmarkSnapshot times a proof-of-liabilities snapshot over
// LIABILITIES_BENCH_USERS users of one asset (default 1,000,000), and
// fails when they take more than 10 seconds on average. Then it measures what a
// snapshot does to writes: 8 writers post deposits (one entry per
// transaction) for LIABILITIES_BENCH_WRITES (default 10s) per run,
// alternately (dbtest.Alternate, LIABILITIES_BENCH_ROUNDS rounds, default
// 2), in the conditions named by LIABILITIES_BENCH_CONDITIONS (default all
// four, in this order): alone; one_snapshot, a quarter into the run, as
// the service takes them (background.Nice, one hashing goroutine);
// back_to_back, the same way; and back_to_back_normal, at normal priority
// on every CPU.
//
// Since the machine's speed varies between runs, the writes part also
// accounts the CPU, which does not depend on what else the machine runs:
// the snapshots take theirs on a connection of their own (one server
// process) and on their thread (background.CPU); every run reports the
// writers' CPU per write (this process's and their server processes').
// Then LIABILITIES_BENCH_QUIET snapshots (default 3) run with the writers
// stopped, so that the whole process's CPU is theirs (the garbage
// collector's share of it included). The summary gives a snapshot's CPU
// per million users and what that is, once an hour, of the machine's CPUs.
//
// The users' accounts are inserted with their balances as a superuser with
// the triggers off, without postings: a snapshot reads only the accounts'
// materialized balances, so postings would cost minutes to build and
// change nothing it reads. They are built once per size and kept between
// runs (dbtest.Kept). The writers credit other users, whose accounts the
// ledger opens as usual. docs/performance.md has the results.
func BenchmarkSnapshot(b *testing.B) {
	users := dbtest.IntEnv(b, "LIABILITIES_BENCH_USERS", 1_000_000)
	writeFor := dbtest.DurationEnv(b, "LIABILITIES_BENCH_WRITES", 10*time.Second)
	ctx := context.Background()
	// The users are built once per size and migration set, kept
	// (dbtest.Kept; make bench-scale-drop drops them), and copied file by
	// file for each run, which the writers then write into.
	kept := dbtest.Kept(b, fmt.Sprintf("liabilities_users_v1_%d", users), func(u string) {
		start := time.Now()
		dbtest.ExecBehindTriggers(b, u, `INSERT INTO ledger_accounts (asset, kind, owner, balance)
SELECT 'BTC', k, 'bench-user-' || g, CASE WHEN k = 'user_available' THEN 1 + (g::bigint * 7919) % 100000000 WHEN g % 10 = 0 THEN 5000 ELSE 0 END
  FROM generate_series(0, $1::int - 1) g, unnest(ARRAY['user_available', 'user_hold']) k`, users)
		dbtest.VacuumAnalyze(b, u)
		fmt.Printf("seeded %d users (%d accounts) in %s\n", users, 2*users, time.Since(start).Round(time.Second))
	})
	start := time.Now()
	u := dbtest.Clone(b, kept)
	fmt.Printf("copied the kept database in %s\n", time.Since(start).Round(100*time.Millisecond))
	d, err := db.Open(ctx, u, 20)
	require.NoError(b, err)
	b.Cleanup(d.Close)

	// Workers 0 hashes on every CPU; 1 as the service does (cmd/svc/app).
	// Both at normal priority: at the lowest, the time measured would be
	// the other work's on a shared machine.
	for _, workers := range []int{0, 1} {
		svc := &liabilities.Service{Pool: d.Pool, Workers: workers}
		b.Run(fmt.Sprintf("users=%d/workers=%d", users, workers), func(b *testing.B) {
			var worst, total, read, build, store time.Duration
			for range b.N {
				t0 := time.Now()
				r, bu, st, out, err := svc.Phases(ctx)
				took := time.Since(t0)
				require.NoError(b, err)
				b.Logf("snapshot of %d users: %s (read %s, build %s, store %s)", users, took.Round(time.Millisecond),
					r.Round(time.Millisecond), bu.Round(time.Millisecond), st.Round(time.Millisecond))
				for _, p := range out {
					if p.Asset == "BTC" {
						require.EqualValues(b, users, p.Users)
					}
				}
				total, worst = total+took, max(worst, took)
				read, build, store = read+r, build+bu, store+st
			}
			n := float64(b.N)
			b.ReportMetric(total.Seconds()/n, "s/snapshot")
			b.ReportMetric(worst.Seconds(), "worst_s")
			b.ReportMetric(read.Seconds()/n, "read_s")
			b.ReportMetric(build.Seconds()/n, "build_s")
			b.ReportMetric(store.Seconds()/n, "store_s")
			if mean := total / time.Duration(b.N); mean > 10*time.Second {
				b.Fatalf("a snapshot of %d users took %s on average (the slowest %s), more than 10 s", users, mean, worst)
			}
		})
	}

	b.Run("writes", func(b *testing.B) {
		const writers = 8
		rounds := dbtest.IntEnv(b, "LIABILITIES_BENCH_ROUNDS", 2)
		quiet := dbtest.IntEnv(b, "LIABILITIES_BENCH_QUIET", 3)
		// The snapshots' own connection, whose server process is measured.
		job, pid := dbtest.JobConn(b, u)
		meter := dbtest.NewLoadMeter(b, d, pid)
		var slowest atomic.Int64 // of the current run, in ns
		write := func() (float64, dbtest.LoadCost) {
			var (
				n     atomic.Int64
				wg    sync.WaitGroup
				tag   = time.Now().UnixNano()
				until = time.Now().Add(writeFor)
			)
			slowest.Store(0)
			end := meter.Start()
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(tag), uint64(w)))
					for i := 0; time.Now().Before(until); i++ {
						t0 := time.Now()
						err := db.RunInTx(ctx, d.Bun, func(ctx context.Context, tx bun.Tx) error {
							_, err := ledger.CreditDeposit(ctx, tx, "BTC", ledger.UserHolder(fmt.Sprintf("writer-%d", rng.IntN(10_000))), 1+rng.Int64N(100_000),
								fmt.Sprintf("bench-%d-%d-%d", tag, w, i), "")

							return err
						})
						if err != nil {
							b.Error(err)
							return
						}
						took := int64(time.Since(t0))
						for {
							old := slowest.Load()
							if took <= old || slowest.CompareAndSwap(old, took) {
								break
							}
						}
						n.Add(1)
					}
				}()
			}
			wg.Wait()
			cost := end(float64(n.Load()))
			fmt.Printf("slowest write %s; writers' %s\n", time.Duration(slowest.Load()).Round(time.Millisecond), cost)
			return float64(n.Load()) / writeFor.Seconds(), cost
		}
		var (
			snaps  atomic.Int64
			mu     sync.Mutex
			loaded []dbtest.JobCost // the one_snapshot runs' snapshots, under the writers' load
		)
		run := func(s *liabilities.Service) float64 {
			t0 := time.Now()
			out, err := s.Snapshot(ctx, liabilities.TriggerOnDemand, "")
			if err != nil {
				b.Error(err)
				return 0
			}
			snaps.Add(1)
			fmt.Printf("snapshot (nice %d, workers %d) in %s\n", s.Nice, s.Workers, time.Since(t0).Round(time.Millisecond))
			n := 0.0
			for _, p := range out {
				n += float64(p.Users)
			}
			return n
		}
		snapshot := func(s *liabilities.Service, measured bool) func() {
			return func() {
				cost := dbtest.MeasureJob(pid, func() float64 { return run(s) })
				if measured {
					fmt.Printf("a snapshot of %.0f users under the writers' load: thread %s, server process %s\n",
						cost.Units, cost.Thread.Round(time.Millisecond), cost.Server.Round(time.Millisecond))
					mu.Lock()
					loaded = append(loaded, cost)
					mu.Unlock()
				}
			}
		}
		// As the service takes them (cmd/svc/app): the lowest priority, one
		// hashing goroutine; and as before, at normal priority on every CPU.
		asService := &liabilities.Service{Pool: job.Pool, Nice: background.Nice, Workers: 1}
		one := snapshot(asService, true)
		bg := snapshot(asService, false)
		normal := snapshot(&liabilities.Service{Pool: job.Pool}, false)
		modes := dbtest.Conditions(b, "LIABILITIES_BENCH_CONDITIONS", []dbtest.Mode{
			{Name: "alone"},
			{Name: "one_snapshot", Job: func(stop <-chan struct{}) { dbtest.Every(stop, writeFor/4, time.Hour, one) }},
			{Name: "back_to_back", Job: func(stop <-chan struct{}) { dbtest.Loop(stop, bg) }},
			{Name: "back_to_back_normal", Job: func(stop <-chan struct{}) { dbtest.Loop(stop, normal) }},
		})
		var (
			costs   []dbtest.LoadCost // by run, in Alternate's order
			slowRun []time.Duration
			rates   map[string][]float64
		)
		for range b.N {
			snaps.Store(0)
			rates = dbtest.Alternate(b, rounds, modes, func() float64 {
				rate, cost := write()
				costs, slowRun = append(costs, cost), append(slowRun, time.Duration(slowest.Load()))
				return rate
			})
			fmt.Printf("writes/s with %d writers, %s per run:\n%s", writers, writeFor,
				dbtest.Ratios(b, rates, "alone", []string{"alone", "one_snapshot", "back_to_back", "back_to_back_normal"}))
			b.ReportMetric(float64(snaps.Load()), "snapshots")
		}
		b.StopTimer()

		// Snapshots with the writers stopped, the process to themselves.
		var still []dbtest.JobCost
		for range quiet {
			runtime.GC() // the writers' garbage, collected before the snapshot is measured
			jc := dbtest.MeasureJob(pid, func() float64 { return run(asService) })
			fmt.Printf("a snapshot of %.0f users with the writers stopped: thread %s, process %s, server process %s\n",
				jc.Units, jc.Thread.Round(time.Millisecond), jc.Process.Round(time.Millisecond), jc.Server.Round(time.Millisecond))
			still = append(still, jc)
		}
		require.Equal(b, pid, dbtest.BackendPID(b, job.Pool), "the snapshots' connection was replaced: its server process's CPU is not all counted")

		// The slowest write of a run, by condition: a write that waited for
		// a snapshot would have waited for the whole of it.
		var alone []float64
		for _, m := range modes {
			var v []float64
			for i, s := range slowRun {
				if modes[i%len(modes)].Name == m.Name {
					v = append(v, float64(s.Microseconds())/1000)
					if m.Name == "alone" {
						alone = append(alone, costs[i].PerOp())
					}
				}
			}
			if len(v) > 0 {
				fmt.Printf("slowest write, %s: %.0f ms (by run %.0f)\n", m.Name, slices.Max(v), v)
			}
		}
		fmt.Printf("a snapshot's CPU, writers stopped:\n%s", dbtest.JobSummary(still, 1e6, "users", true))
		fmt.Printf("a snapshot's CPU in the one_snapshot runs, under the writers' load:\n%s", dbtest.JobSummary(loaded, 1e6, "users", false))
		jobCPU := dbtest.JobPerUnit(still, true)
		if len(still) == 0 {
			jobCPU = dbtest.JobPerUnit(loaded, false)
		}
		if jobCPU > 0 {
			const interval = time.Hour // with each hourly reconciliation
			perInterval := jobCPU * float64(users)
			fmt.Printf("a snapshot of %d users every %s: %.2f CPU-s, %.3f%% of %d CPUs\n",
				users, interval, perInterval, 100*perInterval/(interval.Seconds()*float64(runtime.NumCPU())), runtime.NumCPU())
			b.ReportMetric(1e6*jobCPU, "snapshot_cpu_s/1M_users")
		}
		if len(alone) > 0 {
			med, lo, hi := dbtest.Spread(alone)
			fmt.Printf("the writers' CPU (client + their backends) per write, alone: %.0f µs (median of %d; %.0f to %.0f)\n",
				1e6*med, len(alone), 1e6*lo, 1e6*hi)
			b.ReportMetric(1e6*med, "writer_cpu_us/write")
		}
	})
}

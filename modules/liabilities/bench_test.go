package liabilities_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
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
// 2): alone; with one snapshot a quarter into the run, as the service
// takes them (background.Nice, one hashing goroutine); with snapshots back
// to back, the same way; and back to back at normal priority on every CPU.
//
// The users' accounts are inserted with their balances as a superuser with
// the triggers off, without postings: a snapshot reads only the accounts'
// materialized balances, so postings would cost minutes to build and
// change nothing it reads. The writers credit other users, whose accounts
// the ledger opens as usual. docs/performance.md has the results.
func BenchmarkSnapshot(b *testing.B) {
	users := 1_000_000
	if s := os.Getenv("LIABILITIES_BENCH_USERS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(b, err, "LIABILITIES_BENCH_USERS")
		users = n
	}
	writeFor := 10 * time.Second
	if s := os.Getenv("LIABILITIES_BENCH_WRITES"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(b, err, "LIABILITIES_BENCH_WRITES")
		writeFor = d
	}
	ctx := context.Background()
	u := dbtest.NewURL(b)
	start := time.Now()
	dbtest.ExecBehindTriggers(b, u, `INSERT INTO ledger_accounts (asset, kind, owner, balance)
SELECT 'BTC', k, 'bench-user-' || g, CASE WHEN k = 'user_available' THEN 1 + (g::bigint * 7919) % 100000000 WHEN g % 10 = 0 THEN 5000 ELSE 0 END
  FROM generate_series(0, $1::int - 1) g, unnest(ARRAY['user_available', 'user_hold']) k`, users)
	dbtest.VacuumAnalyze(b, u)
	b.Logf("seeded %d users (%d accounts) in %s", users, 2*users, time.Since(start).Round(time.Second))
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
		rounds := 2
		if s := os.Getenv("LIABILITIES_BENCH_ROUNDS"); s != "" {
			n, err := strconv.Atoi(s)
			require.NoError(b, err, "LIABILITIES_BENCH_ROUNDS")
			rounds = n
		}
		var slowest atomic.Int64 // of the current run, in ns
		write := func() float64 {
			var (
				n     atomic.Int64
				wg    sync.WaitGroup
				tag   = time.Now().UnixNano()
				until = time.Now().Add(writeFor)
			)
			slowest.Store(0)
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(tag), uint64(w)))
					for i := 0; time.Now().Before(until); i++ {
						t0 := time.Now()
						err := db.RunInTx(ctx, d.Bun, func(ctx context.Context, tx bun.Tx) error {
							_, err := ledger.CreditDeposit(ctx, tx, "BTC", fmt.Sprintf("writer-%d", rng.IntN(10_000)), 1+rng.Int64N(100_000),
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
			fmt.Printf("slowest write %s\n", time.Duration(slowest.Load()).Round(time.Millisecond))
			return float64(n.Load()) / writeFor.Seconds()
		}
		var snaps atomic.Int64
		snapshot := func(s *liabilities.Service) func() {
			return func() {
				t0 := time.Now()
				if _, err := s.Snapshot(ctx, liabilities.TriggerOnDemand, ""); err != nil {
					b.Error(err)
					return
				}
				snaps.Add(1)
				fmt.Printf("snapshot (nice %d, workers %d) in %s\n", s.Nice, s.Workers, time.Since(t0).Round(time.Millisecond))
			}
		}
		// As the service takes them (cmd/svc/app): the lowest priority, one
		// hashing goroutine; and as before, at normal priority on every CPU.
		bg := snapshot(&liabilities.Service{Pool: d.Pool, Nice: background.Nice, Workers: 1})
		normal := snapshot(&liabilities.Service{Pool: d.Pool})
		modes := []dbtest.Mode{
			{Name: "alone"},
			{Name: "one_snapshot", Job: func(stop <-chan struct{}) { dbtest.Every(stop, writeFor/4, time.Hour, bg) }},
			{Name: "back_to_back", Job: func(stop <-chan struct{}) { dbtest.Loop(stop, bg) }},
			{Name: "back_to_back_normal", Job: func(stop <-chan struct{}) { dbtest.Loop(stop, normal) }},
		}
		for range b.N {
			snaps.Store(0)
			rates := dbtest.Alternate(b, rounds, modes, write)
			fmt.Printf("writes/s with %d writers, %s per run:\n%s", writers, writeFor,
				dbtest.Ratios(b, rates, "alone", []string{"alone", "one_snapshot", "back_to_back", "back_to_back_normal"}))
			b.ReportMetric(float64(snaps.Load()), "snapshots")
		}
	})
}

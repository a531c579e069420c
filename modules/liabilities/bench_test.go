package liabilities_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/modules/liabilities"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// BenchmarkSnapshot times a proof-of-liabilities snapshot over
// LIABILITIES_BENCH_USERS users of one asset (default 1,000,000), and
// fails when they take more than 10 seconds on average. Then it measures what a
// snapshot does to writes: writers post deposits (one entry per
// transaction) for LIABILITIES_BENCH_WRITES (default 10s) without any
// snapshot, then as long again while snapshots run back to back, then
// again without, and reports the rates and the slowest write of each.
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
	svc := &liabilities.Service{Pool: d.Pool}

	b.Run(fmt.Sprintf("users=%d", users), func(b *testing.B) {
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

	b.Run("writes", func(b *testing.B) {
		const writers = 8
		write := func(during func(stop <-chan struct{})) (perSec float64, slowest time.Duration) {
			var (
				n     atomic.Int64
				mu    sync.Mutex
				lat   []time.Duration
				wg    sync.WaitGroup
				stop  = make(chan struct{})
				tag   = time.Now().UnixNano()
				until = time.Now().Add(writeFor)
			)
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(tag), uint64(w)))
					var mine []time.Duration
					for i := 0; time.Now().Before(until); i++ {
						t0 := time.Now()
						err := db.RunInTx(ctx, d.Bun, func(ctx context.Context, tx bun.Tx) error {
							_, err := ledger.CreditDeposit(ctx, tx, "BTC", fmt.Sprintf("writer-%d", rng.IntN(10_000)), 1+rng.Int64N(100_000),
								fmt.Sprintf("bench-%d-%d-%d", tag, w, i), "")
							return err
						})
						require.NoError(b, err)
						mine = append(mine, time.Since(t0))
						n.Add(1)
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				}()
			}
			done := make(chan struct{})
			go func() { during(stop); close(done) }()
			wg.Wait()
			close(stop)
			<-done
			slices.Sort(lat)
			return float64(n.Load()) / writeFor.Seconds(), lat[len(lat)-1]
		}
		for range b.N {
			// Alone before and after the snapshots, so that neither a
			// cold start nor a grown table favours one side.
			before, beforePeak := write(func(<-chan struct{}) {})
			var snaps atomic.Int64
			with, withPeak := write(func(stop <-chan struct{}) {
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, err := svc.Snapshot(ctx, liabilities.TriggerOnDemand, "")
					require.NoError(b, err)
					snaps.Add(1)
				}
			})
			after, afterPeak := write(func(<-chan struct{}) {})
			alone, alonePeak := (before+after)/2, max(beforePeak, afterPeak)
			b.Logf("writes/s alone before %.0f, after %.0f; snapshotting %.0f", before, after, with)
			b.ReportMetric(alone, "writes/s_alone")
			b.ReportMetric(with, "writes/s_snapshotting")
			b.ReportMetric(100*with/alone, "%_of_alone")
			b.ReportMetric(alonePeak.Seconds()*1000, "slowest_ms_alone")
			b.ReportMetric(withPeak.Seconds()*1000, "slowest_ms_snapshotting")
			b.ReportMetric(float64(snaps.Load()), "snapshots")
		}
	})
}

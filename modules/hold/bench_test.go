package hold_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/modules/hold"
	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// BenchmarkHoldCapture is a marketplace's order flow at the service level:
// each operation places a hold on a random buyer's balance (one
// transaction: the hold's row and escrow_hold) and captures it into two
// accounts, a random seller and the one commission platform account, with
// a rest returned (one transaction: the row locked, escrow_capture,
// escrow_release, the status and the captures). With LEDGER_PGBENCH and
// LEDGER_PGBENCH_URL set (scripts/bench.sh), it reports the rate of holds
// captured as a percentage of pgbench's TPC-B with as many clients, run
// right before on the same server.
func BenchmarkHoldCapture(b *testing.B) {
	const users = 1_000
	ctx := context.Background()
	d, err := db.Open(ctx, dbtest.NewURL(b), 40)
	require.NoError(b, err)
	b.Cleanup(d.Close)
	for i := range users {
		_, err := ledger.CreditDeposit(ctx, d.Bun, "BTC", ledger.UserHolder(fmt.Sprintf("buyer-%d", i)), 1_000_000_000,
			fmt.Sprintf("bench-funding-%d", i), "")
		require.NoError(b, err)
	}
	s := &hold.Service{DB: d.Bun, Now: time.Now}
	dur := dbtest.DurationEnv(b, "LEDGER_BENCH_DURATION", 10*time.Second)
	for _, writers := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			tpcb := dbtest.PgbenchTPS(b, writers, dur)
			rngs := make([]*rand.Rand, writers)
			for w := range rngs {
				rngs[w] = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
			}
			var done atomic.Int64
			load := dbtest.RunClients(b, writers, dur, func(w int, _ int64) error {
				rng := rngs[w]
				v, _, err := s.Create(ctx, hold.CreateParams{From: ledger.UserHolder(fmt.Sprintf("buyer-%d", rng.IntN(users))),
					Asset: "BTC", Amount: 1_000}, nil)
				if err != nil {
					return err
				}
				_, _, err = s.Capture(ctx, uuid.MustParse(v.HoldID), []hold.CaptureLeg{
					{To: ledger.UserHolder(fmt.Sprintf("seller-%d", rng.IntN(users))), Amount: 900},
					{To: ledger.PlatformHolder("commission"), Amount: 50}}, nil)
				if err == nil {
					done.Add(1)
				}
				return err
			})
			rate := float64(done.Load()) / load.Elapsed.Seconds()
			b.ReportMetric(rate, "holds/s")
			if tpcb > 0 {
				b.ReportMetric(tpcb, "tpcb_tps")
				b.ReportMetric(100*rate/tpcb, "pct_of_tpcb")
			}
		})
	}
	found, err := hold.CheckEscrow(ctx, d.Bun)
	require.NoError(b, err)
	require.Empty(b, found)
}

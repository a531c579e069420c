package withdrawal_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/modules/withdrawal"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/chain"
	"svc/platform/config"
	"svc/platform/dbtest"
	"svc/platform/idempotency"
)

// BenchmarkPayouts measures how fast the worker's payout passes carry a
// backlog of approved BTC withdrawals to confirmed, against a processor
// that completes every approved payout at once (the simulator's
// AutoCompletePayouts over loopback HTTP). PAYOUT_BENCH_WITHDRAWALS
// (default 2,000) auto-approved withdrawals from benchUsers users are
// created first; the clock then runs over the passes alone
// (Service.ProcessPayouts, back to back, as the worker would run them
// with nothing else to do) until every withdrawal is confirmed. Each
// payout is: the claim, the processor's create, the accepted payout
// recorded, the payout read back, the wallet's transaction and its
// payouts read, and one transaction that broadcasts and settles it with
// its two events. Reported: payouts per second, passes, and the CPU of
// this process (the service, the simulator) and of the database's
// processes and the server's shared ones (dbtest.ServerMeter: other
// databases' backends left out, so that a server shared with other work
// still reads this one's) per payout.
func BenchmarkPayouts(b *testing.B) {
	ctx := context.Background()
	e := setupSim(b, btcpaysim.Options{AutoCompletePayouts: true}, func(c *config.Config) {
		c.Database.MaxConns = 4 * runtime.NumCPU()
		c.LogLevel = "error"
	})
	total := dbtest.IntEnv(b, "PAYOUT_BENCH_WITHDRAWALS", 2_000)
	e.limits(b, asset.BTC, asset.Limits{AutoLimit: n(1 << 40), DailyCap: n(1 << 60)})
	fundMany(b, e, benchUsers, 1<<40)
	dests := make([]string, 64)
	for i := range dests {
		dests[i] = p2wpkh(b, chain.Regtest, fmt.Sprint("bench-dest-", i))
	}
	idem := &idempotency.Store{DB: e.App.DB.Bun, Now: time.Now}
	work := make(chan int)
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			var first error
			for i := range work {
				p := withdrawal.CreateParams{ExternalUserID: fmt.Sprint("bench-", i%benchUsers), Asset: asset.BTC,
					Amount: 20_000 + int64(i%1000), Destination: dests[i%len(dests)], IdempotencyKey: fmt.Sprint("payout-bench-", i)}
				rec := idem.Pending(p.IdempotencyKey, "POST", "/v1/withdrawals", idempotency.Hash("POST", "/v1/withdrawals", []byte(p.IdempotencyKey)))
				if _, _, err := e.Svc.Create(ctx, p, rec); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	for i := range total {
		work <- i
	}
	close(work)
	for range 16 {
		require.NoError(b, <-errs)
	}
	dbtest.VacuumAnalyze(b, e.App.Cfg.Database.URL)

	open := func() int {
		var left int
		require.NoError(b, e.App.DB.Bun.NewSelect().Table("withdrawals").ColumnExpr("count(*)").
			Where("status <> 'confirmed'").Scan(ctx, &left))
		return left
	}
	meter := dbtest.NewServerMeter(b, dbtest.AdminURLOf(b, e.App.Cfg.Database.URL))
	self0 := dbtest.SelfCPU()
	if meter != nil {
		meter.Start()
	}
	b.ResetTimer()
	start := time.Now()
	passes := 0
	for left := total; left > 0; left = open() {
		require.Less(b, passes, total, "payouts stopped moving: %d withdrawals not confirmed", left)
		require.NoError(b, e.Svc.ProcessPayouts(ctx))
		passes++
	}
	elapsed := time.Since(start)
	b.StopTimer()
	self1 := dbtest.SelfCPU()
	var server time.Duration
	if meter != nil {
		server = meter.Stop().Own
	}
	b.ReportMetric(float64(total)/elapsed.Seconds(), "payouts/s")
	b.ReportMetric(float64(passes), "passes")
	b.ReportMetric(float64((self1-self0).Microseconds())/1000/float64(total), "go_cpu_ms/payout")
	b.ReportMetric(float64(server.Microseconds())/1000/float64(total), "pg_cpu_ms/payout")
}

// BenchmarkPayoutLookups measures the processor lookups that a
// submission's retry and a release make, against the simulator over
// loopback HTTP holding PAYOUT_LOOKUP_BENCH_PAYOUTS (default 50,000)
// payouts of other withdrawals made over the past 30 days, plus two
// withdrawals made now: one submitted in one attempt (its payout
// recorded), one stuck submitting (no payout known, so a release has to
// list). Sub-benchmarks: the lookup by withdrawal id back to the
// withdrawal's creation (what the service does), the same reading the
// whole list (what it did), and a release's check (payoutLive) of each
// withdrawal.
func BenchmarkPayoutLookups(b *testing.B) {
	ctx := context.Background()
	e := setup(b, func(c *config.Config) {
		c.LogLevel = "error"
		c.BTCPay.Timeout = 15 * time.Second // the default: reading the whole list takes more than the tests' 2 s
	})
	total := dbtest.IntEnv(b, "PAYOUT_LOOKUP_BENCH_PAYOUTS", 50_000)
	e.Sim.AddPastPayouts(total, 30*24*time.Hour)
	e.fund(b, "lookups", asset.BTC, 10_000_000)
	once := e.create(b, "lookups", asset.BTC, 50_000, p2wpkh(b, chain.Regtest, "lookup once"))
	e.pass(b)
	require.Equal(b, withdrawal.StatusSubmitted, e.row(b, once.WithdrawalID).Status)
	real := e.Svc.Processor
	stuck := e.create(b, "lookups", asset.BTC, 60_000, p2wpkh(b, chain.Regtest, "lookup stuck"))
	e.Svc.Processor = forbidden{real}
	e.pass(b)
	e.Svc.Processor = real
	wOnce, wStuck := e.row(b, once.WithdrawalID), e.row(b, stuck.WithdrawalID)
	require.Equal(b, withdrawal.StatusSubmitting, wStuck.Status)

	b.Run("ByWithdrawalID/since-creation", func(b *testing.B) {
		since := wStuck.CreatedAt.Add(-withdrawal.ProcessorClockSkew)
		for b.Loop() {
			_, err := real.PayoutsByWithdrawalID(ctx, wStuck.ID.String(), since)
			require.NoError(b, err)
		}
	})
	b.Run("ByWithdrawalID/whole-list", func(b *testing.B) {
		for b.Loop() {
			_, err := real.PayoutsByWithdrawalID(ctx, wStuck.ID.String(), time.Time{})
			require.NoError(b, err)
		}
	})
	b.Run("ReleaseCheck/submitted-once", func(b *testing.B) {
		for b.Loop() {
			require.Error(b, withdrawal.PayoutLive(ctx, e.Svc, wOnce)) // its payout is live
		}
	})
	b.Run("ReleaseCheck/submitting", func(b *testing.B) {
		for b.Loop() {
			require.NoError(b, withdrawal.PayoutLive(ctx, e.Svc, wStuck))
		}
	})
}

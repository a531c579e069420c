package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/platform/db"
	"svc/platform/dbtest"
)

// BenchmarkInside measures money moving inside the platform, at the ledger
// level (make bench; docs/performance.md, "Transfers, escrow holds and the
// hot account"), over 10,000 users funded in BTC and USDT_TRC20, 32
// writers each, one operation at a time:
//
//	transfer_spread  one transaction: PostTransferLeg between two random
//	                 users
//	transfer_hot     the same, every leg from a random user to the
//	                 platform account "revenue" (one of its shards,
//	                 ledger.PlatformShards)
//	trade            one transaction: LockAccounts on the four accounts,
//	                 then a BTC leg from A to B and a USDT_TRC20 leg from B
//	                 to A, between random users, each leg's entry
//	                 (TransferLegEntry) posted Locked
//	hold_capture     PostEscrowHold in one transaction; then, in a second,
//	                 CaptureEscrow (as modules/hold captures): one
//	                 statement that locks the four accounts it touches
//	                 (commission's: the shard the capture credits) and
//	                 posts the capture to a seller and the platform
//	                 account "commission" and the release of the rest (one
//	                 operation: both transactions)
//
// Like BenchmarkLedger, every case runs for LEDGER_BENCH_DURATION whatever
// b.N is, after VACUUM ANALYZE, CHECKPOINT and pgbench's TPC-B at as many
// clients for as long (when scripts/bench.sh sets LEDGER_PGBENCH), and
// reports ops/s with its percentage of that TPC-B; transfer_hot also
// reports its percentage of transfer_spread of the same run. Deadlocks
// (SQLSTATE 40P01) are counted, not retried, and any fails the case.
func BenchmarkInside(b *testing.B) {
	d, meter := newInsideDB(b)
	ctx := context.Background()
	for _, a := range insideAssets {
		bulkDeposits(b, d, a, "bench-", benchUsers, benchUsers, 1_000_000_000)
	}
	// The platform accounts exist, as in steady state (their first credits
	// create their shards: createPlatformAccounts).
	createPlatformAccounts(b, d, insideAssets, "revenue", "commission")
	const writers = 32
	var spread float64 // transfer_spread's ops/s in this run
	for _, sc := range insideScenarios {
		b.Run(fmt.Sprintf("%s/writers=%d", sc.name, writers), func(b *testing.B) {
			rate := runInside(b, ctx, d, meter, sc, writers)
			switch sc.name {
			case "transfer_spread":
				spread = rate
			case "transfer_hot":
				if spread > 0 {
					b.ReportMetric(100*rate/spread, "pct_of_spread")
					b.Logf("transfer_hot: %.0f%% of transfer_spread's %.0f ops/s (target 75%%)", 100*rate/spread, spread)
				}
			}
		})
	}
	requireInvariants(b, d)
}

var insideAssets = []string{"BTC", "USDT_TRC20"}

// insideScenario is one case of BenchmarkInside; op runs one operation and
// returns the number of deadlocks it met (the operation is then not
// counted).
type insideScenario struct {
	name string
	op   func(ctx context.Context, d *bun.DB, rng *rand.Rand, ref string) (deadlocks int, err error)
}

// benchPair is two distinct random bench users.
func benchPair(rng *rand.Rand) (ledger.Holder, ledger.Holder) {
	a := rng.IntN(benchUsers)
	c := (a + 1 + rng.IntN(benchUsers-1)) % benchUsers
	return ledger.UserHolder(fmt.Sprint("bench-", a)), ledger.UserHolder(fmt.Sprint("bench-", c))
}

var insideScenarios = []insideScenario{
	{"transfer_spread", func(ctx context.Context, d *bun.DB, rng *rand.Rand, ref string) (int, error) {
		from, to := benchPair(rng)
		return insideTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.PostTransferLeg(ctx, tx, "BTC", from, to, 1+rng.Int64N(1_000), ref, "")
			return err
		})
	}},
	{"transfer_hot", func(ctx context.Context, d *bun.DB, rng *rand.Rand, ref string) (int, error) {
		from, _ := benchPair(rng)
		return insideTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.PostTransferLeg(ctx, tx, "BTC", from, ledger.PlatformHolder("revenue"), 1+rng.Int64N(1_000), ref, "")
			return err
		})
	}},
	{"trade", tradeLocked},
	{"hold_capture", func(ctx context.Context, d *bun.DB, rng *rand.Rand, ref string) (int, error) {
		payer, seller := benchPair(rng)
		commission := ledger.PlatformHolder("commission")
		amount := 100 + rng.Int64N(1_000)
		toSeller, toCommission := amount*90/100, amount*5/100
		n, err := insideTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.PostEscrowHold(ctx, tx, "BTC", payer, amount, ref, "")
			return err
		})
		if n > 0 || err != nil {
			return n, err
		}
		for {
			// The capture and release, retried until they commit: the hold
			// stays open otherwise, and the escrow check would not add up.
			n2, err := insideTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
				_, _, err := ledger.CaptureEscrow(ctx, tx, "BTC", payer, []ledger.CaptureLeg{
					{To: seller, Amount: toSeller}, {To: commission, Amount: toCommission},
				}, amount-toSeller-toCommission, ref, "", "")
				return err
			})
			n += n2
			if n2 == 0 || err != nil {
				return n, err
			}
		}
	}},
}

// insideTx runs fn in one transaction, without db.RunInTx's retries, and
// counts a deadlock instead of failing.
func insideTx(ctx context.Context, d *bun.DB, fn func(ctx context.Context, tx bun.Tx) error) (int, error) {
	err := d.RunInTx(ctx, nil, fn)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "40P01" {
		return 1, nil
	}
	return 0, err
}

var insideSeq atomic.Int64

// newInsideDB opens a new database as its owner (bulk loading and
// CHECKPOINT), with a meter of the server's CPU for it (nil when the
// server's processes cannot be read).
func newInsideDB(b *testing.B) (*bun.DB, *dbtest.ServerMeter) {
	u := dbtest.NewURL(b)
	d, err := db.Open(context.Background(), dbtest.OwnerURL(u), 40)
	require.NoError(b, err)
	b.Cleanup(d.Close)
	return d.Bun, dbtest.NewServerMeter(b, dbtest.AdminURLOf(b, u))
}

// runInside runs one case as runBench does and returns its ops/s. With a
// meter, it also reports the CPU per operation of the database's server
// processes (server_ms/op; with the server's shared processes, which also
// serve other databases) and of this process (client_ms/op): on a shared
// machine they move less than the rate.
func runInside(b *testing.B, ctx context.Context, d *bun.DB, meter *dbtest.ServerMeter, sc insideScenario, writers int) float64 {
	dur := benchDuration(b)
	run := time.Now().UnixNano()
	_, err := d.ExecContext(ctx, "VACUUM ANALYZE ledger_accounts, ledger_entries, ledger_postings")
	require.NoError(b, err)
	_, _ = d.ExecContext(ctx, "CHECKPOINT")
	tpcb := dbtest.PgbenchTPS(b, writers, dur)
	rngs := make([]*rand.Rand, writers)
	for w := range rngs {
		rngs[w] = rand.New(rand.NewPCG(uint64(run), uint64(w)))
	}
	var ops, deadlocks atomic.Int64
	if meter != nil {
		meter.Start()
	}
	self := dbtest.SelfCPU()
	load := dbtest.RunClients(b, writers, dur, func(w int, _ int64) error {
		ref := fmt.Sprintf("bench-inside-%d-%d", run, insideSeq.Add(1))
		n, err := sc.op(ctx, d, rngs[w], ref)
		if err != nil {
			return err
		}
		deadlocks.Add(int64(n))
		if n == 0 {
			ops.Add(1)
		}
		return nil
	})
	self = dbtest.SelfCPU() - self
	var server time.Duration
	if meter != nil {
		server = meter.Stop().Own
	}
	rate := float64(ops.Load()) / load.Elapsed.Seconds()
	perOp := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(max(ops.Load(), 1)) }
	if meter != nil {
		b.ReportMetric(perOp(server), "server_ms/op")
	}
	b.ReportMetric(perOp(self), "client_ms/op")
	b.ReportMetric(rate, "ops/s")
	b.ReportMetric(float64(load.Elapsed.Nanoseconds())/float64(max(ops.Load(), 1)), "ns/op")
	b.ReportMetric(load.P50, "p50_ms")
	b.ReportMetric(load.P99, "p99_ms")
	b.ReportMetric(float64(deadlocks.Load()), "deadlocks")
	if tpcb > 0 {
		b.ReportMetric(tpcb, "tpcb_tps")
		b.ReportMetric(100*rate/tpcb, "pct_of_tpcb")
	}
	b.Logf("%s: %.0f ops/s, p99 %.1f ms, %d deadlocks; pgbench TPC-B right before: %.0f tps (%.0f%%); CPU per operation: server %.3f ms, client %.3f ms",
		sc.name, rate, load.P99, deadlocks.Load(), tpcb, 100*rate/max(tpcb, 1), perOp(server), perOp(self))
	if deadlocks.Load() > 0 {
		b.Fatalf("%s: %d deadlocks (SQLSTATE 40P01)", sc.name, deadlocks.Load())
	}
	return rate
}

// pipelined posts a transfer leg as one implicit transaction in one round
// trip (BEGIN, the posting, COMMIT: ledger.QueuePost and db.Pipeline).
func pipelined(ctx context.Context, d *bun.DB, asset string, from, to ledger.Holder, amount int64, ref string) (int, error) {
	var batch pgx.Batch
	q, err := ledger.QueuePost(&batch, ledger.Entry{Kind: ledger.TransferEntry, Asset: asset, SourceRef: ref, Lines: []ledger.Line{
		{Account: from.Available(), Amount: -amount}, {Account: to.Available(), Amount: amount},
	}})
	if err != nil {
		return 0, err
	}
	err = db.PipelineOnce(ctx, d, &batch, func(br pgx.BatchResults) error {
		_, err := q.Read(br)
		return err
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "40P01" {
		return 1, nil
	}
	return 0, err
}

// hotCandidates are the designs BenchmarkInsideHot compares.
var hotCandidates = []insideScenario{
	{"transfer_spread_pipelined", func(ctx context.Context, d *bun.DB, rng *rand.Rand, ref string) (int, error) {
		from, to := benchPair(rng)
		return pipelined(ctx, d, "BTC", from, to, 1+rng.Int64N(1_000), ref)
	}},
	{"transfer_hot_pipelined", func(ctx context.Context, d *bun.DB, rng *rand.Rand, ref string) (int, error) {
		from, _ := benchPair(rng)
		return pipelined(ctx, d, "BTC", from, ledger.PlatformHolder("revenue"), 1+rng.Int64N(1_000), ref)
	}},
	{"transfer_hot_sharded16", hotSharded(16)},
	{"transfer_hot_sharded64", hotSharded(64)},
	{"transfer_hot_derived", func(ctx context.Context, d *bun.DB, rng *rand.Rand, ref string) (int, error) {
		from, _ := benchPair(rng)
		amount := 1 + rng.Int64N(1_000)
		return insideTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.Post(ctx, tx, ledger.Entry{Kind: ledger.TransferEntry, Asset: "BTC", SourceRef: ref, Lines: []ledger.Line{
				{Account: from.Available(), Amount: -amount}, {Account: ledger.Account{Kind: ledger.FeeIncome}, Amount: amount},
			}})
			return err
		})
	}},
	{"hold_capture_derived", holdCaptureDerived},
}

// holdCaptureDerived is hold_capture with the commission paid to an
// account whose balance is derived (a system account stands in).
func holdCaptureDerived(ctx context.Context, d *bun.DB, rng *rand.Rand, ref string) (int, error) {
	payer, seller := benchPair(rng)
	amount := 100 + rng.Int64N(1_000)
	toSeller, toCommission := amount*90/100, amount*5/100
	n, err := insideTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.PostEscrowHold(ctx, tx, "BTC", payer, amount, ref, "")
		return err
	})
	if n > 0 || err != nil {
		return n, err
	}
	for {
		n2, err := insideTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
			if err := ledger.LockAccounts(ctx, tx, []ledger.AccountRef{
				{Asset: "BTC", Account: payer.Escrow()}, {Asset: "BTC", Account: payer.Available()},
				{Asset: "BTC", Account: seller.Available()},
			}); err != nil {
				return err
			}
			if _, err := ledger.Post(ctx, tx, ledger.Entry{Kind: ledger.EscrowCapture, Asset: "BTC", SourceRef: ref, Lines: []ledger.Line{
				{Account: payer.Escrow(), Amount: -toSeller - toCommission},
				{Account: seller.Available(), Amount: toSeller},
				{Account: ledger.Account{Kind: ledger.FeeIncome}, Amount: toCommission},
			}}); err != nil {
				return err
			}
			_, err := ledger.PostEscrowRelease(ctx, tx, "BTC", payer, amount-toSeller-toCommission, ref, "")
			return err
		})
		n += n2
		if n2 == 0 || err != nil {
			return n, err
		}
	}
}

// hotSharded credits one of shards platform accounts, revenue.0 to
// revenue.(shards-1), chosen at random per transfer.
func hotSharded(shards int) func(ctx context.Context, d *bun.DB, rng *rand.Rand, ref string) (int, error) {
	return func(ctx context.Context, d *bun.DB, rng *rand.Rand, ref string) (int, error) {
		from, _ := benchPair(rng)
		to := ledger.PlatformHolder(fmt.Sprint("revenue.", rng.IntN(shards)))
		return insideTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.PostTransferLeg(ctx, tx, "BTC", from, to, 1+rng.Int64N(1_000), ref, "")
			return err
		})
	}
}

// BenchmarkInsideHot compares designs of the hot account (docs/performance.md,
// "Transfers, escrow holds and the hot account"), each as a percentage of
// transfer_spread measured in the same run:
//
//	transfer_hot               the shipped design: every leg credits
//	                           "revenue", one of its 64 shards
//	transfer_spread_pipelined  transfer_spread as one implicit transaction
//	                           in one round trip (BEGIN, the posting, COMMIT)
//	transfer_hot_pipelined     transfer_hot the same way: the row's lock is
//	                           no longer held across the COMMIT's round trip
//	transfer_hot_sharded16/64  the credit to one of 16 or 64 platform
//	                           accounts at random (each itself sharded now)
//	transfer_hot_derived       the credit to an account whose balance is
//	                           derived from its postings (a system account
//	                           stands in): no row is locked or updated
//	hold_capture, and hold_capture_derived with the commission paid that
//	way (each as a percentage of TPC-B only)
func BenchmarkInsideHot(b *testing.B) {
	d, meter := newInsideDB(b)
	ctx := context.Background()
	bulkDeposits(b, d, "BTC", "bench-", benchUsers, benchUsers, 1_000_000_000)
	createPlatformAccounts(b, d, []string{"BTC"}, "revenue", "commission")
	const writers = 32
	var spread, spreadPipelined float64
	for _, sc := range append([]insideScenario{insideScenarios[0], insideScenarios[1]}, append(hotCandidates, insideScenarios[3])...) {
		b.Run(fmt.Sprintf("%s/writers=%d", sc.name, writers), func(b *testing.B) {
			rate := runInside(b, ctx, d, meter, sc, writers)
			ref := spread
			switch sc.name {
			case "transfer_spread":
				spread = rate
				return
			case "transfer_spread_pipelined":
				spreadPipelined = rate
				return
			case "transfer_hot_pipelined":
				ref = spreadPipelined
			case "hold_capture", "hold_capture_derived":
				return
			}
			if ref > 0 {
				b.ReportMetric(100*rate/ref, "pct_of_spread")
				b.Logf("%s: %.0f%% of the spread case's %.0f ops/s (target 75%%)", sc.name, 100*rate/ref, ref)
			}
		})
	}
	requireInvariants(b, d)
}

// BenchmarkInsideCapture compares the two ways CaptureEscrow can post a
// user payer's capture (docs/performance.md, "Transfers, escrow holds and
// the hot account"), as BenchmarkInside's hold_capture, in alternating
// cases, each twice:
//
//	hold_capture_steps  LockAccounts, then the capture and the release,
//	                    each posted Locked: three statements
//	hold_capture        the shipped way: one statement (buildCapture)
//
// Each reports its rate against TPC-B and the CPU per operation of the
// server and of this process.
func BenchmarkInsideCapture(b *testing.B) {
	d, meter := newInsideDB(b)
	ctx := context.Background()
	bulkDeposits(b, d, "BTC", "bench-", benchUsers, benchUsers, 1_000_000_000)
	createPlatformAccounts(b, d, []string{"BTC"}, "revenue", "commission")
	const writers = 32
	holdCapture := insideScenarios[3]
	for round := 1; round <= 2; round++ {
		for _, steps := range []bool{true, false} {
			name := holdCapture.name
			if steps {
				name += "_steps"
			}
			b.Run(fmt.Sprintf("%s/round=%d/writers=%d", name, round, writers), func(b *testing.B) {
				defer ledger.SetCaptureInSteps(steps)()
				runInside(b, ctx, d, meter, insideScenario{name, holdCapture.op}, writers)
			})
		}
	}
	requireInvariants(b, d)
}

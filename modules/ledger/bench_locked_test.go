package ledger_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/platform/dbtest"
)

// tradeLocked is BenchmarkInside's trade with Locked legs: LockAccounts on
// the four accounts, then the two legs posted with Entry.Locked, so they
// neither lock the rows again nor upsert their credits.
func tradeLocked(ctx context.Context, d *bun.DB, rng *rand.Rand, ref string) (int, error) {
	x, y := benchPair(rng)
	btc, usdt := 1+rng.Int64N(1_000), 1+rng.Int64N(1_000)
	return insideTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
		if err := ledger.LockAccounts(ctx, tx, []ledger.AccountRef{
			{Asset: "BTC", Account: x.Available()}, {Asset: "BTC", Account: y.Available()},
			{Asset: "USDT_TRC20", Account: y.Available()}, {Asset: "USDT_TRC20", Account: x.Available()},
		}); err != nil {
			return err
		}
		if _, err := ledger.Post(ctx, tx, leg("BTC", x, y, btc, ref+":0", true)); err != nil {
			return err
		}
		_, err := ledger.Post(ctx, tx, leg("USDT_TRC20", y, x, usdt, ref+":1", true))
		return err
	})
}

// BenchmarkInsideLocked compares, in one run, BenchmarkInside's trade with
// the same trade posting Locked legs (trade_locked), each as a percentage
// of pgbench's TPC-B run right before it, like BenchmarkInside.
func BenchmarkInsideLocked(b *testing.B) {
	d := newDBAs(b, 40, dbtest.OwnerURL)
	ctx := context.Background()
	for _, a := range insideAssets {
		bulkDeposits(b, d, a, "bench-", benchUsers, benchUsers, 1_000_000_000)
	}
	const writers = 32
	for _, sc := range []insideScenario{insideScenarios[2], {"trade_locked", tradeLocked}} {
		b.Run(fmt.Sprintf("%s/writers=%d", sc.name, writers), func(b *testing.B) {
			runInside(b, ctx, d, sc, writers)
		})
	}
	requireInvariants(b, d)
}

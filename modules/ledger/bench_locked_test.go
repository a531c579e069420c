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

// tradeLocked is BenchmarkInside's trade: LockAccounts on the four
// accounts, then the two legs posted with Entry.Locked, so they neither
// lock the rows again nor upsert their credits.
func tradeLocked(ctx context.Context, d *bun.DB, rng *rand.Rand, ref string) (int, error) {
	return trade(ctx, d, rng, ref, true)
}

// tradeUnlocked is the same trade with PostTransferLeg's own legs.
func tradeUnlocked(ctx context.Context, d *bun.DB, rng *rand.Rand, ref string) (int, error) {
	return trade(ctx, d, rng, ref, false)
}

func trade(ctx context.Context, d *bun.DB, rng *rand.Rand, ref string, locked bool) (int, error) {
	x, y := benchPair(rng)
	btc, usdt := 1+rng.Int64N(1_000), 1+rng.Int64N(1_000)
	return insideTx(ctx, d, func(ctx context.Context, tx bun.Tx) error {
		if err := ledger.LockAccounts(ctx, tx, []ledger.AccountRef{
			{Asset: "BTC", Account: x.Available()}, {Asset: "BTC", Account: y.Available()},
			{Asset: "USDT_TRC20", Account: y.Available()}, {Asset: "USDT_TRC20", Account: x.Available()},
		}); err != nil {
			return err
		}
		for i, l := range []struct {
			asset    string
			from, to ledger.Holder
			amount   int64
		}{{"BTC", x, y, btc}, {"USDT_TRC20", y, x, usdt}} {
			ref := fmt.Sprintf("%s:%d", ref, i)
			if !locked {
				if _, err := ledger.PostTransferLeg(ctx, tx, l.asset, l.from, l.to, l.amount, ref, ""); err != nil {
					return err
				}
				continue
			}
			e, err := ledger.TransferLegEntry(l.asset, l.from, l.to, l.amount, ref, "")
			if err != nil {
				return err
			}
			e.Locked = true
			if _, err := ledger.Post(ctx, tx, e); err != nil {
				return err
			}
		}
		return nil
	})
}

// BenchmarkInsideLocked compares, in one run, the trade with
// PostTransferLeg's own legs (trade_unlocked) and BenchmarkInside's trade,
// whose legs are Locked (trade_locked), each as a percentage of pgbench's
// TPC-B run right before it, like BenchmarkInside.
func BenchmarkInsideLocked(b *testing.B) {
	d := newDBAs(b, 40, dbtest.OwnerURL)
	ctx := context.Background()
	for _, a := range insideAssets {
		bulkDeposits(b, d, a, "bench-", benchUsers, benchUsers, 1_000_000_000)
	}
	const writers = 32
	for _, sc := range []insideScenario{{"trade_unlocked", tradeUnlocked}, {"trade_locked", tradeLocked}} {
		b.Run(fmt.Sprintf("%s/writers=%d", sc.name, writers), func(b *testing.B) {
			runInside(b, ctx, d, nil, sc, writers)
		})
	}
	requireInvariants(b, d)
}

package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
)

// leg is a transfer leg as an Entry, Locked as the caller says.
func leg(asset string, from, to ledger.Holder, amount int64, ref string, locked bool) ledger.Entry {
	return ledger.Entry{Kind: ledger.TransferEntry, Asset: asset, SourceRef: ref, Locked: locked, Lines: []ledger.Line{
		{Account: from.Available(), Amount: -amount}, {Account: to.Available(), Amount: amount},
	}}
}

// TestLockedOppositeTradesDoNotDeadlock: two-asset trades between the same
// two holders in both directions, legs named in opposite orders, each
// transaction locking its accounts with LockAccounts and then posting
// Locked entries (no lock of their own, credits by plain UPDATE), a pool
// account created by LockAccounts itself: none deadlocks, every trade
// commits, and the balances are exact.
func TestLockedOppositeTradesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	d := newDB(t, 16)
	ann, bob := ledger.UserHolder("ann"), ledger.UserHolder("bob")
	credit(t, d, "BTC", "ann", 1_000_000, "pay-a")
	credit(t, d, "USDT_TRC20", "bob", 1_000_000, "pay-b")
	credit(t, d, "BTC", "bob", 1_000_000, "pay-c")
	credit(t, d, "USDT_TRC20", "ann", 1_000_000, "pay-d")
	const trades = 200
	var wg sync.WaitGroup
	errs := make(chan error, trades)
	for i := 0; i < trades; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			from, to, first, second := ann, bob, "BTC", "USDT_TRC20"
			if i%2 == 1 {
				from, to, first, second = bob, ann, "USDT_TRC20", "BTC"
			}
			pool := ledger.PlatformHolder(fmt.Sprintf("pool-%d", i%10))
			// RunInTx without retries: a deadlock would fail the test.
			errs <- d.RunInTx(context.Background(), nil, func(ctx context.Context, tx bun.Tx) error {
				refs := []ledger.AccountRef{{Asset: first, Account: from.Available()}, {Asset: first, Account: to.Available()},
					{Asset: second, Account: to.Available()}, {Asset: second, Account: from.Available()}, {Asset: first, Account: pool.Available()}}
				if err := ledger.LockAccounts(ctx, tx, refs); err != nil {
					return err
				}
				for _, e := range []ledger.Entry{
					leg(first, from, to, 10, fmt.Sprintf("t%d:0", i), true),
					leg(second, to, from, 7, fmt.Sprintf("t%d:1", i), true),
					leg(first, from, pool, 1, fmt.Sprintf("t%d:2", i), true),
				} {
					if _, err := ledger.Post(ctx, tx, e); err != nil {
						return err
					}
				}
				return nil
			})
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int64(1_000_000-1_000-700-100), holderBalance(t, d, "BTC", ann).Available)
	require.Equal(t, int64(1_000_000+1_000+700), holderBalance(t, d, "BTC", bob).Available)
	require.Equal(t, int64(1_000_000+700+1_000), holderBalance(t, d, "USDT_TRC20", ann).Available)
	require.Equal(t, int64(1_000_000-700-1_000-100), holderBalance(t, d, "USDT_TRC20", bob).Available)
	require.Equal(t, int64(20), holderBalance(t, d, "BTC", ledger.PlatformHolder("pool-0")).Available)
	require.Equal(t, int64(20), holderBalance(t, d, "USDT_TRC20", ledger.PlatformHolder("pool-1")).Available)
	requireInvariants(t, d)
}

// TestLockedBrokenPromise: Locked without LockAccounts. A credit to an
// account that does not exist fails and writes nothing (not the debit, not
// the entry); the guards hold as without the flag (a debit that does not
// fit is refused, a replay replays); and opposite transfers that skip
// LockAccounts can at worst deadlock, which the database detects and rolls
// back, never leaving a wrong balance.
func TestLockedBrokenPromise(t *testing.T) {
	t.Parallel()
	d := newDB(t, 16)
	ctx := context.Background()
	ann, bob, cal := ledger.UserHolder("ann"), ledger.UserHolder("bob"), ledger.UserHolder("cal")
	credit(t, d, "BTC", "ann", 1_000, "pay-a")
	credit(t, d, "BTC", "bob", 1_000, "pay-b")

	// cal has no account: nothing is written.
	_, err := ledger.Post(ctx, d, leg("BTC", ann, cal, 100, "broken-1", true))
	require.Error(t, err)
	require.Contains(t, err.Error(), "LockAccounts did not cover it")
	require.Equal(t, int64(1_000), holderBalance(t, d, "BTC", ann).Available)
	require.Equal(t, int64(0), count(t, d, `SELECT count(*) FROM ledger_entries WHERE source_ref = 'broken-1'`))
	require.Equal(t, int64(0), count(t, d, `SELECT count(*) FROM ledger_accounts WHERE owner = 'cal'`))

	// Existing accounts: posted as without the flag, replayed, refused
	// when it does not fit.
	p, err := ledger.Post(ctx, d, leg("BTC", ann, bob, 100, "kept-1", true))
	require.NoError(t, err)
	require.False(t, p.Replayed)
	p, err = ledger.Post(ctx, d, leg("BTC", ann, bob, 100, "kept-1", true))
	require.NoError(t, err)
	require.True(t, p.Replayed)
	_, err = ledger.Post(ctx, d, leg("BTC", ann, bob, 5_000, "kept-2", true))
	var ife *ledger.InsufficientFundsError
	require.ErrorAs(t, err, &ife)
	require.Equal(t, ann.Available(), ife.Account)
	require.Equal(t, int64(900), holderBalance(t, d, "BTC", ann).Available)
	require.Equal(t, int64(1_100), holderBalance(t, d, "BTC", bob).Available)

	// Opposite two-leg transactions without LockAccounts: each commits or
	// is a detected deadlock (40P01) that changed nothing.
	const pairs = 8 // each deadlock takes the server's deadlock_timeout to find
	var wg sync.WaitGroup
	var mu sync.Mutex
	committed := map[bool]int64{}
	for i := 0; i < 2*pairs; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			from, to := ann, bob
			if i%2 == 1 {
				from, to = bob, ann
			}
			err := d.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				if _, err := ledger.Post(ctx, tx, leg("BTC", from, to, 3, fmt.Sprintf("x%d:0", i), true)); err != nil {
					return err
				}
				_, err := ledger.Post(ctx, tx, leg("BTC", to, from, 1, fmt.Sprintf("x%d:1", i), true))
				return err
			})
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "40P01" {
				return
			}
			if err != nil {
				t.Errorf("trade %d: %v", i, err)
				return
			}
			mu.Lock()
			committed[i%2 == 0]++
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	// Each committed transaction moved 2 net from its payer.
	annToBob, bobToAnn := committed[true], committed[false]
	require.Equal(t, 900-2*annToBob+2*bobToAnn, holderBalance(t, d, "BTC", ann).Available)
	require.Equal(t, 1_100+2*annToBob-2*bobToAnn, holderBalance(t, d, "BTC", bob).Available)
	requireInvariants(t, d)
}

// TestOppositeTransfersDoNotDeadlock: transfer legs between the same two
// users in both directions at once, each in its own transaction without
// LockAccounts, the users named so that the database's order and a
// byte-wise one disagree: no deadlock, and the balances are exact. A leg
// whose debit's account sorts first takes the two rows in the statement's
// own order (debit, then credit); one whose credit's does locks them in
// sorted order first (lk).
func TestOppositeTransfersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	d := newDB(t, 16)
	ann, bob := ledger.UserHolder("Zoe"), ledger.UserHolder("amy")
	credit(t, d, "BTC", "Zoe", 1_000_000, "pay-a")
	credit(t, d, "BTC", "amy", 1_000_000, "pay-b")
	const legs = 200
	var wg sync.WaitGroup
	errs := make(chan error, legs)
	for i := 0; i < legs; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			from, to := ann, bob
			if i%2 == 1 {
				from, to = bob, ann
			}
			errs <- d.RunInTx(context.Background(), nil, func(ctx context.Context, tx bun.Tx) error {
				if _, err := ledger.PostTransferLeg(ctx, tx, "BTC", from, to, 5, fmt.Sprintf("s%d", i), ""); err != nil {
					return err
				}
				return nil
			})
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int64(1_000_000), holderBalance(t, d, "BTC", ann).Available)
	require.Equal(t, int64(1_000_000), holderBalance(t, d, "BTC", bob).Available)
	requireInvariants(t, d)
}

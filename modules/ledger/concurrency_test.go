package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/platform/concurrencytest"
)

// TestConcurrentHolds: 50 holds at once against a balance that covers
// exactly 10 of them.
func TestConcurrentHolds(t *testing.T) {
	t.Parallel()
	d := newDB(t, 60)
	const amount, holders = 1_000, 50
	credit(t, d, "BTC", "zoe", 10*amount, "pay-1")

	errs := make([]error, holders)
	concurrencytest.AtOnce(holders, func(i int) {
		_, errs[i] = hold(t, d, "BTC", "zoe", amount, fmt.Sprintf("wd-%d", i))
	})

	var ok, short int
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ledger.ErrInsufficientFunds):
			short++
		default:
			t.Errorf("hold %d: unexpected error %v", i, err)
		}
	}
	require.Equal(t, 10, ok, "successful holds")
	require.Equal(t, 40, short, "insufficient-funds errors")
	avail, held := balance(t, d, "BTC", "zoe")
	require.Zero(t, avail)
	require.Equal(t, int64(10*amount), held)
	require.Equal(t, int64(10), count(t, d, `SELECT count(*) FROM ledger_entries WHERE kind = 'withdrawal_hold'`))
	// Never negative at any point: postings of one user account are written
	// under its row lock, so id order is the order they happened in, and
	// the running balance in that order never dips below zero.
	require.Equal(t, int64(0), count(t, d, `SELECT min(running) FROM (
  SELECT sum(p.amount) OVER (ORDER BY p.id) AS running
    FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id
   WHERE a.owner = 'zoe' AND a.kind = 'user_available') x`))
	requireInvariants(t, d)
}

// TestConcurrentSameFact: the same deposit payment credited by many
// workers at once is credited once.
func TestConcurrentSameFact(t *testing.T) {
	t.Parallel()
	d := newDB(t, 30)
	const workers = 20
	errs := make([]error, workers)
	posted := make([]ledger.Posted, workers)
	concurrencytest.AtOnce(workers, func(i int) {
		errs[i] = inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
			var err error
			posted[i], err = ledger.CreditDeposit(ctx, tx, "BTC", ledger.UserHolder("yan"), 777, "pay-same", "")
			return err
		})
	})
	firsts := 0
	for i, err := range errs {
		if err != nil {
			// Lost the race while the winner was committing: the caller
			// retries and then sees a replay.
			require.ErrorIs(t, err, ledger.ErrConcurrentPost, "worker %d", i)
			continue
		}
		if !posted[i].Replayed {
			firsts++
		}
	}
	require.Equal(t, 1, firsts, "exactly one worker posts the entry")
	avail, _ := balance(t, d, "BTC", "yan")
	require.Equal(t, int64(777), avail)
	require.Equal(t, int64(1), count(t, d, `SELECT count(*) FROM ledger_entries WHERE source_ref = 'pay-same'`))
	requireInvariants(t, d)
}

// TestConcurrentHoldAndRelease: holds and releases of one user's accounts
// in both directions at once neither deadlock nor drift (the accounts are
// locked in one order).
func TestConcurrentHoldAndRelease(t *testing.T) {
	t.Parallel()
	d := newDB(t, 20)
	ctx := context.Background()
	credit(t, d, "BTC", "xia", 100_000, "pay-1")
	const pairs = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*pairs)
	for i := range pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref := fmt.Sprintf("wd-%d", i)
			if _, err := hold(t, d, "BTC", "xia", 1_000, ref); err != nil {
				errs <- err
				return
			}
			_, err := ledger.ReleaseHold(ctx, d, "BTC", ledger.UserHolder("xia"), 1_000, ref, "")
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	avail, held := balance(t, d, "BTC", "xia")
	require.Equal(t, int64(100_000), avail)
	require.Zero(t, held)
	requireInvariants(t, d)
}

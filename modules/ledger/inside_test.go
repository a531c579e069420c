package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/platform/db"
)

// holderBalance returns a holder's available, held and reserved in asset.
func holderBalance(t testing.TB, d *bun.DB, asset string, h ledger.Holder) ledger.Balance {
	t.Helper()
	list, err := ledger.HolderBalances(context.Background(), d, h)
	require.NoError(t, err)
	for _, b := range list {
		if b.Asset == asset {
			return b
		}
	}
	t.Fatalf("%s has no %s balance", h, asset)
	return ledger.Balance{}
}

// TestMoneyMovesInside walks a transfer, an escrow hold captured into two
// accounts with the rest returned, and a void, checking every balance, the
// entries' postings, the replays and the refusals.
func TestMoneyMovesInside(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	buyer, seller := ledger.UserHolder("buyer"), ledger.UserHolder("seller")
	revenue, commission := ledger.PlatformHolder("revenue"), ledger.PlatformHolder("commission")
	credit(t, d, "BTC", "buyer", 10_000, "pay-1")

	post := func(fn func(ctx context.Context, tx bun.Tx) (ledger.Posted, error)) (ledger.Posted, error) {
		var p ledger.Posted
		err := inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
			var err error
			p, err = fn(ctx, tx)
			return err
		})
		return p, err
	}

	// A transfer leg creates the platform account by its first credit.
	p, err := post(func(ctx context.Context, tx bun.Tx) (ledger.Posted, error) {
		return ledger.PostTransferLeg(ctx, tx, "BTC", buyer, revenue, 1_000, "tr-1:0", "entry fee")
	})
	require.NoError(t, err)
	require.Equal(t, ledger.TransferEntry, p.Kind)
	require.Equal(t, buyer.Available(), p.Postings[0].Account)
	require.Equal(t, int64(-1_000), p.Postings[0].Amount)
	require.Equal(t, revenue.CreditAccount("tr-1:0"), p.Postings[1].Account)
	replay, err := post(func(ctx context.Context, tx bun.Tx) (ledger.Posted, error) {
		return ledger.PostTransferLeg(ctx, tx, "BTC", buyer, revenue, 1_000, "tr-1:0", "entry fee")
	})
	require.NoError(t, err)
	require.True(t, replay.Replayed)
	require.Equal(t, p.ID, replay.ID)

	// More than the buyer has: nothing moves, and the error names the account.
	_, err = post(func(ctx context.Context, tx bun.Tx) (ledger.Posted, error) {
		return ledger.PostTransferLeg(ctx, tx, "BTC", buyer, seller, 9_001, "tr-2:0", "")
	})
	var short *ledger.InsufficientFundsError
	require.ErrorAs(t, err, &short)
	require.Equal(t, buyer.Available(), short.Account)
	_, err = post(func(ctx context.Context, tx bun.Tx) (ledger.Posted, error) {
		return ledger.PostTransferLeg(ctx, tx, "BTC", buyer, buyer, 1, "tr-3:0", "")
	})
	require.ErrorIs(t, err, ledger.ErrInvalidEntry)

	// A hold reserves 6,000 of the buyer's 9,000; a withdrawal's hold can
	// then take only what is left available.
	_, err = post(func(ctx context.Context, tx bun.Tx) (ledger.Posted, error) {
		return ledger.PostEscrowHold(ctx, tx, "BTC", buyer, 6_000, "hold-1", "order 7")
	})
	require.NoError(t, err)
	require.Equal(t, ledger.Balance{Asset: "BTC", Decimals: 8, Available: 3_000, Reserved: 6_000}, holderBalance(t, d, "BTC", buyer))
	_, err = hold(t, d, "BTC", "buyer", 3_001, "wd-1")
	require.ErrorIs(t, err, ledger.ErrInsufficientFunds, "a withdrawal never spends reserved money")

	// Capture 5,000: 4,700 to the seller, 300 to the commission account;
	// the other 1,000 goes back at once.
	_, err = post(func(ctx context.Context, tx bun.Tx) (ledger.Posted, error) {
		return ledger.PostEscrowCapture(ctx, tx, "BTC", buyer, []ledger.CaptureLeg{{To: seller, Amount: 4_700}, {To: commission, Amount: 300}}, "hold-1", "")
	})
	require.NoError(t, err)
	_, err = post(func(ctx context.Context, tx bun.Tx) (ledger.Posted, error) {
		return ledger.PostEscrowRelease(ctx, tx, "BTC", buyer, 1_000, "hold-1", "")
	})
	require.NoError(t, err)
	require.Equal(t, ledger.Balance{Asset: "BTC", Decimals: 8, Available: 4_000}, holderBalance(t, d, "BTC", buyer))
	require.Equal(t, int64(4_700), holderBalance(t, d, "BTC", seller).Available)
	require.Equal(t, int64(300), holderBalance(t, d, "BTC", commission).Available)
	require.Equal(t, int64(1_000), holderBalance(t, d, "BTC", revenue).Available)

	// A capture may not pay the payer, nor more recipients than an entry holds.
	_, err = post(func(ctx context.Context, tx bun.Tx) (ledger.Posted, error) {
		return ledger.PostEscrowCapture(ctx, tx, "BTC", buyer, []ledger.CaptureLeg{{To: buyer, Amount: 1}}, "hold-2", "")
	})
	require.ErrorIs(t, err, ledger.ErrInvalidEntry)
	legs := make([]ledger.CaptureLeg, ledger.MaxCaptureLegs+1)
	for i := range legs {
		legs[i] = ledger.CaptureLeg{To: ledger.UserHolder(fmt.Sprint("u", i)), Amount: 1}
	}
	_, err = post(func(ctx context.Context, tx bun.Tx) (ledger.Posted, error) {
		return ledger.PostEscrowCapture(ctx, tx, "BTC", buyer, legs, "hold-2", "")
	})
	require.ErrorIs(t, err, ledger.ErrInvalidEntry)

	// A platform account pays a prize from its own balance, and cannot pay
	// more than it holds.
	_, err = post(func(ctx context.Context, tx bun.Tx) (ledger.Posted, error) {
		return ledger.PostTransferLeg(ctx, tx, "BTC", revenue, seller, 1_001, "tr-4:0", "")
	})
	require.ErrorAs(t, err, &short)
	require.Equal(t, revenue.Available(), short.Account)

	// The books: nothing left custody, and everything is owed to someone.
	tot := totals(t, d)["BTC"]
	require.Equal(t, int64(10_000), tot.Custody)
	require.Equal(t, int64(8_700), tot.UserObligations())
	require.Equal(t, int64(1_300), tot.PlatformObligations())
	require.Equal(t, tot.Custody, tot.Obligations())
	requireInvariants(t, d)
}

// TestOppositeTradesDoNotDeadlock: two-asset trades between the same two
// holders in both directions, the legs named in opposite orders, each
// transaction locking its accounts first with LockAccounts, and new
// accounts created by the trades themselves: none deadlocks, every trade
// commits, and the balances are exact.
func TestOppositeTradesDoNotDeadlock(t *testing.T) {
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
			// Even: ann pays bob BTC, bob pays ann USDT. Odd: the reverse,
			// USDT leg first. Every tenth also pays a pool not yet seen.
			from, to, first, second := ann, bob, "BTC", "USDT_TRC20"
			if i%2 == 1 {
				from, to, first, second = bob, ann, "USDT_TRC20", "BTC"
			}
			pool := ledger.PlatformHolder(fmt.Sprintf("pool-%d", i%10))
			errs <- db.RunInTx(context.Background(), d, func(ctx context.Context, tx bun.Tx) error {
				refs := []ledger.AccountRef{{Asset: first, Account: from.Available()}, {Asset: first, Account: to.Available()},
					{Asset: second, Account: to.Available()}, {Asset: second, Account: from.Available()}, {Asset: first, Account: pool.Available()}}
				if err := ledger.LockAccounts(ctx, tx, refs); err != nil {
					return err
				}
				if _, err := ledger.PostTransferLeg(ctx, tx, first, from, to, 10, fmt.Sprintf("t%d:0", i), ""); err != nil {
					return err
				}
				if _, err := ledger.PostTransferLeg(ctx, tx, second, to, from, 7, fmt.Sprintf("t%d:1", i), ""); err != nil {
					return err
				}
				_, err := ledger.PostTransferLeg(ctx, tx, first, from, pool, 1, fmt.Sprintf("t%d:2", i), "")
				return err
			})
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// Each direction ran 100 times: 10 one way and 7 back per trade, and 1
	// to a pool.
	require.Equal(t, int64(1_000_000-1_000-700-100), holderBalance(t, d, "BTC", ann).Available)
	require.Equal(t, int64(1_000_000+1_000+700), holderBalance(t, d, "BTC", bob).Available)
	require.Equal(t, int64(1_000_000+700+1_000), holderBalance(t, d, "USDT_TRC20", ann).Available)
	require.Equal(t, int64(1_000_000-700-1_000-100), holderBalance(t, d, "USDT_TRC20", bob).Available)
	require.Equal(t, int64(20), holderBalance(t, d, "BTC", ledger.PlatformHolder("pool-0")).Available)
	require.Equal(t, int64(20), holderBalance(t, d, "USDT_TRC20", ledger.PlatformHolder("pool-1")).Available)
	requireInvariants(t, d)
}

// TestPlatformAccountsUnderTheGuards: the database holds platform and
// escrow accounts to the rules of a user's: no balance without its
// postings, never negative, a well-formed name, and a materialized
// balance, whoever writes.
func TestPlatformAccountsUnderTheGuards(t *testing.T) {
	t.Parallel()
	runtime := newDB(t, 4)
	ctx := context.Background()
	credit(t, runtime, "BTC", "ann", 1_000, "pay-1")
	require.NoError(t, inTx(t, runtime, func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.PostTransferLeg(ctx, tx, "BTC", ledger.UserHolder("ann"), ledger.PlatformHolder("revenue"), 400, "tr-1:0", "")
		if err != nil {
			return err
		}
		_, err = ledger.PostEscrowHold(ctx, tx, "BTC", ledger.UserHolder("ann"), 100, "hold-1", "")
		return err
	}))
	for _, tc := range []struct {
		name, query, want string
	}{
		{"PlatformBalanceWithoutPostings", `UPDATE ledger_accounts SET balance = balance + 1 WHERE kind = 'platform_available'`, "postings"},
		{"EscrowBalanceWithoutPostings", `UPDATE ledger_accounts SET balance = 0 WHERE kind = 'user_escrow'`, "postings"},
		{"NegativePlatformBalance", `UPDATE ledger_accounts SET balance = -1 WHERE kind = 'platform_available'`, "ledger_accounts_balance_nonneg"},
		{"OpenedWithMoney", `INSERT INTO ledger_accounts (asset, kind, owner, balance) VALUES ('BTC', 'platform_available', 'prizes', 5)`, "postings"},
		{"BadName", `INSERT INTO ledger_accounts (asset, kind, owner, balance) VALUES ('BTC', 'platform_available', 'Prizes!', 0)`, "ledger_accounts_owner"},
		{"ShardOutOfRange", `INSERT INTO ledger_accounts (asset, kind, owner, balance) VALUES ('BTC', 'platform_available', 'revenue#64', 0)`, "ledger_accounts_owner"},
		{"ShardZeroSpelled", `INSERT INTO ledger_accounts (asset, kind, owner, balance) VALUES ('BTC', 'platform_available', 'revenue#0', 0)`, "ledger_accounts_owner"},
		{"ShardLeadingZero", `INSERT INTO ledger_accounts (asset, kind, owner, balance) VALUES ('BTC', 'platform_available', 'revenue#07', 0)`, "ledger_accounts_owner"},
		{"ShardOfAHold", `INSERT INTO ledger_accounts (asset, kind, owner, balance) VALUES ('BTC', 'platform_hold', 'revenue#1', 0)`, "ledger_accounts_owner"},
		{"NotMaterialized", `INSERT INTO ledger_accounts (asset, kind, owner) VALUES ('BTC', 'platform_escrow', 'prizes')`, "ledger_accounts_materialized"},
		{"RenamedAccount", `UPDATE ledger_accounts SET owner = 'other' WHERE kind = 'platform_available'`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := db.RunInTx(ctx, runtime, func(ctx context.Context, tx bun.Tx) error {
				_, err := tx.ExecContext(ctx, tc.query)
				return err
			})
			require.Error(t, err)
			if tc.want != "" {
				require.Contains(t, err.Error(), tc.want)
			}
		})
	}
	require.Equal(t, int64(400), holderBalance(t, runtime, "BTC", ledger.PlatformHolder("revenue")).Available)
	require.Equal(t, int64(100), holderBalance(t, runtime, "BTC", ledger.UserHolder("ann")).Reserved)
	requireInvariants(t, runtime)
}

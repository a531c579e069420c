package ledger_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
)

// createPlatformAccounts creates the platform accounts' rows, all their
// shards, in each asset before a test's workers start. The first credits
// of a new platform account create its shards, and two at once may meet a
// deadlock there, once (the service's transactions retry it: db.RunInTx);
// tests whose transactions fail on any deadlock, to show that none
// happens once the accounts exist, start from existing accounts.
func createPlatformAccounts(t testing.TB, d *bun.DB, assets []string, names ...string) {
	t.Helper()
	var refs []ledger.AccountRef
	for _, a := range assets {
		for _, n := range names {
			refs = append(refs, ledger.AccountRef{Asset: a, Account: ledger.PlatformHolder(n).Available()})
		}
	}
	require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error { return ledger.LockAccounts(ctx, tx, refs) }))
}

// TestPlatformShards credits a platform account through many transfer
// legs, which spread over its shards, then debits it: the balance, the
// list and the history read the account as one, a debit larger than shard
// 0 gathers the shards first, a debit larger than the whole balance is
// refused with nothing written, and a replay posts to the same shard.
func TestPlatformShards(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	ctx := context.Background()
	revenue := ledger.PlatformHolder("revenue")
	const legs, each = 200, 10
	for i := range 20 {
		credit(t, d, "BTC", fmt.Sprint("buyer-", i), 1_000, fmt.Sprint("pay-", i))
	}
	for i := range legs {
		require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.PostTransferLeg(ctx, tx, "BTC", ledger.UserHolder(fmt.Sprint("buyer-", i%20)), revenue, each, fmt.Sprintf("tr-%d:0", i), "fee")
			return err
		}))
	}
	// Every shard exists once the account does; the credits spread.
	require.Equal(t, int64(ledger.PlatformShards), count(t, d, `SELECT count(*) FROM ledger_accounts
  WHERE asset = 'BTC' AND kind = 'platform_available' AND (owner = 'revenue' OR owner LIKE 'revenue#%')`))
	require.Greater(t, count(t, d, `SELECT count(*) FROM ledger_accounts
  WHERE asset = 'BTC' AND kind = 'platform_available' AND owner LIKE 'revenue#%' AND balance > 0`), int64(30))
	require.Equal(t, int64(legs*each), holderBalance(t, d, "BTC", revenue).Available)

	// A replay posts to the same shard: the same entry, nothing more.
	var again ledger.Posted
	require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
		var err error
		again, err = ledger.PostTransferLeg(ctx, tx, "BTC", ledger.UserHolder("buyer-7"), revenue, each, "tr-7:0", "fee")
		return err
	}))
	require.True(t, again.Replayed)
	require.Equal(t, revenue.CreditAccount("tr-7:0"), again.Postings[1].Account)

	// More than the whole balance: refused, nothing written (no sweep).
	entries := count(t, d, `SELECT count(*) FROM ledger_entries`)
	err := inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.PostTransferLeg(ctx, tx, "BTC", revenue, ledger.UserHolder("winner"), legs*each+1, "prize-1:0", "prize")
		return err
	})
	var short *ledger.InsufficientFundsError
	require.ErrorAs(t, err, &short)
	require.Equal(t, revenue.Available(), short.Account)
	require.Equal(t, entries, count(t, d, `SELECT count(*) FROM ledger_entries`))

	// All of it: shard 0 holds a fraction, so the shards are gathered first.
	require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.PostTransferLeg(ctx, tx, "BTC", revenue, ledger.UserHolder("winner"), legs*each, "prize-2:0", "prize")
		return err
	}))
	require.Positive(t, count(t, d, `SELECT count(*) FROM ledger_entries WHERE kind = 'shard_sweep'`))
	require.Zero(t, count(t, d, `SELECT count(*) FROM ledger_accounts
  WHERE asset = 'BTC' AND kind = 'platform_available' AND (owner = 'revenue' OR owner LIKE 'revenue#%') AND balance <> 0`))
	require.Equal(t, int64(0), holderBalance(t, d, "BTC", revenue).Available)
	require.Equal(t, int64(legs*each), holderBalance(t, d, "BTC", ledger.UserHolder("winner")).Available)

	// The history: every credit and the debit, and no sweep.
	var all []ledger.Transaction
	for cursor := int64(0); ; {
		page, next, err := ledger.Transactions(ctx, d, ledger.TransactionsQuery{ExternalUserID: "revenue", Platform: true, Cursor: cursor, Limit: 50})
		require.NoError(t, err)
		all = append(all, page...)
		if next == nil {
			break
		}
		cursor = *next
	}
	require.Len(t, all, legs+1)
	var sum int64
	for _, tr := range all {
		require.Equal(t, ledger.TransferEntry, tr.Kind)
		require.Equal(t, ledger.PlatformAvailable, tr.Account)
		sum += tr.Amount
	}
	require.Zero(t, sum)

	// The list names the account once, with its whole balance.
	credit(t, d, "BTC", "buyer-0", 1_000, "pay-more")
	require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.PostTransferLeg(ctx, tx, "BTC", ledger.UserHolder("buyer-0"), revenue, 700, "tr-last:0", "")
		return err
	}))
	list, next, err := ledger.PlatformAccounts(ctx, d, "", 10)
	require.NoError(t, err)
	require.Nil(t, next)
	require.Len(t, list, 1)
	require.Equal(t, "revenue", list[0].Name)
	require.Equal(t, int64(700), list[0].Balances[0].Available)

	r := fullCheck(t, d)
	require.True(t, r.LedgerConsistent, "%+v", r)
	findings, err := ledger.CheckSweeps(ctx, d)
	require.NoError(t, err)
	require.Empty(t, findings)
	requireInvariants(t, d)
}

// TestSweepsAreChecked posts, as the runtime role may, shard_sweep entries
// that are no sweep (money from a user, or from another platform
// account's shard); the sweep check finds each one, and no real sweep.
func TestSweepsAreChecked(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	ctx := context.Background()
	credit(t, d, "BTC", "ann", 1_000, "pay-1")
	for i, to := range []string{"revenue", "prizes"} {
		require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.PostTransferLeg(ctx, tx, "BTC", ledger.UserHolder("ann"), ledger.PlatformHolder(to), 300, fmt.Sprintf("tr-%d:0", i), "")
			return err
		}))
	}
	shard := func(name, ref string) ledger.Account { return ledger.PlatformHolder(name).CreditAccount(ref) }
	for _, e := range []ledger.Entry{
		{Kind: ledger.ShardSweep, Asset: "BTC", SourceRef: "sweep:from-a-user", Lines: []ledger.Line{
			{Account: ledger.UserHolder("ann").Available(), Amount: -100}, {Account: ledger.PlatformHolder("revenue").Available(), Amount: 100}}},
		{Kind: ledger.ShardSweep, Asset: "BTC", SourceRef: "sweep:across", Lines: []ledger.Line{
			{Account: shard("prizes", "tr-1:0"), Amount: -100}, {Account: ledger.PlatformHolder("revenue").Available(), Amount: 100}}},
	} {
		require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.Post(ctx, tx, e)
			return err
		}))
	}
	findings, err := ledger.CheckSweeps(ctx, d)
	require.NoError(t, err)
	require.Len(t, findings, 2, "%v", findings)
	require.Contains(t, findings[0], "sweep:across")
	require.Contains(t, findings[1], "sweep:from-a-user")
	for _, f := range findings {
		require.True(t, ledger.IsSweepFinding(f), f)
	}
}

// TestLockAccountsWritesNothing: LockAccounts locks the rows it finds
// (another transaction cannot take them) without writing a new version of
// any (no update counted), a platform account's 64 rows included.
func TestLockAccountsWritesNothing(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	credit(t, d, "BTC", "ann", 1_000, "pay-1")
	createPlatformAccounts(t, d, []string{"BTC"}, "revenue")
	require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
		if err := ledger.LockAccounts(ctx, tx, []ledger.AccountRef{
			{Asset: "BTC", Account: ledger.UserHolder("ann").Available()},
			{Asset: "BTC", Account: ledger.PlatformHolder("revenue").Available()},
		}); err != nil {
			return err
		}
		var updated int64
		if err := tx.QueryRowContext(ctx, `SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'ledger_accounts'`).Scan(&updated); err != nil {
			return err
		}
		require.Zero(t, updated, "row versions written by LockAccounts")
		for _, owner := range []string{"ann", "revenue", "revenue#63"} {
			_, err := d.ExecContext(ctx, `SELECT 1 FROM ledger_accounts WHERE asset = 'BTC' AND owner = ? FOR UPDATE NOWAIT`, owner)
			require.ErrorContains(t, err, "55P03", "%s is locked", owner)
		}
		return nil
	}))
}

package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
)

// TestCaptureEscrow walks CaptureEscrow's one statement (a user payer)
// and its three (a platform payer): the two entries with their kinds,
// memos and postings, the escrow's balance_after posting by posting, a
// first credit that opens the seller's account and a platform account's
// shards, a capture of everything (no release), the replays, a mismatch,
// and an escrow that cannot cover both entries (nothing written).
func TestCaptureEscrow(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	ctx := context.Background()
	buyer, seller := ledger.UserHolder("buyer"), ledger.UserHolder("seller")
	commission, revenue := ledger.PlatformHolder("commission"), ledger.PlatformHolder("revenue")
	credit(t, d, "BTC", "buyer", 10_000, "pay-1")
	escrowHold := func(payer ledger.Holder, amount int64, ref string) {
		t.Helper()
		require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.PostEscrowHold(ctx, tx, "BTC", payer, amount, ref, "")
			return err
		}))
	}
	capture := func(payer ledger.Holder, legs []ledger.CaptureLeg, rest int64, ref string) (c ledger.Posted, r *ledger.Posted, err error) {
		t.Helper()
		err = inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
			var err error
			c, r, err = ledger.CaptureEscrow(ctx, tx, "BTC", payer, legs, rest, ref, "captured", "the rest")
			return err
		})
		return c, r, err
	}

	escrowHold(buyer, 6_000, "hold-1")
	escrowHold(buyer, 1_000, "hold-0") // another open hold in the same escrow
	legs := []ledger.CaptureLeg{{To: seller, Amount: 4_700}, {To: commission, Amount: 300}}
	c, r, err := capture(buyer, legs, 1_000, "hold-1")
	require.NoError(t, err)
	require.Equal(t, ledger.EscrowCapture, c.Kind)
	require.Equal(t, "captured", c.Memo)
	require.Equal(t, []ledger.Line{{Account: buyer.Escrow(), Amount: -5_000}, {Account: seller.Available(), Amount: 4_700},
		{Account: commission.CreditAccount("hold-1"), Amount: 300}}, lines(c))
	require.NotNil(t, r)
	require.Equal(t, ledger.EscrowRelease, r.Kind)
	require.Equal(t, "the rest", r.Memo)
	require.Greater(t, r.ID, c.ID)
	require.Equal(t, []ledger.Line{{Account: buyer.Escrow(), Amount: -1_000}, {Account: buyer.Available(), Amount: 1_000}}, lines(*r))
	require.Equal(t, ledger.Balance{Asset: "BTC", Decimals: 8, Available: 4_000, Reserved: 1_000}, holderBalance(t, d, "BTC", buyer))
	require.Equal(t, int64(4_700), holderBalance(t, d, "BTC", seller).Available)
	require.Equal(t, int64(300), holderBalance(t, d, "BTC", commission).Available)
	var shards int
	require.NoError(t, d.NewRaw(`SELECT count(*) FROM ledger_accounts WHERE asset = 'BTC' AND kind = 'platform_available' AND owner LIKE 'commission%'`).Scan(ctx, &shards))
	require.Equal(t, ledger.PlatformShards, shards, "the first credit of a platform account creates all its shards")
	// The escrow's chain: the two holds, then the capture leaving the
	// release's 1,000 and the other hold's, then the release.
	var afters []int64
	require.NoError(t, d.NewRaw(`SELECT p.balance_after FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id
		WHERE a.owner = 'buyer' AND a.kind = 'user_escrow' ORDER BY p.id`).Scan(ctx, &afters))
	require.Equal(t, []int64{6_000, 7_000, 2_000, 1_000}, afters)

	// Again: both replay, nothing moves.
	c2, r2, err := capture(buyer, legs, 1_000, "hold-1")
	require.NoError(t, err)
	require.True(t, c2.Replayed)
	require.Equal(t, c.ID, c2.ID)
	require.NotNil(t, r2)
	require.True(t, r2.Replayed)
	require.Equal(t, r.ID, r2.ID)
	require.Equal(t, int64(4_700), holderBalance(t, d, "BTC", seller).Available)
	_, _, err = capture(buyer, []ledger.CaptureLeg{{To: seller, Amount: 4_999}}, 1, "hold-1")
	require.ErrorIs(t, err, ledger.ErrReplayMismatch)

	// Everything captured: no release.
	escrowHold(buyer, 2_000, "hold-2")
	c, r, err = capture(buyer, []ledger.CaptureLeg{{To: seller, Amount: 2_000}}, 0, "hold-2")
	require.NoError(t, err)
	require.Nil(t, r)
	require.Len(t, c.Postings, 2)

	// The escrow holds 1,000 (hold-0): a capture and a release of 1,200
	// do not fit, and nothing is written.
	_, _, err = capture(buyer, []ledger.CaptureLeg{{To: seller, Amount: 1_100}}, 100, "hold-3")
	var short *ledger.InsufficientFundsError
	require.ErrorAs(t, err, &short)
	require.Equal(t, buyer.Escrow(), short.Account)
	require.Equal(t, int64(1_200), short.Amount)
	require.Equal(t, ledger.Balance{Asset: "BTC", Decimals: 8, Available: 2_000, Reserved: 1_000}, holderBalance(t, d, "BTC", buyer))

	// A platform payer's capture (three statements).
	require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.PostTransferLeg(ctx, tx, "BTC", buyer, revenue, 500, "tr-1:0", "")
		return err
	}))
	escrowHold(revenue, 400, "hold-4")
	c, r, err = capture(revenue, []ledger.CaptureLeg{{To: seller, Amount: 300}}, 100, "hold-4")
	require.NoError(t, err)
	require.NotNil(t, r)
	require.Equal(t, []ledger.Line{{Account: revenue.Escrow(), Amount: -100}, {Account: revenue.Available(), Amount: 100}}, lines(*r))
	require.Equal(t, ledger.Balance{Asset: "BTC", Decimals: 8, Available: 200}, holderBalance(t, d, "BTC", revenue))
	requireInvariants(t, d)
}

// lines are a posted entry's postings as lines.
func lines(p ledger.Posted) []ledger.Line {
	out := make([]ledger.Line, len(p.Postings))
	for i, ps := range p.Postings {
		out[i] = ledger.Line{Account: ps.Account, Amount: ps.Amount}
	}
	return out
}

// TestOppositeCapturesDoNotDeadlock: captures between the same two users
// in both directions at once, each paying the other and commission and
// returning a rest, in transactions that are not retried: none deadlocks
// (the one statement locks every account first, in the one order), every
// one commits, and the balances are exact.
func TestOppositeCapturesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	d := newDB(t, 16)
	ann, bob := ledger.UserHolder("ann"), ledger.UserHolder("bob")
	commission := ledger.PlatformHolder("commission")
	credit(t, d, "BTC", "ann", 1_000_000, "pay-a")
	credit(t, d, "BTC", "bob", 1_000_000, "pay-b")
	credit(t, d, "BTC", "carl", 1, "pay-c")
	// commission's shards exist (their creation by a first credit may
	// deadlock once: db.RunInTx retries it).
	require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.PostTransferLeg(ctx, tx, "BTC", ledger.UserHolder("carl"), commission, 1, "tr-1:0", "")
		return err
	}))
	const captures = 200
	for i := 0; i < captures; i++ {
		payer := ann
		if i%2 == 1 {
			payer = bob
		}
		require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.PostEscrowHold(ctx, tx, "BTC", payer, 100, fmt.Sprint("hold-", i), "")
			return err
		}))
	}
	var wg sync.WaitGroup
	errs := make(chan error, captures)
	for i := 0; i < captures; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			payer, seller := ann, bob
			if i%2 == 1 {
				payer, seller = bob, ann
			}
			// bun's RunInTx: a deadlock would fail, not be retried.
			errs <- d.RunInTx(context.Background(), nil, func(ctx context.Context, tx bun.Tx) error {
				_, _, err := ledger.CaptureEscrow(ctx, tx, "BTC", payer, []ledger.CaptureLeg{{To: seller, Amount: 90}, {To: commission, Amount: 5}},
					5, fmt.Sprint("hold-", i), "", "")
				return err
			})
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// 100 captures each way: each user paid 9,500 and received 9,000.
	for _, h := range []ledger.Holder{ann, bob} {
		require.Equal(t, ledger.Balance{Asset: "BTC", Decimals: 8, Available: 1_000_000 - 500}, holderBalance(t, d, "BTC", h))
	}
	require.Equal(t, int64(1_001), holderBalance(t, d, "BTC", commission).Available)
	requireInvariants(t, d)
}

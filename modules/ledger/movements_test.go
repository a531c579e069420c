package ledger_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"svc/modules/ledger"
	"svc/platform/fault"
)

func TestCreditDeposit(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	ctx := context.Background()

	p := credit(t, d, "BTC", "alice", 12345, "pay-1")
	require.False(t, p.Replayed)
	require.Equal(t, ledger.DepositCredit, p.Kind)
	require.Equal(t, "pay-1", p.SourceRef)
	require.Len(t, p.Postings, 2)
	require.Equal(t, ledger.User(ledger.UserAvailable, "alice"), p.Postings[0].Account)
	require.Equal(t, int64(12345), p.Postings[0].Amount)
	require.Equal(t, ledger.System(ledger.Custody), p.Postings[1].Account)
	require.Equal(t, int64(-12345), p.Postings[1].Amount)
	require.Less(t, p.Postings[0].ID, p.Postings[1].ID)

	avail, held := balance(t, d, "BTC", "alice")
	require.Equal(t, int64(12345), avail)
	require.Zero(t, held)
	tot := totals(t, d)["BTC"]
	require.Equal(t, int64(12345), tot.Custody, "custody is debit-normal: it grows with deposits")
	require.Equal(t, int64(12345), tot.UserObligations())

	t.Run("ReplayReturnsTheFirstEntry", func(t *testing.T) {
		again := credit(t, d, "BTC", "alice", 12345, "pay-1")
		require.True(t, again.Replayed)
		require.Equal(t, p.ID, again.ID)
		require.Equal(t, p.Postings[0].ID, again.Postings[0].ID)
		avail, _ := balance(t, d, "BTC", "alice")
		require.Equal(t, int64(12345), avail, "a replay changes nothing")
		require.Equal(t, int64(1), count(t, d, `SELECT count(*) FROM ledger_entries WHERE source_ref = 'pay-1'`))
	})
	t.Run("ReplayWithOtherAmountIsRefused", func(t *testing.T) {
		err := inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.CreditDeposit(ctx, tx, "BTC", ledger.UserHolder("alice"), 99, "pay-1", "")
			return err
		})
		require.ErrorIs(t, err, ledger.ErrReplayMismatch)
		avail, _ := balance(t, d, "BTC", "alice")
		require.Equal(t, int64(12345), avail)
	})
	t.Run("SameRefOtherKindIsAnotherFact", func(t *testing.T) {
		_, err := hold(t, d, "BTC", "alice", 5, "pay-1")
		require.NoError(t, err)
	})
	t.Run("BadAmounts", func(t *testing.T) {
		for _, amt := range []int64{0, -1} {
			_, err := ledger.CreditDeposit(ctx, d, "BTC", ledger.UserHolder("alice"), amt, "pay-bad", "")
			require.ErrorIs(t, err, ledger.ErrInvalidEntry)
		}
	})
	t.Run("UnknownAssetIsRefused", func(t *testing.T) {
		_, err := ledger.CreditDeposit(ctx, d, "DOGE", ledger.UserHolder("alice"), 1, "pay-doge", "")
		require.Error(t, err)
		require.Zero(t, count(t, d, `SELECT count(*) FROM ledger_accounts WHERE asset = 'DOGE'`))
	})
	requireInvariants(t, d)
}

func TestPlaceHold(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	credit(t, d, "BTC", "bob", 1000, "pay-1")

	p, err := hold(t, d, "BTC", "bob", 400, "wd-1")
	require.NoError(t, err)
	require.Equal(t, ledger.WithdrawalHold, p.Kind)
	require.Equal(t, []ledger.Posting{
		{ID: p.Postings[0].ID, EntryID: p.ID, Account: ledger.User(ledger.UserAvailable, "bob"), Amount: -400},
		{ID: p.Postings[1].ID, EntryID: p.ID, Account: ledger.User(ledger.UserHold, "bob"), Amount: 400},
	}, p.Postings)
	avail, held := balance(t, d, "BTC", "bob")
	require.Equal(t, int64(600), avail)
	require.Equal(t, int64(400), held)

	t.Run("InsufficientFundsWritesNothing", func(t *testing.T) {
		entries := count(t, d, `SELECT count(*) FROM ledger_entries`)
		_, err := hold(t, d, "BTC", "bob", 601, "wd-2")
		require.ErrorIs(t, err, ledger.ErrInsufficientFunds)
		require.Equal(t, fault.InsufficientFunds, fault.KindOf(err))
		var ife *ledger.InsufficientFundsError
		require.True(t, errors.As(err, &ife))
		require.Equal(t, ledger.User(ledger.UserAvailable, "bob"), ife.Account)
		require.Equal(t, int64(601), ife.Amount)
		require.Equal(t, entries, count(t, d, `SELECT count(*) FROM ledger_entries`))
		avail, held := balance(t, d, "BTC", "bob")
		require.Equal(t, int64(600), avail)
		require.Equal(t, int64(400), held)
	})
	t.Run("TransactionStaysUsableAfterInsufficientFunds", func(t *testing.T) {
		require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.PlaceHold(ctx, tx, "BTC", ledger.UserHolder("bob"), 10_000, "wd-3", "")
			require.ErrorIs(t, err, ledger.ErrInsufficientFunds)
			_, err = ledger.PlaceHold(ctx, tx, "BTC", ledger.UserHolder("bob"), 100, "wd-4", "")
			return err
		}))
		avail, held := balance(t, d, "BTC", "bob")
		require.Equal(t, int64(500), avail)
		require.Equal(t, int64(500), held)
	})
	t.Run("HeldFundsDoNotCount", func(t *testing.T) {
		_, err := hold(t, d, "BTC", "bob", 501, "wd-5")
		require.ErrorIs(t, err, ledger.ErrInsufficientFunds)
	})
	t.Run("UnknownUserHasNothing", func(t *testing.T) {
		_, err := hold(t, d, "BTC", "nobody", 1, "wd-6")
		require.ErrorIs(t, err, ledger.ErrInsufficientFunds)
		require.Zero(t, count(t, d, `SELECT count(*) FROM ledger_accounts WHERE owner = 'nobody'`))
	})
	t.Run("Replay", func(t *testing.T) {
		again, err := hold(t, d, "BTC", "bob", 400, "wd-1")
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, p.ID, again.ID)
		avail, held := balance(t, d, "BTC", "bob")
		require.Equal(t, int64(500), avail)
		require.Equal(t, int64(500), held)
	})
	t.Run("ReplayIsNotAnInsufficientFundsError", func(t *testing.T) {
		// Available is 500 now; the original hold of 400 still replays even
		// if available could no longer cover it.
		_, err := hold(t, d, "BTC", "bob", 500, "wd-drain")
		require.NoError(t, err)
		again, err := hold(t, d, "BTC", "bob", 400, "wd-1")
		require.NoError(t, err)
		require.True(t, again.Replayed)
	})
	requireInvariants(t, d)
}

func TestReleaseHold(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	ctx := context.Background()
	credit(t, d, "BTC", "carol", 1000, "pay-1")
	_, err := hold(t, d, "BTC", "carol", 700, "wd-1")
	require.NoError(t, err)

	for _, tc := range []struct {
		name, asset, user, ref string
		amount                 int64
		want                   error
	}{
		{"OtherAmount", "BTC", "carol", "wd-1", 699, ledger.ErrNoHold},
		{"OtherUser", "BTC", "dave", "wd-1", 700, ledger.ErrNoHold},
		{"OtherAsset", "BTC_LN", "carol", "wd-1", 700, ledger.ErrNoHold},
		{"NoSuchHold", "BTC", "carol", "wd-x", 700, ledger.ErrNoHold},
		{"ZeroAmount", "BTC", "carol", "wd-1", 0, ledger.ErrInvalidEntry},
	} {
		_, err := ledger.ReleaseHold(ctx, d, tc.asset, ledger.UserHolder(tc.user), tc.amount, tc.ref, "")
		require.ErrorIs(t, err, tc.want, tc.name)
	}

	p, err := ledger.ReleaseHold(ctx, d, "BTC", ledger.UserHolder("carol"), 700, "wd-1", "rejected")
	require.NoError(t, err)
	require.Equal(t, ledger.WithdrawalRelease, p.Kind)
	require.Equal(t, "rejected", p.Memo)
	avail, held := balance(t, d, "BTC", "carol")
	require.Equal(t, int64(1000), avail)
	require.Zero(t, held)

	again, err := ledger.ReleaseHold(ctx, d, "BTC", ledger.UserHolder("carol"), 700, "wd-1", "rejected")
	require.NoError(t, err)
	require.True(t, again.Replayed)
	avail, _ = balance(t, d, "BTC", "carol")
	require.Equal(t, int64(1000), avail, "releasing twice returns the money once")

	_, err = ledger.SettlePayout(ctx, d, ledger.Settlement{Asset: "BTC", ExternalUserID: "carol", SourceRef: "wd-1",
		Mode: ledger.FeeAbsorb, Gross: 700, Net: 700})
	require.ErrorIs(t, err, ledger.ErrHoldReleased, "a released hold cannot be paid out")
	requireInvariants(t, d)
}

func TestSettlePayout(t *testing.T) {
	t.Parallel()
	type want struct {
		custody, feeIncome, networkFees int64 // natural balances after settling (in flight is always 0)
		lines                           []ledger.Line
	}
	const deposit = 100_000
	hold := func(amt int64) ledger.Line {
		return ledger.Line{Account: ledger.User(ledger.UserHold, "erin"), Amount: amt}
	}
	sys := func(k ledger.AccountKind, amt int64) ledger.Line {
		return ledger.Line{Account: ledger.System(k), Amount: amt}
	}
	for _, tc := range []struct {
		name      string
		s         ledger.Settlement
		broadcast int64 // 0: never recorded as broadcast
		want      want
	}{
		{
			name: "DeductWithoutBroadcast",
			s:    ledger.Settlement{Mode: ledger.FeeDeduct, Gross: 10_000, Net: 9_000, ServiceFee: 1_000, NetworkFee: 800},
			want: want{custody: deposit - 9_800, feeIncome: 1_000, networkFees: 800,
				lines: []ledger.Line{hold(-10_000), sys(ledger.FeeIncome, 1_000), sys(ledger.NetworkFees, -800), sys(ledger.Custody, 9_800)}},
		},
		{
			name: "DeductBroadcastWithTheActualFee",
			s:    ledger.Settlement{Mode: ledger.FeeDeduct, Gross: 10_000, Net: 9_000, ServiceFee: 1_000, NetworkFee: 800},
			// custody +9_800 at broadcast; settlement only clears in-flight.
			broadcast: 9_800,
			want: want{custody: deposit - 9_800, feeIncome: 1_000, networkFees: 800,
				lines: []ledger.Line{hold(-10_000), sys(ledger.FeeIncome, 1_000), sys(ledger.NetworkFees, -800), sys(ledger.InFlight, 9_800)}},
		},
		{
			name: "DeductBroadcastEstimateAboveTheActualFee",
			s:    ledger.Settlement{Mode: ledger.FeeDeduct, Gross: 10_000, Net: 9_000, ServiceFee: 1_000, NetworkFee: 700},
			// 9_900 were recorded in flight; 9_700 actually left: 200 return to custody.
			broadcast: 9_900,
			want: want{custody: deposit - 9_700, feeIncome: 1_000, networkFees: 700,
				lines: []ledger.Line{hold(-10_000), sys(ledger.FeeIncome, 1_000), sys(ledger.NetworkFees, -700), sys(ledger.InFlight, 9_900), sys(ledger.Custody, -200)}},
		},
		{
			name: "AbsorbWithoutBroadcast",
			s:    ledger.Settlement{Mode: ledger.FeeAbsorb, Gross: 10_000, Net: 10_000, NetworkFee: 500},
			want: want{custody: deposit - 10_500, networkFees: 500,
				lines: []ledger.Line{hold(-10_000), sys(ledger.NetworkFees, -500), sys(ledger.Custody, 10_500)}},
		},
		{
			name:      "AbsorbBroadcastFeeBelowActual",
			s:         ledger.Settlement{Mode: ledger.FeeAbsorb, Gross: 10_000, Net: 10_000, NetworkFee: 600},
			broadcast: 10_500,
			want: want{custody: deposit - 10_600, networkFees: 600,
				lines: []ledger.Line{hold(-10_000), sys(ledger.NetworkFees, -600), sys(ledger.InFlight, 10_500), sys(ledger.Custody, 100)}},
		},
		{
			name: "DeductWithoutNetworkFee",
			s:    ledger.Settlement{Mode: ledger.FeeDeduct, Gross: 10_000, Net: 8_000, ServiceFee: 2_000},
			want: want{custody: deposit - 8_000, feeIncome: 2_000,
				lines: []ledger.Line{hold(-10_000), sys(ledger.FeeIncome, 2_000), sys(ledger.Custody, 8_000)}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newDB(t, 4)
			ctx := context.Background()
			credit(t, d, "BTC", "erin", deposit, "pay-1")
			_, err := ledger.PlaceHold(ctx, d, "BTC", ledger.UserHolder("erin"), tc.s.Gross, "wd-1", "")
			require.NoError(t, err)
			if tc.broadcast > 0 {
				b, err := ledger.RecordPayoutBroadcast(ctx, d, "BTC", tc.broadcast, "wd-1", "txid")
				require.NoError(t, err)
				require.Equal(t, []ledger.Line{sys(ledger.Custody, tc.broadcast), sys(ledger.InFlight, -tc.broadcast)}, linesOf(b))
				tot := totals(t, d)["BTC"]
				require.Equal(t, tc.broadcast, tot.InFlight)
				require.Equal(t, deposit-tc.broadcast, tot.Custody)
				_, held := balance(t, d, "BTC", "erin")
				require.Equal(t, tc.s.Gross, held, "the user's money stays held until the payout confirms")
			}
			s := tc.s
			s.Asset, s.ExternalUserID, s.SourceRef = "BTC", "erin", "wd-1"
			p, err := ledger.SettlePayout(ctx, d, s)
			require.NoError(t, err)
			require.Equal(t, ledger.PayoutSettle, p.Kind)
			require.Equal(t, tc.want.lines, linesOf(p))

			tot := totals(t, d)["BTC"]
			require.Equal(t, tc.want.custody, tot.Custody, "custody")
			require.Zero(t, tot.InFlight, "in flight")
			require.Equal(t, tc.want.feeIncome, tot.FeeIncome, "fee income")
			require.Equal(t, tc.want.networkFees, tot.NetworkFees, "network fees")
			avail, held := balance(t, d, "BTC", "erin")
			require.Equal(t, deposit-s.Gross, avail)
			require.Zero(t, held)
			// Double entry: what the wallet lost is what users lost plus the
			// service's fee result.
			require.Equal(t, s.Gross-tc.want.feeIncome+tc.want.networkFees, deposit-tc.want.custody)

			again, err := ledger.SettlePayout(ctx, d, s)
			require.NoError(t, err)
			require.True(t, again.Replayed)
			require.Equal(t, p.ID, again.ID)

			_, err = ledger.ReleaseHold(ctx, d, "BTC", ledger.UserHolder("erin"), s.Gross, "wd-1", "")
			require.ErrorIs(t, err, ledger.ErrHoldSettled, "a paid-out hold cannot be released")
			_, err = ledger.RecordPayoutBroadcast(ctx, d, "BTC", 1, "wd-1", "")
			if tc.broadcast == 0 {
				require.ErrorIs(t, err, ledger.ErrHoldSettled)
			} else {
				require.ErrorIs(t, err, ledger.ErrReplayMismatch)
			}
			requireInvariants(t, d)
		})
	}

	t.Run("Refusals", func(t *testing.T) {
		t.Parallel()
		d := newDB(t, 4)
		ctx := context.Background()
		credit(t, d, "BTC", "erin", deposit, "pay-1")
		_, err := ledger.PlaceHold(ctx, d, "BTC", ledger.UserHolder("erin"), 10_000, "wd-1", "")
		require.NoError(t, err)
		base := ledger.Settlement{Asset: "BTC", ExternalUserID: "erin", SourceRef: "wd-1", Mode: ledger.FeeDeduct,
			Gross: 10_000, Net: 9_000, ServiceFee: 1_000, NetworkFee: 100}
		for _, tc := range []struct {
			name string
			edit func(*ledger.Settlement)
			want error
		}{
			{"GrossNotTheHold", func(s *ledger.Settlement) { s.Gross, s.Net = 9_999, 8_999 }, ledger.ErrNoHold},
			{"OtherUser", func(s *ledger.Settlement) { s.ExternalUserID = "frank" }, ledger.ErrNoHold},
			{"NoHold", func(s *ledger.Settlement) { s.SourceRef = "wd-2" }, ledger.ErrNoHold},
			{"DeductFeeDoesNotAddUp", func(s *ledger.Settlement) { s.ServiceFee = 999 }, ledger.ErrInvalidEntry},
			{"AbsorbWithServiceFee", func(s *ledger.Settlement) { s.Mode = ledger.FeeAbsorb; s.Net = 10_000 }, ledger.ErrInvalidEntry},
			{"AbsorbNetBelowGross", func(s *ledger.Settlement) { s.Mode = ledger.FeeAbsorb; s.ServiceFee = 0 }, ledger.ErrInvalidEntry},
			{"NegativeNetworkFee", func(s *ledger.Settlement) { s.NetworkFee = -1 }, ledger.ErrInvalidEntry},
			{"UnknownMode", func(s *ledger.Settlement) { s.Mode = "split" }, ledger.ErrInvalidEntry},
		} {
			s := base
			tc.edit(&s)
			_, err := ledger.SettlePayout(ctx, d, s)
			require.ErrorIs(t, err, tc.want, tc.name)
		}
		_, err = ledger.RecordPayoutBroadcast(ctx, d, "BTC", 9_100, "wd-none", "")
		require.ErrorIs(t, err, ledger.ErrNoHold)
		_, err = ledger.RecordPayoutBroadcast(ctx, d, "USDT_TRC20", 9_100, "wd-1", "")
		require.ErrorIs(t, err, ledger.ErrNoHold)
		_, err = ledger.RecordPayoutBroadcast(ctx, d, "BTC", 0, "wd-1", "")
		require.ErrorIs(t, err, ledger.ErrInvalidEntry)
		_, held := balance(t, d, "BTC", "erin")
		require.Equal(t, int64(10_000), held)
		requireInvariants(t, d)
	})
}

func linesOf(p ledger.Posted) []ledger.Line {
	out := make([]ledger.Line, len(p.Postings))
	for i, ps := range p.Postings {
		out[i] = ledger.Line{Account: ps.Account, Amount: ps.Amount}
	}
	return out
}

func TestCorrect(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	ctx := context.Background()
	credit(t, d, "BTC", "gina", 1_000, "pay-1")
	credit(t, d, "BTC", "hank", 50, "pay-2")
	avail := func(u string, amt int64) ledger.Line {
		return ledger.Line{Account: ledger.User(ledger.UserAvailable, u), Amount: amt}
	}

	// A payment credited to the wrong user moves to the right one.
	p, err := ledger.Correct(ctx, d, "BTC", []ledger.Line{avail("gina", -300), avail("hank", 300)}, "corr-1", "pay-1 belonged partly to hank")
	require.NoError(t, err)
	require.Equal(t, ledger.Correction, p.Kind)
	a, _ := balance(t, d, "BTC", "gina")
	require.Equal(t, int64(700), a)
	a, _ = balance(t, d, "BTC", "hank")
	require.Equal(t, int64(350), a)

	t.Run("NeedsAMemo", func(t *testing.T) {
		_, err := ledger.Correct(ctx, d, "BTC", []ledger.Line{avail("gina", -1), avail("hank", 1)}, "corr-2", "")
		require.ErrorIs(t, err, ledger.ErrInvalidEntry)
	})
	t.Run("CannotOverdraw", func(t *testing.T) {
		_, err := ledger.Correct(ctx, d, "BTC", []ledger.Line{avail("hank", -351), {Account: ledger.System(ledger.Suspense), Amount: 351}}, "corr-3", "reverse")
		require.ErrorIs(t, err, ledger.ErrInsufficientFunds)
	})
	t.Run("PartialDebitAbortsTheStatement", func(t *testing.T) {
		// gina can cover her debit, hank cannot: the first guarded update
		// succeeds, the second does not, and the database refuses the whole
		// statement rather than keep half of it.
		err := inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.Correct(ctx, tx, "BTC", []ledger.Line{avail("gina", -100), avail("hank", -400),
				{Account: ledger.System(ledger.Suspense), Amount: 500}}, "corr-4", "both")
			return err
		})
		require.ErrorIs(t, err, ledger.ErrInsufficientFunds)
		var ife *ledger.InsufficientFundsError
		require.True(t, errors.As(err, &ife))
		require.Equal(t, ledger.User(ledger.UserAvailable, "hank"), ife.Account)
		a, _ := balance(t, d, "BTC", "gina")
		require.Equal(t, int64(700), a)
		a, _ = balance(t, d, "BTC", "hank")
		require.Equal(t, int64(350), a)
	})
	t.Run("TwoDebitsThatFit", func(t *testing.T) {
		_, err := ledger.Correct(ctx, d, "BTC", []ledger.Line{avail("gina", -100), avail("hank", -50),
			{Account: ledger.System(ledger.Suspense), Amount: 150}}, "corr-5", "both fit")
		require.NoError(t, err)
		require.Equal(t, int64(150), totals(t, d)["BTC"].Suspense)
	})
	requireInvariants(t, d)
}

// TestSettleBroadcastPayout: the broadcast and the settlement under one
// lock and one read post the same two entries as RecordPayoutBroadcast
// then SettlePayout, replay as they do, and refuse what they refuse (a
// released hold: nothing of either is kept).
func TestSettleBroadcastPayout(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	ctx := context.Background()
	credit(t, d, "BTC", "erin", 100_000, "pay-1")
	s := ledger.Settlement{Asset: "BTC", ExternalUserID: "erin", Mode: ledger.FeeDeduct, Gross: 10_000, Net: 9_000, ServiceFee: 1_000, NetworkFee: 700}
	for _, ref := range []string{"wd-two", "wd-one"} {
		_, err := ledger.PlaceHold(ctx, d, "BTC", ledger.UserHolder("erin"), s.Gross, ref, "")
		require.NoError(t, err)
	}
	two, one := s, s
	two.SourceRef, one.SourceRef = "wd-two", "wd-one"
	b2, err := ledger.RecordPayoutBroadcast(ctx, d, "BTC", 9_700, two.SourceRef, "txid")
	require.NoError(t, err)
	s2, err := ledger.SettlePayout(ctx, d, two)
	require.NoError(t, err)
	b1, s1, err := ledger.SettleBroadcastPayout(ctx, d, 9_700, "txid", one)
	require.NoError(t, err)
	require.Equal(t, linesOf(b2), linesOf(b1))
	require.Equal(t, linesOf(s2), linesOf(s1))
	require.Equal(t, ledger.PayoutBroadcast, b1.Kind)
	require.Equal(t, ledger.PayoutSettle, s1.Kind)

	rb, rs, err := ledger.SettleBroadcastPayout(ctx, d, 9_700, "txid", one)
	require.NoError(t, err)
	require.True(t, rb.Replayed)
	require.True(t, rs.Replayed)
	require.Equal(t, b1.ID, rb.ID)
	require.Equal(t, s1.ID, rs.ID)

	released := s
	released.SourceRef = "wd-released"
	_, err = ledger.PlaceHold(ctx, d, "BTC", ledger.UserHolder("erin"), s.Gross, released.SourceRef, "")
	require.NoError(t, err)
	_, err = ledger.ReleaseHold(ctx, d, "BTC", ledger.UserHolder("erin"), s.Gross, released.SourceRef, "")
	require.NoError(t, err)
	_, _, err = ledger.SettleBroadcastPayout(ctx, d, 9_700, "txid", released)
	require.ErrorIs(t, err, ledger.ErrHoldReleased)
	n, err := d.NewSelect().Table("ledger_entries").Where("source_ref = ? AND kind IN ('payout_broadcast', 'payout_settle')", released.SourceRef).Count(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing of either entry is kept")
	_, _, err = ledger.SettleBroadcastPayout(ctx, d, 9_700, "txid", ledger.Settlement{Asset: "BTC", ExternalUserID: "erin", SourceRef: "wd-none",
		Mode: ledger.FeeDeduct, Gross: 10_000, Net: 9_000, ServiceFee: 1_000})
	require.ErrorIs(t, err, ledger.ErrNoHold)
	requireInvariants(t, d)
}

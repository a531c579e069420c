package ledger_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/uptrace/bun"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/ledger"
)

func TestBalancesHTTP(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()
	d := e.App.DB.Bun

	t.Run("UnknownUserGetsZeros", func(t *testing.T) {
		r := e.Get("/v1/users/never-seen/balances")
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var b ledger.BalancesView
		r.JSON(t, &b)
		require.Equal(t, "never-seen", b.ExternalUserID)
		require.Len(t, b.Balances, 1, "only BTC is enabled")
		require.Equal(t, "BTC", b.Balances[0].Asset)
		require.Equal(t, "0.00000000", b.Balances[0].Available)
		require.Equal(t, "0.00000000", b.Balances[0].Held)
		require.Equal(t, "0.00000000", b.Balances[0].Total)
	})

	user := "user/42 ü" // needs percent-encoding in the path
	credit(t, d, "BTC", user, 150_000_000, "pay-1")
	_, err := ledger.PlaceHold(ctx, d, "BTC", ledger.UserHolder(user), 12_345, "wd-1", "")
	require.NoError(t, err)
	credit(t, d, "USDT_TRC20", user, 2_500_000, "pay-2")

	get := func() ledger.BalancesView {
		r := e.Get("/v1/users/" + url.PathEscape(user) + "/balances")
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var b ledger.BalancesView
		r.JSON(t, &b)
		return b
	}
	b := get()
	require.Equal(t, user, b.ExternalUserID)
	require.Len(t, b.Balances, 2, "USDT_TRC20 is disabled, but the user's money in it is listed")
	require.Equal(t, "BTC", b.Balances[0].Asset)
	require.Equal(t, "1.49987655", b.Balances[0].Available)
	require.Equal(t, "0.00012345", b.Balances[0].Held)
	require.Equal(t, "1.50000000", b.Balances[0].Total)
	require.Equal(t, "USDT_TRC20", b.Balances[1].Asset)
	require.Equal(t, "2.500000", b.Balances[1].Available, "six decimals for USDT")
	require.Equal(t, "0.000000", b.Balances[1].Held)

	// Discovery turns BTC off (one empty answer from the processor): the
	// money does not disappear from the answer.
	_, err = (&asset.Store{DB: d, Now: e.App.Clock.Now}).SetEnabled(ctx, asset.BTC, false)
	require.NoError(t, err)
	b = get()
	require.Len(t, b.Balances, 2)
	require.Equal(t, "1.50000000", b.Balances[0].Total)
	_, err = (&asset.Store{DB: d, Now: e.App.Clock.Now}).SetEnabled(ctx, asset.BTC, true)
	require.NoError(t, err)
	// An enabled asset the user never touched is listed with zeros.
	_, err = (&asset.Store{DB: d, Now: e.App.Clock.Now}).SetEnabled(ctx, asset.BTCLN, true)
	require.NoError(t, err)
	b = get()
	require.Len(t, b.Balances, 3)
	require.Equal(t, "BTC_LN", b.Balances[1].Asset)
	require.Equal(t, "0.00000000", b.Balances[1].Total)

	t.Run("TooLongUserID", func(t *testing.T) {
		r := e.Get("/v1/users/" + strings.Repeat("x", 256) + "/balances")
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
		require.Contains(t, string(r.Body), `"loc":["path","external_user_id"]`)
		r = e.Get("/v1/users/" + strings.Repeat("é", 255) + "/balances")
		require.Equal(t, http.StatusOK, r.Status, "255 characters are fine even when they are more bytes")
	})
	t.Run("UnstorableUserID", func(t *testing.T) {
		for _, id := range []string{"a%00b", "%FF%FE"} {
			r := e.Get("/v1/users/" + id + "/balances")
			require.Equal(t, http.StatusUnprocessableEntity, r.Status, id)
			require.Contains(t, string(r.Body), `"loc":["path","external_user_id"]`)
		}
	})
	t.Run("NeedsAKey", func(t *testing.T) {
		r := e.Do(apptest.Req{Method: "GET", Path: "/v1/users/x/balances", Key: "-"})
		require.Equal(t, http.StatusUnauthorized, r.Status)
	})
}

func TestTransactionsHTTP(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ctx := context.Background()
	d := e.App.DB.Bun
	const user = "tx-user"

	// 5 deposits, a hold and its release, a USDT deposit: 10 postings.
	for i := range 5 {
		credit(t, d, "BTC", user, int64(1_000*(i+1)), fmt.Sprintf("pay-%d", i))
	}
	_, err := ledger.PlaceHold(ctx, d, "BTC", ledger.UserHolder(user), 2_500, "wd-1", "")
	require.NoError(t, err)
	_, err = ledger.ReleaseHold(ctx, d, "BTC", ledger.UserHolder(user), 2_500, "wd-1", "rejected by operator")
	require.NoError(t, err)
	credit(t, d, "USDT_TRC20", user, 1_500_000, "pay-usdt")
	// Someone else's postings never show.
	credit(t, d, "BTC", "other", 9, "pay-other")

	list := func(query string) ledger.TransactionsView {
		t.Helper()
		r := e.Get("/v1/users/" + user + "/transactions" + query)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var b ledger.TransactionsView
		r.JSON(t, &b)
		return b
	}

	all := list("")
	require.Len(t, all.Transactions, 10)
	require.Nil(t, all.NextCursor)
	for i := 1; i < len(all.Transactions); i++ {
		require.Greater(t, all.Transactions[i-1].PostingID, all.Transactions[i].PostingID, "newest first")
	}
	usdt := all.Transactions[0]
	require.Equal(t, "deposit_credit", usdt.Kind)
	require.Equal(t, "USDT_TRC20", usdt.Asset)
	require.Equal(t, "user_available", usdt.Account)
	require.Equal(t, "1.500000", usdt.Amount)
	require.Equal(t, "credit", usdt.Direction)
	require.Equal(t, "pay-usdt", *usdt.SourceRef)
	require.Nil(t, usdt.Memo)
	require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$`, usdt.CreatedAt)

	// The release: hold debited, available credited, one entry.
	rel1, rel2 := all.Transactions[1], all.Transactions[2]
	require.Equal(t, rel1.EntryID, rel2.EntryID)
	require.Equal(t, "withdrawal_release", rel1.Kind)
	require.Equal(t, "rejected by operator", *rel1.Memo)
	got := map[string]string{rel1.Account: rel1.Direction + " " + rel1.Amount, rel2.Account: rel2.Direction + " " + rel2.Amount}
	require.Equal(t, map[string]string{"user_hold": "debit 0.00002500", "user_available": "credit 0.00002500"}, got)
	// The hold reads negative on available.
	hold := map[string]string{}
	for _, x := range all.Transactions[3:5] {
		require.Equal(t, "withdrawal_hold", x.Kind)
		hold[x.Account] = x.Direction
	}
	require.Equal(t, map[string]string{"user_available": "debit", "user_hold": "credit"}, hold)

	t.Run("Pages", func(t *testing.T) {
		p1 := list("?limit=4")
		require.Len(t, p1.Transactions, 4)
		require.NotNil(t, p1.NextCursor)
		require.Equal(t, p1.Transactions[3].PostingID, *p1.NextCursor)
		p2 := list(fmt.Sprintf("?limit=4&cursor=%d", *p1.NextCursor))
		require.Len(t, p2.Transactions, 4)
		require.Equal(t, all.Transactions[4].PostingID, p2.Transactions[0].PostingID)

		// New postings arrive: the next page is still the one it was.
		credit(t, d, "BTC", user, 1, "pay-late")
		again := list(fmt.Sprintf("?limit=4&cursor=%d", *p1.NextCursor))
		require.Equal(t, p2, again)

		p3 := list(fmt.Sprintf("?limit=4&cursor=%d", *p2.NextCursor))
		require.Len(t, p3.Transactions, 2)
		require.Nil(t, p3.NextCursor, "the last page")
		exact := list(fmt.Sprintf("?limit=2&cursor=%d", *p2.NextCursor))
		require.Len(t, exact.Transactions, 2)
		require.Nil(t, exact.NextCursor, "a last page that is exactly full has no next page either")
	})
	t.Run("AssetFilter", func(t *testing.T) {
		b := list("?asset=USDT_TRC20")
		require.Len(t, b.Transactions, 1)
		require.Equal(t, "pay-usdt", *b.Transactions[0].SourceRef)
		b = list("?asset=BTC_LN")
		require.Empty(t, b.Transactions)
		require.NotNil(t, b.Transactions, "an empty page is [], not null")
	})
	t.Run("UnknownUser", func(t *testing.T) {
		b := list("")
		require.NotEmpty(t, b.Transactions)
		r := e.Get("/v1/users/nobody/transactions")
		require.Equal(t, http.StatusOK, r.Status)
		require.JSONEq(t, `{"transactions":[],"next_cursor":null}`, string(r.Body))
	})
	t.Run("UnknownAsset", func(t *testing.T) {
		r := e.Get("/v1/users/" + user + "/transactions?asset=DOGE")
		require.Equal(t, http.StatusNotFound, r.Status)
		require.JSONEq(t, `{"detail":"unknown asset"}`, string(r.Body))
	})
	t.Run("BadQueries", func(t *testing.T) {
		for _, tc := range []struct{ query, loc string }{
			{"?limit=0", "limit"},
			{"?limit=201", "limit"},
			{"?limit=abc", "limit"},
			{"?limit=", "limit"},
			{"?cursor=0", "cursor"},
			{"?cursor=-5", "cursor"},
			{"?cursor=1.5", "cursor"},
			{"?cursor=99999999999999999999", "cursor"},
			{"?asset=", "asset"},
			{"?asset=" + strings.Repeat("A", 33), "asset"},
			{"?asset=BT%00C", "asset"},
		} {
			r := e.Get("/v1/users/" + user + "/transactions" + tc.query)
			require.Equal(t, http.StatusUnprocessableEntity, r.Status, tc.query)
			var body struct {
				Detail []struct {
					Loc  []any  `json:"loc"`
					Type string `json:"type"`
				} `json:"detail"`
			}
			r.JSON(t, &body)
			require.Len(t, body.Detail, 1, tc.query)
			require.Equal(t, []any{"query", tc.loc}, body.Detail[0].Loc, tc.query)
		}
		r := e.Get("/v1/users/" + user + "/transactions?limit=200")
		require.Equal(t, http.StatusOK, r.Status, "200 is the maximum")

		r = e.Get("/v1/users/" + strings.Repeat("u", 256) + "/transactions?limit=0&cursor=x&asset=")
		require.Equal(t, http.StatusUnprocessableEntity, r.Status)
		var body struct {
			Detail []struct {
				Loc []any `json:"loc"`
			} `json:"detail"`
		}
		r.JSON(t, &body)
		var locs [][]any
		for _, d := range body.Detail {
			locs = append(locs, d.Loc)
		}
		require.Equal(t, [][]any{{"path", "external_user_id"}, {"query", "limit"}, {"query", "cursor"}, {"query", "asset"}}, locs,
			"every bad parameter is reported at once")
	})
}

// TestPlatformAccountsHTTP: a platform account's balances and history read
// as a user's do, the list pages by name, and a reserved amount shows in
// both the payer's balance and its total.
func TestPlatformAccountsHTTP(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	d := e.App.DB.Bun
	credit(t, d, "BTC", "ann", 10_000, "pay-1")
	ann := ledger.UserHolder("ann")
	for i, name := range []string{"revenue", "pool:weekly", "commission"} {
		require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
			_, err := ledger.PostTransferLeg(ctx, tx, "BTC", ann, ledger.PlatformHolder(name), int64(100*(i+1)), fmt.Sprintf("tr-%d:0", i), "")
			return err
		}))
	}
	require.NoError(t, inTx(t, d, func(ctx context.Context, tx bun.Tx) error {
		_, err := ledger.PostEscrowHold(ctx, tx, "BTC", ann, 1_000, "hold-1", "")
		return err
	}))

	r := e.Get("/v1/users/ann/balances")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var ub ledger.BalancesView
	r.JSON(t, &ub)
	require.Equal(t, ledger.BalanceView{Asset: "BTC", Available: "0.00008400", Held: "0.00000000", Reserved: "0.00001000", Total: "0.00009400"}, ub.Balances[0])

	r = e.Get("/v1/platform-accounts/pool:weekly/balances")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var pb ledger.BalancesView
	r.JSON(t, &pb)
	require.Equal(t, "pool:weekly", pb.PlatformAccount)
	require.Equal(t, "0.00000200", pb.Balances[0].Available)
	r = e.Get("/v1/platform-accounts/never-credited/balances")
	require.Equal(t, http.StatusOK, r.Status)
	r = e.Get("/v1/platform-accounts/Not%20A%20Name/balances")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))

	r = e.Get("/v1/platform-accounts/revenue/transactions")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var tx ledger.TransactionsView
	r.JSON(t, &tx)
	require.Len(t, tx.Transactions, 1)
	require.Equal(t, "transfer", tx.Transactions[0].Kind)
	require.Equal(t, "platform_available", tx.Transactions[0].Account)
	require.Equal(t, "credit", tx.Transactions[0].Direction)
	require.Equal(t, "tr-0:0", *tx.Transactions[0].SourceRef)

	// The list, two at a time, by name.
	var names []string
	cursor := ""
	for {
		r = e.Get("/v1/platform-accounts?limit=2" + cursor)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var page ledger.PlatformAccountsView
		r.JSON(t, &page)
		for _, p := range page.PlatformAccounts {
			names = append(names, p.PlatformAccount)
			require.Len(t, p.Balances, 1)
		}
		if page.NextCursor == nil {
			break
		}
		cursor = "&cursor=" + url.QueryEscape(*page.NextCursor)
	}
	require.Equal(t, []string{"commission", "pool:weekly", "revenue"}, names)
	r = e.Get("/v1/platform-accounts?limit=2&colour=red")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "a closed query refuses an unknown parameter")
}

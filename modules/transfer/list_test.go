package transfer_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/ledger"
	"svc/modules/transfer"
)

// page reads one page of an account's list.
func (e *env) page(t testing.TB, path string) transfer.ListView {
	t.Helper()
	r := e.Get(path)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var l transfer.ListView
	r.JSON(t, &l)
	return l
}

// walk reads every page of a list, limit at a time, and returns the ids;
// after the first page it runs between (a transfer created then is on no
// later page).
func (e *env) walk(t testing.TB, path string, limit int, between func()) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for n := 0; ; n++ {
		l := e.page(t, path+"?limit="+strconv.Itoa(limit)+cursor)
		require.LessOrEqual(t, len(l.Transfers), limit)
		for _, v := range l.Transfers {
			ids = append(ids, v.TransferID)
		}
		if n == 0 && between != nil {
			between()
		}
		if l.NextCursor == nil {
			return ids
		}
		cursor = "&cursor=" + *l.NextCursor
	}
}

// TestLists: a user's and a platform account's lists hold every transfer
// with a leg from or to the account, once, newest first, in keyset pages
// that do not shift under inserts; a bad cursor or one of another account
// is 422; an account never seen has an empty list; an unknown transfer
// is 404.
func TestLists(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTC, 1_000_000)
	e.fund(t, "other", asset.BTC, 1_000_000)
	var mine, pool []string
	for i := 0; i < 7; i++ {
		// u pays the pool; the pool pays u back in a two-leg transfer that
		// names u twice; other's transfers are not u's.
		a := e.create(t, body{Legs: []leg{l("u", "platform:pool", asset.BTC, 100)}})
		b := e.create(t, body{Legs: []leg{l("platform:pool", "u", asset.BTC, 10), l("u", "other", asset.BTC, 5)}})
		e.create(t, body{Legs: []leg{l("other", "x", asset.BTC, 1)}})
		mine = append(mine, a.TransferID, b.TransferID)
		pool = append(pool, a.TransferID, b.TransferID)
	}
	reverse := func(s []string) []string {
		out := make([]string, len(s))
		for i, v := range s {
			out[len(s)-1-i] = v
		}
		return out
	}
	got := e.walk(t, "/v1/users/u/transfers", 3, func() {
		e.create(t, body{Legs: []leg{l("u", "other", asset.BTC, 1)}})
	})
	require.Equal(t, reverse(mine), got)
	require.Equal(t, reverse(pool), e.walk(t, "/v1/platform-accounts/pool/transfers", 4, nil))
	require.Len(t, e.walk(t, "/v1/users/other/transfers", 100, nil), 7+7+1)
	first := e.page(t, "/v1/users/u/transfers")
	require.Len(t, first.Transfers, 15)
	require.Nil(t, first.NextCursor)
	require.Equal(t, e.get(t, first.Transfers[1].TransferID), first.Transfers[1])

	require.JSONEq(t, `{"transfers":[],"next_cursor":null}`, string(e.Get("/v1/users/nobody/transfers").Body))
	require.JSONEq(t, `{"transfers":[],"next_cursor":null}`, string(e.Get("/v1/platform-accounts/nothing/transfers").Body))
	// The user u is not the platform account u.
	require.JSONEq(t, `{"transfers":[],"next_cursor":null}`, string(e.Get("/v1/platform-accounts/u/transfers").Body))

	for _, path := range []string{
		"/v1/users/u/transfers?cursor=nope",
		"/v1/users/u/transfers?limit=0",
		"/v1/users/u/transfers?limit=101",
		"/v1/users/x/transfers?cursor=" + mine[0],                           // not one of x's
		"/v1/users/u/transfers?cursor=01a20000-0000-7000-8000-000000000000", // no such transfer
		"/v1/platform-accounts/Pool/transfers",
	} {
		require.Equal(t, http.StatusUnprocessableEntity, e.Get(path).Status, path)
	}
	require.Equal(t, http.StatusNotFound, e.Get("/v1/transfers/01a20000-0000-7000-8000-000000000000").Status)
	require.Equal(t, http.StatusNotFound, e.Get("/v1/transfers/nope").Status)
}

// TestCheckFindsAnEntryWithoutItsLeg: a transfer entry posted as the
// service's own role could, with no transfer behind it, is reported by the
// transfers' check and makes the ledger check inconsistent; a leg whose
// entry is missing is reported too.
func TestCheckFindsAnEntryWithoutItsLeg(t *testing.T) {
	t.Parallel()
	e := setupWithoutBooks(t)
	ctx := context.Background()
	e.fund(t, "a", asset.BTC, 1_000)
	v := e.create(t, body{Legs: []leg{l("a", "b", asset.BTC, 100)}})
	found, err := transfer.CheckLegs(ctx, e.App.DB.Bun)
	require.NoError(t, err)
	require.Empty(t, found)

	// The runtime role (the service's connection) posts a transfer entry
	// that no leg asked for.
	_, err = ledger.PostTransferLeg(ctx, e.App.DB.Bun, asset.BTC, holder("a"), holder("mallory"), 300, "forged:0", "")
	require.NoError(t, err)
	found, err = transfer.CheckLegs(ctx, e.App.DB.Bun)
	require.NoError(t, err)
	require.Len(t, found, 1)
	require.Contains(t, found[0], "BTC transfer entry forged:0")
	require.Contains(t, found[0], "no transfer leg")
	rep, err := ledger.Check(ctx, e.App.DB.Bun, transfer.CheckLegs)
	require.NoError(t, err)
	require.False(t, rep.LedgerConsistent)
	require.Len(t, rep.HoldMismatches, 1)

	// An entry under a real leg's reference with another amount (its leg
	// index one past the transfer's last) is a leg-less entry too; a leg
	// with no entry is reported as such.
	_, err = ledger.PostTransferLeg(ctx, e.App.DB.Bun, asset.BTC, holder("a"), holder("b"), 1, v.TransferID+":1", "")
	require.NoError(t, err)
	_, err = e.App.DB.Bun.ExecContext(ctx, `INSERT INTO transfer_legs (transfer_id, leg, asset, from_platform, from_owner, to_platform, to_owner, amount)
VALUES (?, 2, 'BTC', false, 'a', false, 'b', 7)`, v.TransferID)
	require.NoError(t, err)
	found, err = transfer.CheckLegs(ctx, e.App.DB.Bun)
	require.NoError(t, err)
	require.Len(t, found, 4, "%q", found)
	all := strings.Join(found, "\n")
	require.Contains(t, all, "BTC transfer "+v.TransferID+" has 2 legs numbered up to 2, not its 1 legs 0 to 0",
		"a leg written beside a transfer the platform was answered")
	require.Contains(t, all, "BTC transfer leg "+v.TransferID+":2 (7 units from user_available(a) to user_available(b)) has no transfer entry")
	require.Contains(t, all, "BTC transfer entry "+v.TransferID+":1 (1 units from user_available(a) to user_available(b)) is the entry of no transfer leg")

	// A party that is no leg's account: the account's list would show a
	// transfer it has no part in.
	_, err = e.App.DB.Bun.ExecContext(ctx, `INSERT INTO transfer_parties (platform, owner, created_at, transfer_id)
SELECT false, 'bystander', created_at, id FROM transfers WHERE id = ?`, v.TransferID)
	require.NoError(t, err)
	found, err = transfer.CheckLegs(ctx, e.App.DB.Bun)
	require.NoError(t, err)
	require.Contains(t, strings.Join(found, "\n"), "BTC transfer "+v.TransferID+" lists as a party user bystander")
}

// setupWithoutBooks is setup for a test that breaks the books on purpose.
func setupWithoutBooks(t testing.TB) *env {
	t.Helper()
	e := &env{Env: apptest.New(t), funded: map[string]int64{}}
	e.EnableAssets(asset.USDTTRC20)
	return e
}

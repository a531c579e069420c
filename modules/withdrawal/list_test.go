package withdrawal_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/modules/withdrawal"
	"svc/platform/chain"
)

// TestUserList: newest first, keyset pages that do not shift when
// withdrawals are added between reads; only the user's own; 422 for a bad
// limit or cursor (all at once); an unknown user has an empty list; an
// unknown withdrawal is 404.
func TestUserList(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "lister", asset.BTC, 100_000_000)
	e.fund(t, "other", asset.BTC, 100_000_000)
	var ids []string
	for i := 0; i < 7; i++ {
		ids = append(ids, e.create(t, "lister", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, fmt.Sprint("l", i))).WithdrawalID)
		e.create(t, "other", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, fmt.Sprint("o", i)))
		e.Clock.Advance(time.Second)
	}
	var seen []string
	cursor := ""
	for page := 0; ; page++ {
		r := e.Get("/v1/users/lister/withdrawals?limit=3" + cursor)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var l withdrawal.ListView
		r.JSON(t, &l)
		for _, w := range l.Withdrawals {
			require.Equal(t, "lister", *w.ExternalUserID)
			seen = append(seen, w.WithdrawalID)
		}
		if page == 0 {
			// Inserted after the first page: not on a later page.
			e.create(t, "lister", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, "late"))
		}
		if l.NextCursor == nil {
			require.Less(t, len(l.Withdrawals), 4)
			break
		}
		cursor = "&cursor=" + *l.NextCursor
	}
	want := make([]string, 0, len(ids))
	for i := len(ids) - 1; i >= 0; i-- {
		want = append(want, ids[i])
	}
	require.Equal(t, want, seen)

	r := e.Get("/v1/users/lister/withdrawals?limit=0&cursor=nope")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status)
	require.Len(t, r.FieldErrors(t), 2)
	unknown := ids[0][:len(ids[0])-1] + "0" // another id (the last digit changed)
	if unknown == ids[0] {
		unknown = ids[0][:len(ids[0])-1] + "1"
	}
	r = e.Get("/v1/users/lister/withdrawals?cursor=" + unknown)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	r = e.Get("/v1/users/other/withdrawals?cursor=" + ids[0])
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, "another user's withdrawal is not a cursor: %s", r.Body)
	r = e.Get("/v1/users/somebody-new/withdrawals")
	require.Equal(t, http.StatusOK, r.Status)
	require.JSONEq(t, `{"withdrawals":[],"next_cursor":null}`, string(r.Body))
	require.Equal(t, http.StatusNotFound, e.Get("/v1/withdrawals/01a20000-0000-7000-8000-000000000000").Status)
	require.Equal(t, http.StatusNotFound, e.Get("/v1/withdrawals/nope").Status)
}

// TestAdminList: oldest first, filtered by status, keyset-paged, with the
// admin fields; a bad status, limit or cursor is 422; a readwrite key is
// 403.
func TestAdminList(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTC, 100_000_000)
	var pendingIDs []string
	for i := 0; i < 5; i++ {
		e.create(t, "u", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, fmt.Sprint("a", i)))
		pendingIDs = append(pendingIDs, e.pending(t, "u", 2_000_000+int64(i)).WithdrawalID)
		e.Clock.Advance(time.Second)
	}
	var seen []string
	cursor := ""
	for {
		l := e.adminPage(t, "status=pending_approval&limit=2"+cursor)
		for _, w := range l.Withdrawals {
			require.Equal(t, "pending_approval", w["status"])
			require.Contains(t, w, "approved_by")
			require.Contains(t, w, "backend_ref")
			seen = append(seen, w["withdrawal_id"].(string))
		}
		if len(seen) == 2 && cursor == "" {
			// Deciding one already read does not shift the next page.
			require.Equal(t, http.StatusOK, e.decide(seen[0], "reject", nil).Status)
		}
		if l.NextCursor == nil {
			break
		}
		cursor = "&cursor=" + *l.NextCursor
	}
	require.Equal(t, pendingIDs, seen)
	r := e.AdminGet("/v1/admin/withdrawals")
	require.Equal(t, http.StatusOK, r.Status)
	r = e.AdminGet("/v1/admin/withdrawals?status=lost&limit=500&cursor=x")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Len(t, r.FieldErrors(t), 3)
	require.Equal(t, http.StatusForbidden, e.Get("/v1/admin/withdrawals").Status)
}

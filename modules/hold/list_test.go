package hold_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/modules/hold"
)

// TestListPages: a payer's open holds, newest first, in pages that do not
// shift; another status on request; a bad status or cursor is 422.
func TestListPages(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "lou", "BTC", 10_000)
	e.fund(t, "lou2", "BTC", 10_000)
	var ids []string
	for range 5 {
		ids = append(ids, e.holdOf(t, user("lou"), "BTC", 100).HoldID)
	}
	view(t, e.void(ids[0]), http.StatusOK)

	var got []string
	cursor := ""
	for {
		r := e.Get("/v1/users/lou/holds?limit=2" + cursor)
		require.Equal(t, http.StatusOK, r.Status, string(r.Body))
		var page hold.ListView
		r.JSON(t, &page)
		require.LessOrEqual(t, len(page.Holds), 2)
		for _, h := range page.Holds {
			require.Equal(t, hold.StatusOpen, h.Status)
			got = append(got, h.HoldID)
		}
		if page.NextCursor == nil {
			break
		}
		e.holdOf(t, user("lou2"), "BTC", 1) // other payers' holds do not shift the pages
		cursor = "&cursor=" + *page.NextCursor
	}
	require.Equal(t, []string{ids[4], ids[3], ids[2], ids[1]}, got)

	var page hold.ListView
	r := e.Get("/v1/users/lou/holds?status=voided")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r.JSON(t, &page)
	require.Len(t, page.Holds, 1)
	require.Equal(t, ids[0], page.Holds[0].HoldID)

	require.Equal(t, http.StatusUnprocessableEntity, e.Get("/v1/users/lou/holds?status=gone").Status)
	require.Equal(t, http.StatusUnprocessableEntity, e.Get("/v1/users/lou/holds?cursor="+ids[0][:8]).Status)
	require.Equal(t, http.StatusUnprocessableEntity, e.Get("/v1/users/other/holds?cursor="+ids[1]).Status)
	require.Equal(t, http.StatusUnprocessableEntity, e.Get("/v1/holds").Status, "client_reference is required")
	require.Equal(t, http.StatusUnprocessableEntity, e.Get("/v1/holds?client_reference=x&status=open").Status, "a closed query")
	require.Equal(t, http.StatusUnprocessableEntity, e.Get("/v1/platform-accounts/Bad!/holds").Status)
}

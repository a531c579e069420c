package deposit_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"svc/modules/deposit"
)

func (e *env) page(t *testing.T, user, query string) deposit.ListView {
	t.Helper()
	r := e.Get("/v1/users/" + url.PathEscape(user) + "/deposits" + query)
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var p deposit.ListView
	r.JSON(t, &p)
	require.NotNil(t, p.Deposits, "an empty list is [], not null")
	return p
}

// Keyset pagination: newest first, default 25, next_cursor null on the
// last page, and a page does not shift when deposits are added.
func TestUserDepositsArePaginated(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var made []string
	for range 30 {
		made = append(made, e.create(t, "lou", "BTC", nil).DepositID)
	}
	e.create(t, "someone else", "BTC", nil)

	first := e.page(t, "lou", "")
	require.Len(t, first.Deposits, 25)
	require.NotNil(t, first.NextCursor)
	require.Equal(t, made[29], first.Deposits[0].DepositID, "newest first")
	require.Equal(t, made[5], first.Deposits[24].DepositID)
	require.Equal(t, made[5], *first.NextCursor)

	// Deposits made between two page reads do not shift the next page.
	newer := e.create(t, "lou", "BTC", nil)
	second := e.page(t, "lou", "?cursor="+*first.NextCursor)
	require.Len(t, second.Deposits, 5)
	require.Nil(t, second.NextCursor)
	require.Equal(t, []string{made[4], made[3], made[2], made[1], made[0]}, ids(second.Deposits))
	require.Equal(t, newer.DepositID, e.page(t, "lou", "?limit=1").Deposits[0].DepositID)

	all := e.page(t, "lou", "?limit=100")
	require.Len(t, all.Deposits, 31)
	require.Nil(t, all.NextCursor)
	exact := e.page(t, "lou", "?limit=31")
	require.Nil(t, exact.NextCursor, "a full last page has no next cursor")

	require.Empty(t, e.page(t, "never-seen", "").Deposits)
	require.Nil(t, e.page(t, "never-seen", "").NextCursor)

	for _, bad := range []string{"?limit=0", "?limit=101", "?limit=x", "?cursor=nope", "?cursor=" + uuid.NewString(),
		"?cursor=" + e.page(t, "someone else", "").Deposits[0].DepositID} {
		r := e.Get("/v1/users/lou/deposits" + bad)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, bad)
	}
	r := e.Get("/v1/users/" + strings.Repeat("x", 256) + "/deposits")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status)
}

func TestGetUnknownDeposit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, path := range []string{"/v1/deposits/" + uuid.NewString(), "/v1/deposits/not-a-uuid",
		"/v1/deposits/" + uuid.NewString() + "/address-history", "/v1/deposits/123/address-history"} {
		r := e.Get(path)
		require.Equal(t, http.StatusNotFound, r.Status, path)
	}
}

// Address history of an unpooled deposit lists the deposit itself.
func TestAddressHistoryOfABitcoinDeposit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := e.create(t, "max", "BTC", nil)
	h := e.history(t, v.DepositID)
	require.Equal(t, v.Address, h.Address)
	require.Len(t, h.Reservations, 1)
	require.Equal(t, v.DepositID, h.Reservations[0].DepositID)
	require.Equal(t, v.CreatedAt, *h.Reservations[0].ReservedFrom)
	require.Nil(t, h.Reservations[0].ReservedUntil)
	ok, err := deposit.IsDepositAddress(context.Background(), e.App.DB.Bun, *v.Address)
	require.NoError(t, err)
	require.True(t, ok, "withdrawals can refuse the service's own deposit addresses")
}

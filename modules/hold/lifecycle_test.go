package hold_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/hold"
)

// TestHoldThenCaptureIntoTwoAccounts is a marketplace order: the buyer's
// payment is held, then captured to the seller and the commission
// platform account, the rest returned to the buyer at once; every balance
// is exact before and after, and hold.captured carries the hold as GET
// answers it.
func TestHoldThenCaptureIntoTwoAccounts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "buyer", "BTC", 100_000)

	h := e.holdOf(t, user("buyer"), "BTC", 60_000, map[string]any{"description": "order 1042",
		"metadata": map[string]string{"order_id": "1042"}, "client_reference": "order-1042", "expires_in": 3600})
	require.Equal(t, hold.StatusOpen, h.Status)
	require.Equal(t, "buyer", *h.From.ExternalUserID)
	require.Nil(t, h.From.PlatformAccount)
	require.Equal(t, "0.00060000", h.Amount)
	require.Equal(t, "0.00000000", h.CapturedAmount)
	require.Equal(t, "0.00000000", h.ReleasedAmount)
	require.Empty(t, h.Captures)
	require.Equal(t, map[string]string{"order_id": "1042"}, h.Metadata)
	require.Equal(t, "order-1042", *h.ClientReference)
	require.Equal(t, "order 1042", *h.Description)
	at, err := time.Parse(time.RFC3339Nano, h.ExpiresAt)
	require.NoError(t, err)
	require.True(t, e.Clock.Now().Add(time.Hour).Equal(at), "expires_at %s", h.ExpiresAt)

	b := e.UserBalance(t, "buyer", "BTC")
	require.Equal(t, balance{Asset: "BTC", Available: "0.00040000", Held: "0.00000000", Reserved: "0.00060000", Total: "0.00100000"}, b)
	require.Equal(t, h, e.get(t, h.HoldID))

	r := e.capture(h.HoldID, leg{To: user("seller"), Amount: "50000"}, leg{To: platform("commission"), Amount: "5000"})
	c := view(t, r, http.StatusOK)
	require.Equal(t, hold.StatusCaptured, c.Status)
	require.Equal(t, "0.00055000", c.CapturedAmount)
	require.Equal(t, "0.00005000", c.ReleasedAmount)
	require.Len(t, c.Captures, 2)
	require.Equal(t, "seller", *c.Captures[0].To.ExternalUserID)
	require.Equal(t, "0.00050000", c.Captures[0].Amount)
	require.Equal(t, "commission", *c.Captures[1].To.PlatformAccount)
	require.Equal(t, "0.00005000", c.Captures[1].Amount)
	require.Equal(t, c, e.get(t, h.HoldID))

	require.Equal(t, balance{Asset: "BTC", Available: "0.00045000", Held: "0.00000000", Reserved: "0.00000000", Total: "0.00045000"},
		e.UserBalance(t, "buyer", "BTC"))
	require.Equal(t, balance{Asset: "BTC", Available: "0.00050000", Held: "0.00000000", Reserved: "0.00000000", Total: "0.00050000"},
		e.UserBalance(t, "seller", "BTC"))
	pb := e.PlatformBalance(t, "commission", "BTC")
	require.Equal(t, "0.00005000", pb.Available)
	require.Equal(t, "0.00005000", pb.Total)

	evs := e.events(t, "hold.captured")
	require.Len(t, evs, 1)
	require.Equal(t, asMap(t, c), evs[0])
	require.Empty(t, e.events(t, "hold.voided"))

	// A second capture, a void: 409 naming the status.
	r = e.capture(h.HoldID, leg{To: user("seller"), Amount: "1"})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "captured")
	r = e.void(h.HoldID)
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "captured")

	// The reads.
	var list hold.ListView
	r = e.Get("/v1/holds?client_reference=order-1042")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r.JSON(t, &list)
	require.Equal(t, []hold.View{c}, list.Holds)
	r = e.Get("/v1/holds?client_reference=order-9999")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r.JSON(t, &list)
	require.Empty(t, list.Holds)
	require.Nil(t, list.NextCursor)
	r = e.Get("/v1/users/buyer/holds")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r.JSON(t, &list)
	require.Empty(t, list.Holds, "open by default")
	r = e.Get("/v1/users/buyer/holds?status=captured")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r.JSON(t, &list)
	require.Equal(t, []hold.View{c}, list.Holds)
}

// TestCaptureOfTheWholeAmountReturnsNothing: legs that pay the whole
// amount leave nothing to return; a platform account pays a hold too.
func TestCaptureOfTheWholeAmountReturnsNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "sponsor", "BTC", 30_000)
	// The prize pool is funded by a capture into it.
	h := e.holdOf(t, user("sponsor"), "BTC", 30_000)
	c := view(t, e.capture(h.HoldID, leg{To: platform("prize-pool"), Amount: "30000"}), http.StatusOK)
	require.Equal(t, "0.00000000", c.ReleasedAmount)
	require.Equal(t, "0.00030000", c.CapturedAmount)

	p := e.holdOf(t, platform("prize-pool"), "BTC", 20_000)
	require.Equal(t, "prize-pool", *p.From.PlatformAccount)
	pb := e.PlatformBalance(t, "prize-pool", "BTC")
	require.Equal(t, "0.00010000", pb.Available)
	require.Equal(t, "0.00020000", pb.Reserved)
	var list hold.ListView
	r := e.Get("/v1/platform-accounts/prize-pool/holds")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r.JSON(t, &list)
	require.Len(t, list.Holds, 1)
	require.Equal(t, p.HoldID, list.Holds[0].HoldID)

	c = view(t, e.capture(p.HoldID, leg{To: user("winner"), Amount: "20000"}), http.StatusOK)
	require.Equal(t, hold.StatusCaptured, c.Status)
	require.Equal(t, "0.00020000", e.UserBalance(t, "winner", "BTC").Available)
	pb = e.PlatformBalance(t, "prize-pool", "BTC")
	require.Equal(t, "0.00010000", pb.Available)
	require.Equal(t, "0.00000000", pb.Reserved)
}

// TestVoidReturnsEverything: a void returns the whole amount at once; it is
// final.
func TestVoidReturnsEverything(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "ann", "BTC", 10_000)
	h := e.holdOf(t, user("ann"), "BTC", 7_000)
	require.Equal(t, "0.00003000", e.UserBalance(t, "ann", "BTC").Available)

	v := view(t, e.void(h.HoldID), http.StatusOK)
	require.Equal(t, hold.StatusVoided, v.Status)
	require.Equal(t, "0.00007000", v.ReleasedAmount)
	require.Equal(t, "0.00000000", v.CapturedAmount)
	require.Empty(t, v.Captures)
	require.Equal(t, balance{Asset: "BTC", Available: "0.00010000", Held: "0.00000000", Reserved: "0.00000000", Total: "0.00010000"},
		e.UserBalance(t, "ann", "BTC"))
	evs := e.events(t, "hold.voided")
	require.Len(t, evs, 1)
	require.Equal(t, asMap(t, v), evs[0])

	for _, r := range []*apptest.Response{e.void(h.HoldID), e.capture(h.HoldID, leg{To: user("bob"), Amount: "1"})} {
		require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
		require.Contains(t, detail(t, r), "voided")
	}
	require.Equal(t, http.StatusNotFound, e.void("0190b7e2-5a4c-7d3e-9f10-2b3c4d5e6f70").Status)
	require.Equal(t, http.StatusNotFound, e.Get("/v1/holds/not-a-hold").Status)
}

// TestExpiryByTheJob: the expiry job returns a hold that reached
// expires_at open, and only such a hold.
func TestExpiryByTheJob(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "cat", "BTC", 10_000)
	due := e.holdOf(t, user("cat"), "BTC", 4_000, map[string]any{"expires_in": 60})
	later := e.holdOf(t, user("cat"), "BTC", 5_000, map[string]any{"expires_in": 120})
	e.Clock.Advance(61 * time.Second)

	e.StartWorker()
	_, err := e.Worker.Insert(context.Background(), hold.ExpireArgs{}, nil)
	require.NoError(t, err)
	apptest.Eventually(t, 10*time.Second, func() bool { return e.get(t, due.HoldID).Status == hold.StatusExpired }, "the due hold expired")

	x := e.get(t, due.HoldID)
	require.Equal(t, "0.00004000", x.ReleasedAmount)
	require.Equal(t, hold.StatusOpen, e.get(t, later.HoldID).Status)
	b := e.UserBalance(t, "cat", "BTC")
	require.Equal(t, "0.00005000", b.Available)
	require.Equal(t, "0.00005000", b.Reserved)
	evs := e.events(t, "hold.expired")
	require.Len(t, evs, 1)
	require.Equal(t, asMap(t, x), evs[0])

	r := e.capture(due.HoldID, leg{To: user("dan"), Amount: "1"})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), "expired")
	e.StopWorker()
}

package hold_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/platform/chain"
	"svc/platform/chain/chaintest"
)

// TestRefusals: what a hold request or a capture is refused for, with
// nothing reserved or moved.
func TestRefusals(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "eve", "BTC", 10_000)
	base := func(extra map[string]any) map[string]any {
		b := map[string]any{"from": user("eve"), "asset": "BTC", "amount": "1000"}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	for name, tc := range map[string]struct {
		body   map[string]any
		status int
	}{
		"expires_in 0":            {base(map[string]any{"expires_in": 0}), http.StatusUnprocessableEntity},
		"expires_in over 30 days": {base(map[string]any{"expires_in": 2592001}), http.StatusUnprocessableEntity},
		"amount 0":                {base(map[string]any{"amount": "0"}), http.StatusUnprocessableEntity},
		"amount not units":        {base(map[string]any{"amount": "0.5"}), http.StatusUnprocessableEntity},
		"from both":               {base(map[string]any{"from": map[string]any{"external_user_id": "eve", "platform_account": "x"}}), http.StatusUnprocessableEntity},
		"from none":               {base(map[string]any{"from": map[string]any{}}), http.StatusUnprocessableEntity},
		"bad platform name":       {base(map[string]any{"from": platform("Revenue!")}), http.StatusUnprocessableEntity},
		"description too long":    {base(map[string]any{"description": strings.Repeat("x", 501)}), http.StatusUnprocessableEntity},
		"too much metadata":       {base(map[string]any{"metadata": manyKeys(21)}), http.StatusUnprocessableEntity},
		"unknown asset":           {base(map[string]any{"asset": "DOGE"}), http.StatusNotFound},
		"disabled asset":          {base(map[string]any{"asset": "USDT_TRC20"}), http.StatusUnprocessableEntity},
		"more than available":     {base(map[string]any{"amount": "10001"}), http.StatusPaymentRequired},
		"unknown payer":           {base(map[string]any{"from": user("nobody")}), http.StatusPaymentRequired},
	} {
		r := e.place(tc.body)
		require.Equal(t, tc.status, r.Status, "%s: %s", name, r.Body)
	}
	b := e.UserBalance(t, "eve", "BTC")
	require.Equal(t, "0.00010000", b.Available, "nothing reserved")
	require.Equal(t, "0.00000000", b.Reserved)

	// A client reference is unique: the second use names the hold that has it.
	h := e.holdOf(t, user("eve"), "BTC", 1_000, map[string]any{"client_reference": "ref-1"})
	r := e.place(base(map[string]any{"client_reference": "ref-1"}))
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, detail(t, r), h.HoldID)

	// Captures.
	legs := make([]leg, 16)
	for i := range legs {
		legs[i] = leg{To: user(fmt.Sprintf("s-%d", i)), Amount: "1"}
	}
	for name, tc := range map[string][]leg{
		"16 legs":      legs,
		"no legs":      {},
		"over-capture": {{To: user("s"), Amount: "900"}, {To: platform("fee"), Amount: "101"}},
		"to the payer": {{To: user("eve"), Amount: "10"}},
		"twice":        {{To: user("s"), Amount: "10"}, {To: user("s"), Amount: "10"}},
		"amount 0":     {{To: user("s"), Amount: "0"}},
	} {
		r := e.capture(h.HoldID, tc...)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", name, r.Body)
	}
	require.Equal(t, "open", string(e.get(t, h.HoldID).Status), "nothing captured")
}

func manyKeys(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = "v"
	}
	return m
}

// TestWithdrawalsNeverSpendReservedMoney: with most of a balance held, a
// withdrawal of more than what is left available is 402; one within it
// goes through.
func TestWithdrawalsNeverSpendReservedMoney(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "fay", "BTC", 100_000)
	e.holdOf(t, user("fay"), "BTC", 80_000)
	withdraw := func(units int64) *apptest.Response {
		return e.Post("/v1/withdrawals", map[string]any{"external_user_id": "fay", "asset": "BTC", "amount": fmt.Sprint(units),
			"destination_address": chaintest.P2WPKH(t, chain.Regtest, fmt.Sprint("fay-", units))})
	}
	r := withdraw(30_000)
	require.Equal(t, http.StatusPaymentRequired, r.Status, string(r.Body))
	r = withdraw(15_000)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	b := e.UserBalance(t, "fay", "BTC")
	require.Equal(t, "0.00005000", b.Available)
	require.Equal(t, "0.00015000", b.Held)
	require.Equal(t, "0.00080000", b.Reserved)
	require.Equal(t, "0.00100000", b.Total)
}

// TestIdempotentReplay: the same key and body replay the first answer with
// one effect, for a hold and for its capture.
func TestIdempotentReplay(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "gus", "BTC", 10_000)
	body := map[string]any{"from": user("gus"), "asset": "BTC", "amount": "4000"}
	first := e.Do(apptest.Req{Method: http.MethodPost, Path: "/v1/holds", Body: body, Idem: "hold-gus-1"})
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	again := e.Do(apptest.Req{Method: http.MethodPost, Path: "/v1/holds", Body: body, Idem: "hold-gus-1"})
	require.Equal(t, http.StatusCreated, again.Status, string(again.Body))
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(first.Body), string(again.Body))
	require.Equal(t, "0.00004000", e.UserBalance(t, "gus", "BTC").Reserved, "held once")
	other := e.Do(apptest.Req{Method: http.MethodPost, Path: "/v1/holds", Body: map[string]any{"from": user("gus"), "asset": "BTC", "amount": "4001"}, Idem: "hold-gus-1"})
	require.Equal(t, http.StatusUnprocessableEntity, other.Status, string(other.Body))

	v := view(t, first, http.StatusCreated)
	capBody := map[string]any{"legs": []leg{{To: user("hal"), Amount: "1000"}}}
	c1 := e.Do(apptest.Req{Method: http.MethodPost, Path: "/v1/holds/" + v.HoldID + "/capture", Body: capBody, Idem: "cap-gus-1"})
	require.Equal(t, http.StatusOK, c1.Status, string(c1.Body))
	c2 := e.Do(apptest.Req{Method: http.MethodPost, Path: "/v1/holds/" + v.HoldID + "/capture", Body: capBody, Idem: "cap-gus-1"})
	require.Equal(t, http.StatusOK, c2.Status, string(c2.Body))
	require.Equal(t, "true", c2.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(c1.Body), string(c2.Body))
	require.Equal(t, "0.00001000", e.UserBalance(t, "hal", "BTC").Available, "paid once")
	require.Len(t, e.events(t, "hold.captured"), 1)
}

// TestLimitsAtTheirBounds: what the refusals' bounds still allow: a life of
// 1 second and of 30 days, a capture into 15 accounts.
func TestLimitsAtTheirBounds(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "max", "BTC", 10_000)
	e.holdOf(t, user("max"), "BTC", 100, map[string]any{"expires_in": 1})
	h := e.holdOf(t, user("max"), "BTC", 1_500, map[string]any{"expires_in": 2592000})
	legs := make([]leg, 15)
	for i := range legs {
		legs[i] = leg{To: user(fmt.Sprintf("m-%d", i)), Amount: "100"}
	}
	legs[14] = leg{To: platform("fees"), Amount: "50"}
	c := view(t, e.capture(h.HoldID, legs...), http.StatusOK)
	require.Len(t, c.Captures, 15)
	require.Equal(t, "0.00001450", c.CapturedAmount)
	require.Equal(t, "0.00000050", c.ReleasedAmount)
	require.Equal(t, "0.00000100", e.UserBalance(t, "m-13", "BTC").Available)
	require.Equal(t, "0.00000050", e.PlatformBalance(t, "fees", "BTC").Available)
	require.Equal(t, "0.00008450", e.UserBalance(t, "max", "BTC").Available)
}

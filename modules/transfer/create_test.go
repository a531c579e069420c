package transfer_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/transfer"
)

// requireLegInHistories: the leg's entry is in both accounts' histories,
// kind transfer, source_ref "<transfer_id>:<i>", debit on from and credit
// on to, with the leg's amount.
func (e *env) requireLegInHistories(t testing.TB, v transfer.View, i int) {
	t.Helper()
	lg := v.Legs[i]
	want := fmt.Sprintf("%s:%d", v.TransferID, i)
	for _, side := range []struct {
		name, dir string
	}{{name(lg.From), "debit"}, {name(lg.To), "credit"}} {
		found := 0
		for _, x := range e.history(t, side.name) {
			if x.SourceRef != nil && *x.SourceRef == want {
				found++
				require.Equal(t, "transfer", x.Kind)
				require.Equal(t, lg.Asset, x.Asset)
				require.Equal(t, lg.Amount, x.Amount)
				require.Equal(t, side.dir, x.Direction, "%s %s", side.name, want)
			}
		}
		require.Equal(t, 1, found, "%s: the posting of %s in its history", side.name, want)
	}
}

func name(r transfer.AccountRef) string {
	if r.PlatformAccount != "" {
		return "platform:" + r.PlatformAccount
	}
	return r.ExternalUserID
}

// TestOneLegUserToUser: the 201 is the Transfer (amounts in display units,
// the accounts as given), GET returns the same, the balances moved, the
// leg is in both histories and transfer.completed carries the same object.
func TestOneLegUserToUser(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "alice", asset.BTC, 100_000)
	v := e.create(t, body{Legs: []leg{l("alice", "bob", asset.BTC, 30_000)}, Description: ptr("lunch"),
		Metadata: map[string]string{"order": "17"}})
	require.Equal(t, "completed", v.Status)
	require.Equal(t, []transfer.LegView{{From: ref("alice"), To: ref("bob"), Asset: asset.BTC, Amount: "0.00030000"}}, v.Legs)
	require.Equal(t, "lunch", *v.Description)
	require.Equal(t, "17", v.Metadata["order"])
	require.Nil(t, v.ClientReference)
	require.Equal(t, v, e.get(t, v.TransferID))
	require.Equal(t, int64(70_000), e.available(t, "alice", asset.BTC))
	require.Equal(t, int64(30_000), e.available(t, "bob", asset.BTC))
	e.requireLegInHistories(t, v, 0)

	evs := e.events(t)
	require.Len(t, evs, 1)
	require.Equal(t, "transfer.completed", evs[0]["type"])
	data := evs[0]["data"].(map[string]any)
	require.Equal(t, v.TransferID, data["transfer_id"])
	require.Equal(t, map[string]any{"external_user_id": "alice"}, data["legs"].([]any)[0].(map[string]any)["from"])
	require.Equal(t, "0.00030000", data["legs"].([]any)[0].(map[string]any)["amount"])

	// No metadata given: {} in the answer; no description: null.
	r := e.post(body{Legs: []leg{l("bob", "alice", asset.BTC, 1)}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), `"metadata":{}`)
	require.Contains(t, string(r.Body), `"description":null`)
}

// TestPlatformAccounts: a user pays a platform account (revenue), and a
// platform account pays a user (a prize from a prize pool); both sides'
// histories show the leg.
func TestPlatformAccounts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "player", asset.USDTTRC20, 10_000_000)
	e.fund(t, "sponsor", asset.USDTTRC20, 50_000_000)
	fee := e.create(t, body{Legs: []leg{l("player", "platform:revenue", asset.USDTTRC20, 2_000_000)}})
	require.Equal(t, transfer.AccountRef{PlatformAccount: "revenue"}, fee.Legs[0].To)
	require.Equal(t, "2.000000", fee.Legs[0].Amount)
	pool := e.create(t, body{Legs: []leg{l("sponsor", "platform:prize_pool", asset.USDTTRC20, 50_000_000)}})
	prize := e.create(t, body{Legs: []leg{l("platform:prize_pool", "player", asset.USDTTRC20, 30_000_000)}})
	require.Equal(t, int64(2_000_000), e.available(t, "platform:revenue", asset.USDTTRC20))
	require.Equal(t, int64(20_000_000), e.available(t, "platform:prize_pool", asset.USDTTRC20))
	require.Equal(t, int64(38_000_000), e.available(t, "player", asset.USDTTRC20))
	for _, v := range []transfer.View{fee, pool, prize} {
		e.requireLegInHistories(t, v, 0)
	}
	// The pool cannot pay more than it has.
	r := e.post(body{Legs: []leg{l("platform:prize_pool", "player", asset.USDTTRC20, 20_000_001)}})
	require.Equal(t, http.StatusPaymentRequired, r.Status, string(r.Body))
	require.Equal(t, int64(20_000_000), e.available(t, "platform:prize_pool", asset.USDTTRC20))
	// A platform account never credited has nothing to pay with.
	r = e.post(body{Legs: []leg{l("platform:ghost", "player", asset.USDTTRC20, 1)}})
	require.Equal(t, http.StatusPaymentRequired, r.Status, string(r.Body))
	require.Contains(t, r.Map(t)["detail"], `legs[0]: insufficient available balance: platform account "ghost"`)
}

// TestTwoAssetTrade: A pays B in BTC and B pays A in USDT_TRC20 in one
// request; both legs move, each in both histories.
func TestTwoAssetTrade(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "buyer", asset.USDTTRC20, 100_000_000)
	e.fund(t, "seller", asset.BTC, 1_000_000)
	v := e.create(t, body{Legs: []leg{
		l("seller", "buyer", asset.BTC, 150_000),
		l("buyer", "seller", asset.USDTTRC20, 90_000_000),
	}, Description: ptr("trade 0.0015 BTC at 60000")})
	require.Len(t, v.Legs, 2)
	require.Equal(t, "0.00150000", v.Legs[0].Amount)
	require.Equal(t, "90.000000", v.Legs[1].Amount)
	require.Equal(t, int64(850_000), e.available(t, "seller", asset.BTC))
	require.Equal(t, int64(150_000), e.available(t, "buyer", asset.BTC))
	require.Equal(t, int64(10_000_000), e.available(t, "buyer", asset.USDTTRC20))
	require.Equal(t, int64(90_000_000), e.available(t, "seller", asset.USDTTRC20))
	e.requireLegInHistories(t, v, 0)
	e.requireLegInHistories(t, v, 1)
}

// TestShortLegMovesNothing: the third leg's from is short: 402 naming
// legs[2], and nothing moved (balances, entries, rows, events).
func TestShortLegMovesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "a", asset.BTC, 1_000)
	e.fund(t, "b", asset.BTC, 1_000)
	e.fund(t, "c", asset.USDTTRC20, 500)
	r := e.post(body{Legs: []leg{
		l("a", "b", asset.BTC, 1_000),
		l("b", "c", asset.BTC, 2_000), // b has 1,000 + 1,000 from leg 0
		l("c", "a", asset.USDTTRC20, 501),
	}})
	require.Equal(t, http.StatusPaymentRequired, r.Status, string(r.Body))
	detail := r.Map(t)["detail"].(string)
	require.True(t, strings.HasPrefix(detail, "legs[2]: "), detail)
	require.Contains(t, detail, `user "c"`)
	require.Equal(t, int64(1_000), e.available(t, "a", asset.BTC))
	require.Equal(t, int64(1_000), e.available(t, "b", asset.BTC))
	require.Equal(t, int64(0), e.available(t, "c", asset.BTC))
	require.Equal(t, int64(500), e.available(t, "c", asset.USDTTRC20))
	require.Zero(t, count(t, e, "SELECT count(*) FROM ledger_entries WHERE kind = 'transfer'"))
	require.Zero(t, count(t, e, "SELECT count(*) FROM transfers"))
	require.Zero(t, count(t, e, "SELECT count(*) FROM transfer_legs"))
	require.Empty(t, e.events(t))

	// The first leg short: named legs[0].
	r = e.post(body{Legs: []leg{l("a", "b", asset.BTC, 1_001), l("b", "a", asset.BTC, 1)}})
	require.Equal(t, http.StatusPaymentRequired, r.Status, string(r.Body))
	require.True(t, strings.HasPrefix(r.Map(t)["detail"].(string), "legs[0]: "), string(r.Body))
}

// TestRefusals: what the request's rules refuse, each before anything
// moves.
func TestRefusals(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "a", asset.BTC, 1_000)
	fieldAt := func(r *apptest.Response, at ...any) {
		t.Helper()
		loc := []any(at)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
		for _, f := range r.FieldErrors(t) {
			got := f["loc"].([]any)
			if len(got) >= len(loc) && fmt.Sprint(got[:len(loc)]) == fmt.Sprint(loc) {
				return
			}
		}
		t.Fatalf("no field error at %s: %s", fmt.Sprint(loc), r.Body)
	}
	// from equal to to, at that leg.
	fieldAt(e.post(body{Legs: []leg{l("a", "b", asset.BTC, 1), l("a", "a", asset.BTC, 1)}}), "body", "legs", 1, "to")
	fieldAt(e.post(body{Legs: []leg{l("platform:pool", "platform:pool", asset.BTC, 1)}}), "body", "legs", 0, "to")
	// A user and a platform account of the same name are two accounts.
	e.fund(t, "pool", asset.BTC, 10)
	e.create(t, body{Legs: []leg{l("pool", "platform:pool", asset.BTC, 10)}})

	// Unknown asset 404, disabled 422, each naming the leg.
	r := e.post(body{Legs: []leg{l("a", "b", asset.BTC, 1), l("a", "b", "DOGE", 1)}})
	require.Equal(t, http.StatusNotFound, r.Status, string(r.Body))
	require.Contains(t, r.Map(t)["detail"], "legs[1]")
	r = e.post(body{Legs: []leg{l("a", "b", asset.BTCLN, 1)}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Contains(t, r.Map(t)["detail"], "legs[0]")

	// 101 legs; none.
	many := make([]leg, 101)
	for i := range many {
		many[i] = l("a", "b", asset.BTC, 1)
	}
	fieldAt(e.post(body{Legs: many}), "body", "legs")
	fieldAt(e.post(body{Legs: []leg{}}), "body", "legs")
	fieldAt(e.post(`{}`), "body", "legs")
	// Amounts: zero, signed, decimal, above the bound.
	for _, amount := range []string{"0", "-1", "1.5", "1e3", "", "1000000000000000001", "99999999999999999999"} {
		fieldAt(e.post(body{Legs: []leg{{From: ref("a"), To: ref("b"), Asset: asset.BTC, Amount: amount}}}), "body", "legs", 0, "amount")
	}
	// Accounts: both keys, neither, a bad platform name, an empty user.
	for _, from := range []string{`{"external_user_id": "a", "platform_account": "x"}`, `{}`, `{"platform_account": "Prize Pool"}`,
		`{"external_user_id": ""}`, `{"user": "a"}`} {
		r := e.post(`{"legs": [{"from": ` + from + `, "to": {"external_user_id": "b"}, "asset": "BTC", "amount": "1"}]}`)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", from, r.Body)
	}
	fieldAt(e.post(body{Legs: []leg{l("a", "b", asset.BTC, 1)}, Description: ptr(strings.Repeat("x", 501))}), "body", "description")
	e.create(t, body{Legs: []leg{l("a", "b", asset.BTC, 1)}, Description: ptr(strings.Repeat("é", 500))})

	require.Equal(t, int64(999), e.available(t, "a", asset.BTC))
	require.Equal(t, 2, count(t, e, "SELECT count(*) FROM transfers"))
}

// TestIdempotentReplay: the same key and body answer the stored 201 with
// one effect; the same key with another body is 422.
func TestIdempotentReplay(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "a", asset.BTC, 1_000)
	b := body{Legs: []leg{l("a", "b", asset.BTC, 400)}}
	first := e.Do(apptest.Req{Method: "POST", Path: "/v1/transfers", Body: b, Idem: "transfer-key-1"})
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	again := e.Do(apptest.Req{Method: "POST", Path: "/v1/transfers", Body: b, Idem: "transfer-key-1"})
	require.Equal(t, http.StatusCreated, again.Status, string(again.Body))
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, string(first.Body), string(again.Body))
	other := e.Do(apptest.Req{Method: "POST", Path: "/v1/transfers", Body: body{Legs: []leg{l("a", "b", asset.BTC, 401)}}, Idem: "transfer-key-1"})
	require.Equal(t, http.StatusUnprocessableEntity, other.Status, string(other.Body))
	require.Equal(t, int64(600), e.available(t, "a", asset.BTC))
	require.Equal(t, 1, count(t, e, "SELECT count(*) FROM transfers"))
	require.Len(t, e.events(t), 1)
}

// TestClientReference: a second use is 409 naming the transfer that has
// it; GET /v1/transfers?client_reference= finds it, or nothing.
func TestClientReference(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "a", asset.BTC, 1_000)
	v := e.create(t, body{Legs: []leg{l("a", "b", asset.BTC, 100)}, ClientReference: ptr("order-17")})
	require.Equal(t, "order-17", *v.ClientReference)
	r := e.post(body{Legs: []leg{l("a", "c", asset.BTC, 100)}, ClientReference: ptr("order-17")})
	require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
	require.Contains(t, r.Map(t)["detail"], v.TransferID)
	require.Equal(t, int64(900), e.available(t, "a", asset.BTC))

	r = e.Get("/v1/transfers?client_reference=order-17")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var found transfer.ListView
	r.JSON(t, &found)
	require.Equal(t, []transfer.View{v}, found.Transfers)
	require.Nil(t, found.NextCursor)
	r = e.Get("/v1/transfers?client_reference=order-18")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.JSONEq(t, `{"transfers": [], "next_cursor": null}`, string(r.Body))
	require.Equal(t, http.StatusUnprocessableEntity, e.Get("/v1/transfers").Status)
	require.Equal(t, http.StatusUnprocessableEntity, e.Get("/v1/transfers?client_reference=order-17&limit=2").Status)
}

// TestRuntimeRoleCannotEditTransfers: the service's own role may only read
// and append transfers, their legs and their parties.
func TestRuntimeRoleCannotEditTransfers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "a", asset.BTC, 1_000)
	e.create(t, body{Legs: []leg{l("a", "b", asset.BTC, 100)}})
	for _, stmt := range []string{
		"UPDATE transfers SET description = 'x'", "DELETE FROM transfers", "TRUNCATE transfers CASCADE",
		"UPDATE transfer_legs SET amount = 1", "DELETE FROM transfer_legs", "TRUNCATE transfer_legs",
		"UPDATE transfer_parties SET owner = 'x'", "DELETE FROM transfer_parties", "TRUNCATE transfer_parties",
	} {
		_, err := e.App.DB.Bun.ExecContext(context.Background(), stmt)
		require.ErrorContains(t, err, "permission denied", stmt)
	}
	require.Equal(t, 1, count(t, e, "SELECT count(*) FROM transfer_legs WHERE amount = 100"))
}

// TestHotPlatformAccount: many purchases pay one platform account, whose
// credits spread over its shards; its balance, history and list read it
// as one account, and one transfer takes all of it out again (the shards
// are gathered first), while one unit more is refused with nothing moved.
func TestHotPlatformAccount(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const buyers, each = 40, 1_000
	for i := range buyers {
		e.fund(t, fmt.Sprint("buyer-", i), asset.BTC, each)
		e.create(t, body{Legs: []leg{l(fmt.Sprint("buyer-", i), "platform:revenue", asset.BTC, each)}})
	}
	require.Equal(t, int64(buyers*each), e.available(t, "platform:revenue", asset.BTC))
	require.Greater(t, count(t, e, `SELECT count(*) FROM ledger_accounts WHERE kind = 'platform_available' AND owner LIKE 'revenue#%' AND balance > 0`), 10)
	require.Len(t, e.history(t, "platform:revenue"), buyers)

	r := e.post(body{Legs: []leg{l("platform:revenue", "winner", asset.BTC, buyers*each+1)}})
	require.Equal(t, http.StatusPaymentRequired, r.Status, string(r.Body))
	require.Zero(t, count(t, e, `SELECT count(*) FROM ledger_entries WHERE kind = 'shard_sweep'`))

	v := e.create(t, body{Legs: []leg{l("platform:revenue", "winner", asset.BTC, buyers*each)}})
	require.Equal(t, "completed", v.Status)
	require.Equal(t, int64(0), e.available(t, "platform:revenue", asset.BTC))
	require.Equal(t, int64(buyers*each), e.available(t, "winner", asset.BTC))
	require.Positive(t, count(t, e, `SELECT count(*) FROM ledger_entries WHERE kind = 'shard_sweep'`))
	hist := e.history(t, "platform:revenue")
	require.Len(t, hist, buyers+1)
	for _, x := range hist {
		require.Equal(t, "transfer", x.Kind)
	}
	list := e.Get("/v1/platform-accounts")
	require.Equal(t, http.StatusOK, list.Status, string(list.Body))
	require.Equal(t, 1, strings.Count(string(list.Body), `"platform_account":"revenue"`), string(list.Body))
	e.requireBooks(t)
}

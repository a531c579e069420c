package withdrawal_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/withdrawal"
	"svc/platform/chain"
)

// eventData returns the data of the events of one type about a withdrawal.
func (e *env) eventData(t testing.TB, typ, id string) []map[string]any {
	t.Helper()
	var raw []json.RawMessage
	require.NoError(t, e.App.DB.Bun.NewSelect().Table("outbound_events").ColumnExpr("payload->'data'").
		Where("type = ? AND payload->'data'->>'withdrawal_id' = ?", typ, id).OrderExpr("created_at, id").
		Scan(context.Background(), &raw))
	out := make([]map[string]any, 0, len(raw))
	for _, r := range raw {
		var m map[string]any
		require.NoError(t, json.Unmarshal(r, &m))
		out = append(out, m)
	}
	return out
}

// requireLabels requires an object's metadata and client_reference (nil
// for null).
func requireLabels(t testing.TB, obj map[string]any, metadata map[string]any, ref any) {
	t.Helper()
	require.Contains(t, obj, "metadata")
	require.Equal(t, metadata, obj["metadata"])
	require.Contains(t, obj, "client_reference")
	require.Equal(t, ref, obj["client_reference"])
}

// A withdrawal's metadata and client_reference come back on creation, on
// its GET, in the user's list, the admin list, the approval, the lookup by
// reference, and in every event about it (pending approval, broadcast,
// completed); one without them shows {} and null.
func TestWithdrawalLabelsComeBackEverywhere(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "lab", asset.BTC, 10_000_000)
	e.limits(t, asset.BTC, asset.Limits{AutoLimit: n(50_000)})
	labels := map[string]any{"payout_id": "P-77", "channel": "app"}
	r := e.Post("/v1/withdrawals", map[string]any{"external_user_id": "lab", "asset": "BTC", "amount": "100000",
		"destination_address": p2wpkh(t, chain.Regtest, "lab-1"), "metadata": labels, "client_reference": "payout-77"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	requireLabels(t, r.Map(t), labels, "payout-77")
	id := r.Map(t)["withdrawal_id"].(string)
	require.Equal(t, "pending_approval", r.Map(t)["status"])

	requireLabels(t, e.Get("/v1/withdrawals/"+id).Map(t), labels, "payout-77")
	list := e.Get("/v1/users/lab/withdrawals").Map(t)["withdrawals"].([]any)
	require.Len(t, list, 1)
	requireLabels(t, list[0].(map[string]any), labels, "payout-77")
	requireLabels(t, e.admin(t, id), labels, "payout-77")
	found := e.Get("/v1/withdrawals?client_reference=payout-77")
	require.Equal(t, http.StatusOK, found.Status, string(found.Body))
	var page withdrawal.ListView
	found.JSON(t, &page)
	require.Len(t, page.Withdrawals, 1)
	require.Equal(t, id, page.Withdrawals[0].WithdrawalID)
	require.Nil(t, page.NextCursor)
	requireLabels(t, found.Map(t)["withdrawals"].([]any)[0].(map[string]any), labels, "payout-77")

	approved := e.decide(id, "approve", map[string]any{})
	require.Equal(t, http.StatusOK, approved.Status, string(approved.Body))
	requireLabels(t, approved.Map(t), labels, "payout-77")
	e.pass(t)
	p := e.onePayout(t, id)
	e.broadcastPayout(t, p.ID, "")
	e.pass(t)
	e.completePayout(t, p.ID)
	e.pass(t)
	e.pass(t)
	require.Equal(t, withdrawal.StatusConfirmed, e.get(t, id).Status)
	for _, typ := range []string{"withdrawal.pending_approval", "withdrawal.broadcast", "withdrawal.completed"} {
		ev := e.eventData(t, typ, id)
		require.Len(t, ev, 1, typ)
		requireLabels(t, ev[0], labels, "payout-77")
	}

	// Without labels: {} and null (auto-approved, in one round trip).
	r = e.request("lab", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, "lab-2"))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), `"metadata":{}`)
	require.Contains(t, string(r.Body), `"client_reference":null`)
	requireLabels(t, e.Get("/v1/withdrawals/"+r.Map(t)["withdrawal_id"].(string)).Map(t), map[string]any{}, nil)
}

// Metadata beyond Stripe's limits, or with a value that is not a string,
// is a 422 naming the key, and nothing is created or held.
func TestWithdrawalBadMetadataIsRefusedNamingTheKey(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "bad", asset.BTC, 10_000_000)
	many := map[string]any{}
	for i := range 21 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	long := strings.Repeat("x", 41)
	tests := []struct {
		name     string
		extra    map[string]any
		loc      []any
		typeWant string
	}{
		{"too many keys", map[string]any{"metadata": many}, []any{"body", "metadata"}, ""},
		{"a 41-character key", map[string]any{"metadata": map[string]any{long: "v"}}, []any{"body", "metadata", long}, "string_too_long"},
		{"a 501-character value", map[string]any{"metadata": map[string]any{"note": strings.Repeat("v", 501)}},
			[]any{"body", "metadata", "note"}, "string_too_long"},
		{"a boolean value", map[string]any{"metadata": map[string]any{"vip": true}}, []any{"body", "metadata", "vip"}, "string_type"},
		{"a null value", map[string]any{"metadata": map[string]any{"gone": nil}}, []any{"body", "metadata", "gone"}, ""},
		{"a 256-character client_reference", map[string]any{"client_reference": strings.Repeat("r", 256)},
			[]any{"body", "client_reference"}, "string_too_long"},
	}
	for _, tt := range tests {
		body := map[string]any{"external_user_id": "bad", "asset": "BTC", "amount": "20000",
			"destination_address": p2wpkh(t, chain.Regtest, "bad")}
		for k, v := range tt.extra {
			body[k] = v
		}
		r := e.Post("/v1/withdrawals", body)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", tt.name, r.Body)
		fe := r.FieldErrors(t)
		require.Len(t, fe, 1, "%s: %s", tt.name, r.Body)
		require.Equal(t, tt.loc, fe[0]["loc"], tt.name)
		if tt.typeWant != "" {
			require.Equal(t, tt.typeWant, fe[0]["type"], tt.name)
		}
	}
	n, err := e.App.DB.Bun.NewSelect().Table("withdrawals").Count(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "nothing was created")
	require.Equal(t, "0.00000000", e.UserBalance(t, "bad", asset.BTC).Held)
}

// A client_reference another withdrawal has is a 409 naming it, with
// nothing created or held, on the one-round-trip path and the ordinary
// one alike; the same request with the same Idempotency-Key replays.
func TestWithdrawalClientReferenceIsUnique(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "ref", asset.BTC, 10_000_000)
	body := map[string]any{"external_user_id": "ref", "asset": "BTC", "amount": "20000",
		"destination_address": p2wpkh(t, chain.Regtest, "ref"), "client_reference": "payout-1"}
	first := e.Do(apptest.Req{Method: http.MethodPost, Path: "/v1/withdrawals", Body: body, Idem: "wd-ref-1"})
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	id := first.Map(t)["withdrawal_id"].(string)
	replay := e.Do(apptest.Req{Method: http.MethodPost, Path: "/v1/withdrawals", Body: body, Idem: "wd-ref-1"})
	require.Equal(t, http.StatusCreated, replay.Status, string(replay.Body))
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, id, replay.Map(t)["withdrawal_id"])

	conflict := func(what string, b map[string]any) {
		t.Helper()
		r := e.Post("/v1/withdrawals", b)
		require.Equal(t, http.StatusConflict, r.Status, "%s: %s", what, r.Body)
		require.Contains(t, detail(t, r), id, what)
		require.Empty(t, r.Header.Get("Retry-After"), what)
	}
	conflict("the same body with a new key", body)
	// A gate sends this one the ordinary way (a transaction, not the
	// pipeline): the same answer.
	e.limits(t, asset.BTC, asset.Limits{AutoLimit: n(50_000)})
	conflict("a withdrawal that waits for an operator", map[string]any{"external_user_id": "ref", "asset": "BTC",
		"amount": "60000", "destination_address": p2wpkh(t, chain.Regtest, "ref-2"), "client_reference": "payout-1"})

	n, err := e.App.DB.Bun.NewSelect().Table("withdrawals").Count(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "nothing more was created")
	require.Equal(t, "0.00020000", e.UserBalance(t, "ref", asset.BTC).Held, "only the first is held")

	// Another reference, and none, are free.
	r := e.Post("/v1/withdrawals", map[string]any{"external_user_id": "ref", "asset": "BTC", "amount": "20000",
		"destination_address": p2wpkh(t, chain.Regtest, "ref-3"), "client_reference": "payout-2"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	e.create(t, "ref", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, "ref-4"))
	e.create(t, "ref", asset.BTC, 20_000, p2wpkh(t, chain.Regtest, "ref-5"))
}

// GET /v1/withdrawals?client_reference= finds the one withdrawal, nothing
// for an unknown reference, and requires the parameter and no other.
func TestFindWithdrawalByClientReference(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "find", asset.BTC, 10_000_000)
	r := e.Post("/v1/withdrawals", map[string]any{"external_user_id": "find", "asset": "BTC", "amount": "20000",
		"destination_address": p2wpkh(t, chain.Regtest, "find"), "client_reference": "é/1"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	id := r.Map(t)["withdrawal_id"].(string)

	r = e.Get("/v1/withdrawals?client_reference=%C3%A9%2F1")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var page withdrawal.ListView
	r.JSON(t, &page)
	require.Len(t, page.Withdrawals, 1)
	require.Equal(t, id, page.Withdrawals[0].WithdrawalID)

	r = e.Get("/v1/withdrawals?client_reference=unknown")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.JSONEq(t, `{"withdrawals":[],"next_cursor":null}`, string(r.Body))

	for path, loc := range map[string][]any{
		"/v1/withdrawals": {"query", "client_reference"},
		"/v1/withdrawals?client_reference=x&cursor=abc": {"query", "cursor"},
		"/v1/withdrawals?client_reference=a%00b":        {"query", "client_reference"},
	} {
		r := e.Get(path)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", path, r.Body)
		require.Equal(t, loc, r.FieldErrors(t)[0]["loc"], path)
	}
}

package deposit_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/deposit"
	"svc/platform/btcpay/btcpaysim"
)

// A deposit's metadata and client_reference come back on creation, on its
// GET, in the user's list, in the lookup by reference and in every event
// about it; a deposit without them shows {} and null.
func TestLabelsComeBackEverywhere(t *testing.T) {
	t.Parallel()
	e := setup(t)
	labels := map[string]any{"order_id": "A-1042", "channel": "web", "note": ""}
	r := e.Post("/v1/deposits", map[string]any{"external_user_id": "lab", "asset": "BTC", "expected_amount": "100000",
		"metadata": labels, "client_reference": "order-1042"})
	v := viewOf(t, r, http.StatusCreated)
	requireLabels(t, r.Map(t), labels, "order-1042")
	require.Equal(t, "order-1042", *v.ClientReference)

	requireLabels(t, e.Get("/v1/deposits/"+v.DepositID).Map(t), labels, "order-1042")
	list := e.Get("/v1/users/lab/deposits").Map(t)["deposits"].([]any)
	require.Len(t, list, 1)
	requireLabels(t, list[0].(map[string]any), labels, "order-1042")
	found := e.Get("/v1/deposits?client_reference=order-1042")
	require.Equal(t, http.StatusOK, found.Status, string(found.Body))
	page := found.Map(t)
	require.Nil(t, page["next_cursor"])
	require.Len(t, page["deposits"], 1)
	require.Equal(t, v.DepositID, page["deposits"].([]any)[0].(map[string]any)["deposit_id"])
	requireLabels(t, page["deposits"].([]any)[0].(map[string]any), labels, "order-1042")

	inv := e.invoice(t, v.DepositID)
	paid := e.pay(t, inv.ID, btcpaysim.PayParams{})
	e.reconcileTo(t, v.DepositID, deposit.StatusConfirming)
	require.NoError(t, e.Sim.ConfirmPayment(inv.ID, paid[0].ID))
	e.reconcileTo(t, v.DepositID, deposit.StatusSettled)
	for _, typ := range []string{"deposit.detected", "deposit.settled"} {
		ev := e.events(t, typ, v.DepositID)
		require.Len(t, ev, 1, typ)
		requireLabels(t, ev[0], labels, "order-1042")
	}

	// Without labels: {} and null, on every read and in the events.
	r = e.Post("/v1/deposits", createBody{ExternalUserID: "plain", Asset: "BTC"})
	plain := viewOf(t, r, http.StatusCreated)
	require.Contains(t, string(r.Body), `"metadata":{}`)
	require.Contains(t, string(r.Body), `"client_reference":null`)
	requireLabels(t, e.Get("/v1/deposits/"+plain.DepositID).Map(t), map[string]any{}, nil)
	e.advance(61 * time.Minute)
	e.reconcileTo(t, plain.DepositID, deposit.StatusExpired)
	ev := e.events(t, "deposit.expired", plain.DepositID)
	require.Len(t, ev, 1)
	requireLabels(t, ev[0], map[string]any{}, nil)
}

// requireLabels requires an object's metadata and client_reference (nil
// for null).
func requireLabels(t *testing.T, obj map[string]any, metadata map[string]any, ref any) {
	t.Helper()
	require.Contains(t, obj, "metadata")
	require.Equal(t, metadata, obj["metadata"])
	require.Contains(t, obj, "client_reference")
	require.Equal(t, ref, obj["client_reference"])
}

// Metadata beyond Stripe's limits, or with a value that is not a string,
// is a 422 naming the key, and nothing is created.
func TestBadMetadataIsRefusedNamingTheKey(t *testing.T) {
	t.Parallel()
	e := setup(t)
	many := map[string]any{}
	for i := range 21 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	long := strings.Repeat("x", 41)
	tests := []struct {
		name     string
		body     map[string]any
		loc      []any
		typeWant string
	}{
		{"too many keys", map[string]any{"metadata": many}, []any{"body", "metadata"}, ""},
		{"a 41-character key", map[string]any{"metadata": map[string]any{long: "v"}}, []any{"body", "metadata", long}, "string_too_long"},
		{"an empty key", map[string]any{"metadata": map[string]any{"": "v"}}, []any{"body", "metadata", ""}, "string_too_short"},
		{"a 501-character value", map[string]any{"metadata": map[string]any{"note": strings.Repeat("é", 501)}},
			[]any{"body", "metadata", "note"}, "string_too_long"},
		{"a number value", map[string]any{"metadata": map[string]any{"qty": 3}}, []any{"body", "metadata", "qty"}, "string_type"},
		{"an object value", map[string]any{"metadata": map[string]any{"nested": map[string]any{"a": "b"}}},
			[]any{"body", "metadata", "nested"}, "string_type"},
		{"a NUL in a value", map[string]any{"metadata": map[string]any{"note": "a\u0000b"}}, []any{"body", "metadata", "note"}, "string_type"},
		{"metadata not an object", map[string]any{"metadata": []any{"a"}}, []any{"body", "metadata"}, "object_type"},
		{"an empty client_reference", map[string]any{"client_reference": ""}, []any{"body", "client_reference"}, "string_too_short"},
		{"a 256-character client_reference", map[string]any{"client_reference": strings.Repeat("r", 256)},
			[]any{"body", "client_reference"}, "string_too_long"},
	}
	for _, tt := range tests {
		body := map[string]any{"external_user_id": "bad", "asset": "BTC"}
		for k, v := range tt.body {
			body[k] = v
		}
		r := e.Post("/v1/deposits", body)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", tt.name, r.Body)
		fe := r.FieldErrors(t)
		require.Len(t, fe, 1, "%s: %s", tt.name, r.Body)
		require.Equal(t, tt.loc, fe[0]["loc"], tt.name)
		if tt.typeWant != "" {
			require.Equal(t, tt.typeWant, fe[0]["type"], tt.name)
		}
	}
	require.Equal(t, 0, e.countDeposits(t, "bad"), "nothing was created")
	require.Empty(t, e.Sim.Invoices(), "the processor was not called")
	// The limits themselves are accepted.
	ok := map[string]any{}
	for i := range 20 {
		ok[strings.Repeat("k", 39)+string(rune('a'+i))] = strings.Repeat("é", 500)
	}
	r := e.Post("/v1/deposits", map[string]any{"external_user_id": "bad", "asset": "BTC", "metadata": ok,
		"client_reference": strings.Repeat("r", 255)})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Equal(t, ok, r.Map(t)["metadata"])
}

// A client_reference another deposit has is a 409 naming that deposit,
// with nothing created; the same request with the same Idempotency-Key
// replays the first answer.
func TestClientReferenceIsUniqueAmongDeposits(t *testing.T) {
	t.Parallel()
	e := setup(t)
	body := map[string]any{"external_user_id": "ref", "asset": "BTC", "client_reference": "order-7", "metadata": map[string]any{"a": "b"}}
	first := e.Do(apptest.Req{Method: "POST", Path: "/v1/deposits", Body: body, Idem: "ref-key-1"})
	v := viewOf(t, first, http.StatusCreated)

	replay := e.Do(apptest.Req{Method: "POST", Path: "/v1/deposits", Body: body, Idem: "ref-key-1"})
	require.Equal(t, http.StatusCreated, replay.Status, string(replay.Body))
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, v.DepositID, viewOf(t, replay, http.StatusCreated).DepositID)

	for _, other := range []map[string]any{
		body, // the same body with a new key
		{"external_user_id": "someone-else", "asset": "BTC_LN", "client_reference": "order-7"},
	} {
		r := e.Post("/v1/deposits", other)
		require.Equal(t, http.StatusConflict, r.Status, string(r.Body))
		require.Contains(t, r.Map(t)["detail"], v.DepositID)
		require.Empty(t, r.Header.Get("Retry-After"))
	}
	require.Equal(t, 1, e.countDeposits(t, "ref"))
	require.Equal(t, 0, e.countDeposits(t, "someone-else"))
	require.Len(t, e.Sim.Invoices(), 1, "the processor was called once")

	// Another reference, and none, are free.
	viewOf(t, e.Post("/v1/deposits", map[string]any{"external_user_id": "ref", "asset": "BTC", "client_reference": "order-8"}), http.StatusCreated)
	viewOf(t, e.Post("/v1/deposits", createBody{ExternalUserID: "ref", Asset: "BTC"}), http.StatusCreated)
	viewOf(t, e.Post("/v1/deposits", createBody{ExternalUserID: "ref", Asset: "BTC"}), http.StatusCreated)
}

// GET /v1/deposits?client_reference= finds the one deposit, nothing for
// an unknown reference, and requires the parameter and no other.
func TestFindDepositByClientReference(t *testing.T) {
	t.Parallel()
	e := setup(t)
	v := viewOf(t, e.Post("/v1/deposits", map[string]any{"external_user_id": "find", "asset": "BTC", "client_reference": "inv/2026 #1"}), http.StatusCreated)
	viewOf(t, e.Post("/v1/deposits", map[string]any{"external_user_id": "find", "asset": "BTC", "client_reference": "inv/2026 #2"}), http.StatusCreated)

	var page deposit.ListView
	r := e.Get("/v1/deposits?client_reference=inv%2F2026%20%231")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	r.JSON(t, &page)
	require.Len(t, page.Deposits, 1)
	require.Equal(t, v.DepositID, page.Deposits[0].DepositID)
	require.Nil(t, page.NextCursor)

	r = e.Get("/v1/deposits?client_reference=nobody-has-this")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	require.JSONEq(t, `{"deposits":[],"next_cursor":null}`, string(r.Body))

	for path, loc := range map[string][]any{
		"/v1/deposits":                                              {"query", "client_reference"},
		"/v1/deposits?client_reference=":                            {"query", "client_reference"},
		"/v1/deposits?client_reference=x&limit=5":                   {"query", "limit"},
		"/v1/deposits?client_reference=" + strings.Repeat("r", 256): {"query", "client_reference"},
	} {
		r := e.Get(path)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", path, r.Body)
		require.Equal(t, loc, r.FieldErrors(t)[0]["loc"], path)
	}
}

package app_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/platform/openapi"
)

// TestRequestsFollowTheDocument: requests are checked against the OpenAPI
// document, not against limits restated in Go. A copy of openapi.json
// whose external_user_id may have at most 8 characters makes the service
// refuse a 9-character one, in a body and in a path, with the copy's bound
// in the message; the committed document admits it.
func TestRequestsFollowTheDocument(t *testing.T) {
	t.Parallel()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(openapi.Spec, &doc))
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	schemas["ExternalUserId"].(map[string]any)["maxLength"] = 8
	params := doc["components"].(map[string]any)["parameters"].(map[string]any)
	params["ExternalUserIdPath"].(map[string]any)["schema"].(map[string]any)["maxLength"] = 8
	spec, err := json.Marshal(doc)
	require.NoError(t, err)

	nine := strings.Repeat("n", 9)
	body := map[string]any{"external_user_id": nine, "asset": "BTC", "amount": "1000", "destination_address": "x"}

	e := apptest.New(t, apptest.WithSpec(spec))
	r := e.Post("/v1/withdrawals", body)
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	fe := r.FieldErrors(t)
	require.Len(t, fe, 1, string(r.Body))
	require.Equal(t, []any{"body", "external_user_id"}, fe[0]["loc"])
	require.Equal(t, "string_too_long", fe[0]["type"])
	require.Equal(t, "String should have at most 8 characters", fe[0]["msg"])
	r = e.Get("/v1/users/" + nine + "/deposits")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, []any{"path", "external_user_id"}, r.FieldErrors(t)[0]["loc"])
	require.Equal(t, http.StatusOK, e.Get("/v1/users/"+nine[:8]+"/deposits").Status)

	committed := apptest.New(t)
	r = committed.Post("/v1/withdrawals", body)
	require.NotContains(t, string(r.Body), `"loc":["body","external_user_id"]`, "refused for another reason (the destination, the balance)")
	require.Equal(t, http.StatusOK, committed.Get("/v1/users/"+nine+"/deposits").Status)
}

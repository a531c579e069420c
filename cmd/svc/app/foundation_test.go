package app_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
)

func TestHealthAndAssets(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	r := e.Do(apptest.Req{Method: "GET", Path: "/healthz", Key: "-"})
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, "ok", r.Map(t)["status"])

	r = e.Get("/v1/assets")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var body struct {
		Assets []map[string]any `json:"assets"`
	}
	r.JSON(t, &body)
	require.Len(t, body.Assets, 1, "only BTC is enabled before discovery")
	require.Equal(t, "BTC", body.Assets[0]["asset"])
	require.Equal(t, "0.00010000", body.Assets[0]["withdrawal_min"])
}

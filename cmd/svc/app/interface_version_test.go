package app_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/openapi"
)

// TestInterfaceVersionOnEveryResponse: every response carries
// Svc-Interface-Version, info.version of the embedded openapi.json: a
// success, an error (401, 403, 422), an unknown route (404), a known path
// with another method (405), a body too large (413), the health
// endpoints, the processor's ingress and the document itself.
func TestInterfaceVersionOnEveryResponse(t *testing.T) {
	t.Parallel()
	want, err := openapi.VersionOf(openapi.Spec)
	require.NoError(t, err)
	require.Regexp(t, `^\d+\.\d+\.\d+$`, want)
	sim := btcpaysim.Start(t, btcpaysim.Options{})
	e := apptest.New(t, apptest.WithProcessor(sim, "processor-hook-secret"))
	for _, c := range []struct {
		req    apptest.Req
		status int
	}{
		{apptest.Req{Method: "GET", Path: "/v1/assets"}, http.StatusOK},
		{apptest.Req{Method: "GET", Path: "/v1/assets", Key: "-"}, http.StatusUnauthorized},
		{apptest.Req{Method: "GET", Path: "/v1/admin/withdrawals"}, http.StatusForbidden},
		{apptest.Req{Method: "POST", Path: "/v1/deposits", Body: map[string]any{}}, http.StatusUnprocessableEntity},
		{apptest.Req{Method: "GET", Path: "/v1/no-such-route"}, http.StatusNotFound},
		{apptest.Req{Method: "GET", Path: "/no-such-route", Key: "-"}, http.StatusNotFound},
		{apptest.Req{Method: "DELETE", Path: "/v1/assets"}, http.StatusMethodNotAllowed},
		{apptest.Req{Method: "GET", Path: "/healthz", Key: "-"}, http.StatusOK},
		{apptest.Req{Method: "POST", Path: "/webhooks/processor", Key: "-", Body: "{}"}, http.StatusUnauthorized},
		{apptest.Req{Method: "GET", Path: "/openapi.json", Key: "-"}, http.StatusOK},
	} {
		r := e.Do(c.req)
		require.Equal(t, c.status, r.Status, "%s %s: %s", c.req.Method, c.req.Path, r.Body)
		require.Equal(t, want, r.Header.Get("Svc-Interface-Version"), "%s %s", c.req.Method, c.req.Path)
	}

	// A body too large is refused by the server before any middleware
	// runs, on its declared length. The request is written by hand with
	// no body: a client writing the whole body may still be writing when
	// the server answers and closes, and then sees a reset, not the answer.
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /v1/deposits HTTP/1.1\r\nHost: svc\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		e.App.Cfg.HTTP.BodyLimitBytes+1)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.Equal(t, want, resp.Header.Get("Svc-Interface-Version"), "413")
}

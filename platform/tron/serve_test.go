package tron_test

import (
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// serve runs srv on a loopback listener until the test ends.
func serve(t *testing.T, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

package db_test

import (
	"context"
	"net"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/platform/db"
	"svc/platform/dbtest"
)

// A multi-host DATABASE_URL (the primary and its standbys, with
// target_session_attrs=read-write) is pgx's own: Open passes it through,
// and the pool connects to the host that takes writes, skipping one that
// refuses connections (a dead primary). docs/deployment.md.
func TestOpenWithSeveralHosts(t *testing.T) {
	u, err := url.Parse(dbtest.NewURL(t))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	u.Host = dead + "," + u.Host
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	q.Set("connect_timeout", "3")
	u.RawQuery = q.Encode()

	d, err := db.Open(context.Background(), u.String(), 2)
	require.NoError(t, err)
	defer d.Close()
	require.Len(t, d.Pool.Config().ConnConfig.Fallbacks, 1, "the second host is pgx's fallback")
	var readOnly string
	require.NoError(t, d.Pool.QueryRow(context.Background(), "SHOW transaction_read_only").Scan(&readOnly))
	require.Equal(t, "off", readOnly)
}

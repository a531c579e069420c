package apikey_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/apikey"
	"svc/modules/audit"
	"svc/platform/config"
)

// mint mints a key on e unsigned, as the CLI of a deployment without
// required signatures does.
func mint(t *testing.T, e *apptest.Env, p apikey.MintParams) string {
	t.Helper()
	p.Actor = audit.CLI("test")
	_, plain, err := e.App.Keys.Mint(context.Background(), p)
	require.NoError(t, err)
	return plain
}

// detail is a refusal's detail, which must never hold the key.
func detail(t *testing.T, r *apptest.Response, key string) string {
	t.Helper()
	var b struct {
		Detail string `json:"detail"`
	}
	r.JSON(t, &b)
	require.NotContains(t, string(r.Body), key[len(key)-43:], "a refusal never shows the key's secret")
	return b.Detail
}

// TestReadOnlyKey: a read_only key reads every platform GET (twice: the
// second from the key cache) and is refused with 403 naming the rule on a
// POST and on an admin route, GET or not; readwrite keeps the platform's
// POSTs and is refused the admin routes; admin satisfies both.
func TestReadOnlyKey(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	ro := mint(t, e, apikey.MintParams{Scope: apikey.ScopeReadOnly, Label: "dashboard"})
	for range 2 {
		r := e.Do(apptest.Req{Method: "GET", Path: "/v1/users/alice/balances", Key: ro})
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		r = e.Do(apptest.Req{Method: "GET", Path: "/v1/assets", Key: ro})
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	}
	r := e.Do(apptest.Req{Method: "POST", Path: "/v1/deposits", Key: ro, Body: map[string]any{"external_user_id": "alice", "asset": "BTC"}})
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	require.Equal(t, "this key is read_only: it may only read (GET)", detail(t, r, ro))
	r = e.Do(apptest.Req{Method: "GET", Path: "/v1/admin/withdrawals", Key: ro})
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	require.Equal(t, "this key is read_only: it may only read (GET) the platform routes; this route needs a key of scope admin", detail(t, r, ro))
	r = e.Do(apptest.Req{Method: "POST", Path: "/v1/admin/events/evt_00000000000000000000000000/redeliver", Key: ro, Body: map[string]any{}})
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	require.Equal(t, "this key is read_only: it may only read (GET)", detail(t, r, ro))

	r = e.Do(apptest.Req{Method: "GET", Path: "/v1/admin/withdrawals", Key: e.RW})
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	require.Equal(t, "this key is readwrite: this route needs a key of scope admin", detail(t, r, e.RW))
	require.Equal(t, http.StatusOK, e.AdminGet("/v1/users/alice/balances").Status)
	require.Equal(t, http.StatusOK, e.AdminGet("/v1/admin/withdrawals").Status)
}

// TestKeyAllowedNetworks: a key restricted to networks is accepted from an
// address inside one of them and refused with 403 naming the address and
// the networks from any other; the client is the TCP peer (the tests'
// 127.0.0.1) and X-Forwarded-For is ignored unless the peer is one of
// TRUSTED_PROXIES, and then only its rightmost untrusted entry counts, so
// a spoofed leftmost one is not believed.
func TestKeyAllowedNetworks(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	local := mint(t, e, apikey.MintParams{Scope: apikey.ScopeReadWrite, Label: "local", AllowedCIDRs: []string{"127.0.0.0/8"}})
	office := mint(t, e, apikey.MintParams{Scope: apikey.ScopeReadWrite, Label: "office", AllowedCIDRs: []string{"198.51.100.0/24", "2001:db8::/32"}})
	for range 2 { // the second from the key cache
		r := e.Do(apptest.Req{Method: "GET", Path: "/v1/users/alice/balances", Key: local})
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		// A forwarded address is not believed from a peer no one trusts.
		r = e.Do(apptest.Req{Method: "GET", Path: "/v1/users/alice/balances", Key: office, Header: map[string]string{"X-Forwarded-For": "198.51.100.7"}})
		require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
		require.Equal(t, "this key is not allowed from 127.0.0.1: its allowed networks are 198.51.100.0/24, 2001:db8::/32", detail(t, r, office))
	}
	r := e.Do(apptest.Req{Method: "POST", Path: "/v1/deposits", Key: office, Body: map[string]any{"external_user_id": "alice", "asset": "BTC"}})
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)

	// Behind a trusted proxy (this machine), the address it forwards.
	p := apptest.New(t, apptest.WithConfig(func(c *config.Config) { c.HTTP.TrustedProxies = []string{"127.0.0.1"} }))
	office = mint(t, p, apikey.MintParams{Scope: apikey.ScopeReadWrite, Label: "office", AllowedCIDRs: []string{"198.51.100.0/24"}})
	get := func(xff string) *apptest.Response {
		return p.Do(apptest.Req{Method: "GET", Path: "/v1/users/alice/balances", Key: office, Header: map[string]string{"X-Forwarded-For": xff}})
	}
	r = get("198.51.100.7")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r = get("203.0.113.9")
	require.Equal(t, http.StatusForbidden, r.Status, "%s", r.Body)
	require.Equal(t, "this key is not allowed from 203.0.113.9: its allowed networks are 198.51.100.0/24", detail(t, r, office))
	r = get("198.51.100.7, 203.0.113.9")
	require.Equal(t, http.StatusForbidden, r.Status, "the client wrote the leftmost entry: %s", r.Body)
	require.Contains(t, detail(t, r, office), "not allowed from 203.0.113.9")
	r = p.Do(apptest.Req{Method: "GET", Path: "/v1/users/alice/balances", Key: office})
	require.Equal(t, http.StatusForbidden, r.Status, "no header: the proxy itself is the client: %s", r.Body)
	require.Contains(t, detail(t, r, office), "not allowed from 127.0.0.1")
}

// TestExpiredKey: a key past its expiry is 401, as a revoked one, from
// the cache too.
func TestExpiredKey(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	k := mint(t, e, apikey.MintParams{Scope: apikey.ScopeReadOnly, Label: "brief", ExpiresIn: 2 * time.Second})
	r := e.Do(apptest.Req{Method: "GET", Path: "/v1/assets", Key: k})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	time.Sleep(2100 * time.Millisecond)
	r = e.Do(apptest.Req{Method: "GET", Path: "/v1/assets", Key: k})
	require.Equal(t, http.StatusUnauthorized, r.Status, "%s", r.Body)
	require.Equal(t, "invalid, revoked or expired API key", detail(t, r, k))
}

// TestParseNetworks: an allow-list is canonical CIDRs, an address its own
// network; host bits, garbage and more than 64 are refused.
func TestParseNetworks(t *testing.T) {
	t.Parallel()
	got, err := apikey.ParseNetworks([]string{"10.0.0.0/8", " 203.0.113.9 ", "2001:DB8::/32", "10.0.0.0/8"})
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.0/8", "203.0.113.9/32", "2001:db8::/32"}, got)
	_, err = apikey.ParseNetworks([]string{"10.0.0.1/8"})
	require.ErrorContains(t, err, "did you mean 10.0.0.0/8")
	_, err = apikey.ParseNetworks([]string{"office"})
	require.Error(t, err)
	many := make([]string, 65)
	for i := range many {
		many[i] = "10.0.0.0/8"
	}
	_, err = apikey.ParseNetworks(many)
	require.Error(t, err)
}

// TestScopeAllows: admin ⊇ readwrite ⊇ read_only; read_only reads (GET,
// HEAD) what needs readwrite and writes nothing; an unknown scope allows
// nothing.
func TestScopeAllows(t *testing.T) {
	t.Parallel()
	ro, rw, admin := apikey.ScopeReadOnly, apikey.ScopeReadWrite, apikey.ScopeAdmin
	for _, c := range []struct {
		s, need apikey.Scope
		method  string
		want    bool
	}{
		{admin, admin, "POST", true}, {admin, rw, "POST", true}, {admin, ro, "GET", true},
		{rw, admin, "GET", false}, {rw, rw, "POST", true}, {rw, ro, "GET", true},
		{ro, admin, "GET", false}, {ro, rw, "GET", true}, {ro, rw, "HEAD", true}, {ro, rw, "POST", false},
		{ro, rw, "DELETE", false}, {ro, ro, "GET", true},
		{"root", rw, "GET", false}, {rw, "root", "GET", false},
	} {
		require.Equal(t, c.want, c.s.Allows(c.need, c.method), "%s on a %s route with %s", c.s, c.need, c.method)
	}
}

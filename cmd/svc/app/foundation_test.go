package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/apikey"
	"svc/modules/audit"
	"svc/platform/clock"
	"svc/platform/dbtest"
)

func TestHealthAndAssets(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	r := e.Do(apptest.Req{Method: "GET", Path: "/healthz", Key: "-"})
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, map[string]any{"status": "ok", "database": "ok", "version": "dev"}, r.Map(t))

	r = e.Get("/v1/assets")
	require.Equal(t, http.StatusOK, r.Status, string(r.Body))
	var body struct {
		Assets []map[string]any `json:"assets"`
	}
	r.JSON(t, &body)
	require.Len(t, body.Assets, 1, "only BTC is enabled before discovery")
	require.Equal(t, "BTC", body.Assets[0]["asset"])
	require.Equal(t, "0.00010000", body.Assets[0]["withdrawal_min"])
	require.Equal(t, "sat", body.Assets[0]["unit_name"])
}

func TestHealthzIsUnhealthyWithoutDatabase(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	e.App.DB.Pool.Close()
	r := e.Do(apptest.Req{Method: "GET", Path: "/healthz", Key: "-"})
	require.Equal(t, http.StatusServiceUnavailable, r.Status)
	require.Equal(t, "unhealthy", r.Map(t)["status"])
}

func TestReadyzFollowsTheWorkerHeartbeat(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	r := e.Do(apptest.Req{Method: "GET", Path: "/readyz", Key: "-"})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
	require.Equal(t, "degraded", r.Map(t)["status"])
	require.Contains(t, string(r.Body), `"name":"worker","status":"degraded"`)

	e.StartWorker()
	apptest.Eventually(t, 10*time.Second, func() bool {
		return e.Do(apptest.Req{Method: "GET", Path: "/readyz", Key: "-"}).Status == http.StatusOK
	}, "the worker's first heartbeat")
	r = e.Do(apptest.Req{Method: "GET", Path: "/readyz", Key: "-"})
	require.Equal(t, "ready", r.Map(t)["status"])
	require.Contains(t, string(r.Body), `"name":"schema","status":"ok"`)

	// A migration this build knows that the database has not applied (a
	// deployment that skipped svc migrate) degrades readiness, named.
	owner, err := pgx.Connect(context.Background(), dbtest.OwnerURL(e.App.Cfg.Database.URL))
	require.NoError(t, err)
	defer owner.Close(context.Background())
	_, err = owner.Exec(context.Background(), "DELETE FROM bun_migrations WHERE name = (SELECT max(name) FROM bun_migrations)")
	require.NoError(t, err)
	r = e.Do(apptest.Req{Method: "GET", Path: "/readyz", Key: "-"})
	require.Equal(t, http.StatusServiceUnavailable, r.Status, string(r.Body))
	require.Contains(t, string(r.Body), `"name":"schema","status":"degraded","detail":"the database is not migrated: 1 migration(s) not applied`)
}

func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Now())
	e := apptest.New(t, apptest.WithClock(fake))
	ctx := context.Background()
	actor := audit.CLI("test")
	_, revoked, err := e.App.Keys.Mint(ctx, apikey.MintParams{Scope: apikey.ScopeAdmin, Label: "to revoke", Actor: actor})
	require.NoError(t, err)
	keys, err := e.App.Keys.List(ctx)
	require.NoError(t, err)
	for _, k := range keys {
		if k.Label == "to revoke" {
			_, err := e.App.Keys.Revoke(ctx, k.ID, actor)
			require.NoError(t, err)
		}
	}
	_, expiring, err := e.App.Keys.Mint(ctx, apikey.MintParams{Scope: apikey.ScopeAdmin, Label: "short", ExpiresIn: time.Hour, Actor: actor})
	require.NoError(t, err)
	unknown := "svc_test_" + strings.Repeat("A", 43)

	for _, tc := range []struct {
		name   string
		path   string
		header string // full Authorization header; "" sends none
		want   int
	}{
		{"NoKey", "/v1/assets", "", 401},
		{"NotBearer", "/v1/assets", "Basic " + e.RW, 401},
		{"EmptyBearer", "/v1/assets", "Bearer ", 401},
		{"Malformed", "/v1/assets", "Bearer not-a-key", 401},
		{"WrongPrefix", "/v1/assets", "Bearer abc_test_" + strings.Repeat("A", 43), 401},
		{"Unknown", "/v1/assets", "Bearer " + unknown, 401},
		{"Revoked", "/v1/assets", "Bearer " + revoked, 401},
		{"ReadWriteOnAdmin", "/v1/admin/events", "Bearer " + e.RW, 403},
		{"ReadWriteOnPlatform", "/v1/assets", "Bearer " + e.RW, 200},
		{"AdminOnPlatform", "/v1/assets", "Bearer " + e.Admin, 200},
		{"LowercaseScheme", "/v1/assets", "bearer " + e.RW, 200},
		{"NotYetExpired", "/v1/assets", "Bearer " + expiring, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{}
			if tc.header != "" {
				h["Authorization"] = tc.header
			}
			r := e.Do(apptest.Req{Method: "GET", Path: tc.path, Key: "-", Header: h})
			require.Equal(t, tc.want, r.Status, string(r.Body))
			if tc.want == 401 {
				require.Equal(t, "Bearer", r.Header.Get("WWW-Authenticate"), "a 401 says how to authenticate")
			}
			if tc.want >= 400 {
				detail, ok := r.Map(t)["detail"].(string)
				require.True(t, ok, "body is {detail: string}: %s", r.Body)
				require.NotEmpty(t, detail)
				require.NotContains(t, string(r.Body), e.RW, "a key never comes back")
			}
		})
	}

	t.Run("KeyInQueryStringIsNeverRead", func(t *testing.T) {
		r := e.Do(apptest.Req{Method: "GET", Path: "/v1/assets?api_key=" + e.RW + "&access_token=" + e.RW, Key: "-"})
		require.Equal(t, http.StatusUnauthorized, r.Status)
	})
	t.Run("ExpiredKey", func(t *testing.T) {
		fake.Advance(time.Hour + time.Second)
		r := e.Do(apptest.Req{Method: "GET", Path: "/v1/assets", Key: expiring})
		require.Equal(t, http.StatusUnauthorized, r.Status)
	})
}

// An api trusts a key it found active for API_KEY_CACHE_TTL: a
// revocation made in the process is refused at once, one made elsewhere
// (the CLI, another api) once that time has passed, and never later.
func TestRevokedKeyIsRefusedWithinTheCacheTTL(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Now())
	e := apptest.New(t, apptest.WithClock(fake))
	ttl := e.App.Cfg.APIKeys.CacheTTL
	require.Positive(t, ttl)
	ctx := context.Background()
	actor := audit.CLI("test")
	elsewhere := &apikey.Store{DB: e.App.DB.Bun, Prefix: e.App.Cfg.APIKeys.Prefix, Mode: e.App.Cfg.APIKeys.Mode, Now: fake.Now}
	assets := func(key string) int { return e.Do(apptest.Req{Method: "GET", Path: "/v1/assets", Key: key}).Status }

	mint := func(label string) (apikey.Key, string) {
		k, plain, err := e.App.Keys.Mint(ctx, apikey.MintParams{Scope: apikey.ScopeReadWrite, Label: label, Actor: actor})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, assets(plain)) // read once: now trusted for ttl
		return k, plain
	}

	k, plain := mint("revoked elsewhere")
	_, err := elsewhere.Revoke(ctx, k.ID, actor)
	require.NoError(t, err)
	fake.Advance(ttl / 2)
	require.Equal(t, http.StatusOK, assets(plain), "within the TTL the api has not read the key again")
	fake.Advance(ttl/2 + time.Millisecond)
	require.Equal(t, http.StatusUnauthorized, assets(plain), "after the TTL the revocation is seen")
	fake.Advance(ttl)
	require.Equal(t, http.StatusUnauthorized, assets(plain), "a revoked key is never cached")

	k, plain = mint("revoked here")
	_, err = e.App.Keys.Revoke(ctx, k.ID, actor)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, assets(plain), "the process that revokes forgets the key at once")
}

func TestUnknownRouteIs404WithDetail(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	r := e.Do(apptest.Req{Method: "GET", Path: "/nowhere", Key: "-"})
	require.Equal(t, http.StatusNotFound, r.Status)
	require.Equal(t, map[string]any{"detail": "not found"}, r.Map(t))
}

// TestEmptyUserIs404: an empty user id is no route, and the document says
// so for every user path.
func TestEmptyUserIs404(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	for _, what := range []string{"balances", "transactions", "deposits", "withdrawals"} {
		r := e.Get("/v1/users//" + what)
		require.Equal(t, http.StatusNotFound, r.Status, "%s: %s", what, r.Body)
	}
}

// TestWrongMethodIs405WithAllow: a known path with a method it does not
// serve is 405 naming the methods it does, after authentication.
func TestWrongMethodIs405WithAllow(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	r := e.Do(apptest.Req{Method: "DELETE", Path: "/v1/assets"})
	require.Equal(t, http.StatusMethodNotAllowed, r.Status, string(r.Body))
	require.Equal(t, "GET, HEAD", r.Header.Get("Allow"))
	require.Contains(t, r.Map(t)["detail"], "DELETE is not allowed on /v1/assets")
	r = e.Do(apptest.Req{Method: "DELETE", Path: "/V1/Assets/"})
	require.Equal(t, http.StatusMethodNotAllowed, r.Status, "fiber routes without regard to case or a trailing slash: %s", r.Body)
	r = e.Do(apptest.Req{Method: "GET", Path: "/v1/holds/0b6c2b9e-4f1e-4c9b-8f44-1a2b3c4d5e6f/capture"})
	require.Equal(t, http.StatusMethodNotAllowed, r.Status, string(r.Body))
	require.Equal(t, "POST", r.Header.Get("Allow"))
	r = e.Do(apptest.Req{Method: "DELETE", Path: "/v1/withdrawals"})
	require.Equal(t, http.StatusMethodNotAllowed, r.Status, string(r.Body))
	require.Equal(t, "GET, HEAD, POST", r.Header.Get("Allow"), "the lookup by client_reference and the creation")
	r = e.Do(apptest.Req{Method: "PUT", Path: "/v1/admin/withdrawals/0b6c2b9e-4f1e-4c9b-8f44-1a2b3c4d5e6f/approve", Key: e.Admin})
	require.Equal(t, http.StatusMethodNotAllowed, r.Status, string(r.Body))
	require.Equal(t, "POST", r.Header.Get("Allow"))
	r = e.Do(apptest.Req{Method: "DELETE", Path: "/v1/assets", Key: "-"})
	require.Equal(t, http.StatusUnauthorized, r.Status, "authentication comes first")
}

// TestKeyModeMustMatchTheDeployment: a key of the other mode is not a
// credential (a test key from a staging dump on a live deployment, or the
// reverse: 401), and a test key is not minted into a database that holds
// live keys.
func TestKeyModeMustMatchTheDeployment(t *testing.T) {
	t.Parallel()
	e := apptest.New(t) // API_KEY_MODE=test
	ctx := context.Background()
	live := &apikey.Store{DB: e.App.DB.Bun, Prefix: e.App.Cfg.APIKeys.Prefix, Mode: "live", Now: time.Now}
	_, liveKey, err := live.Mint(ctx, apikey.MintParams{Scope: apikey.ScopeAdmin, Label: "from a live deployment", Actor: audit.CLI("test")})
	require.NoError(t, err)
	r := e.Do(apptest.Req{Method: "GET", Path: "/v1/assets", Key: liveKey})
	require.Equal(t, http.StatusUnauthorized, r.Status, string(r.Body))
	_, err = live.Authenticate(ctx, e.RW)
	require.ErrorIs(t, err, apikey.ErrInvalid, "and a test key on a live deployment")
	_, _, err = e.App.Keys.Mint(ctx, apikey.MintParams{Scope: apikey.ScopeReadWrite, Label: "test", Actor: audit.CLI("test")})
	require.ErrorIs(t, err, apikey.ErrLiveDatabase)
}

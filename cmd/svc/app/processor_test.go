package app_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/config"
	"svc/platform/tron/tronsim"
)

type component struct {
	Name   string  `json:"name"`
	Status string  `json:"status"`
	Detail *string `json:"detail"`
}

func readiness(t *testing.T, e *apptest.Env) (int, map[string]component) {
	t.Helper()
	r := e.Do(apptest.Req{Method: "GET", Path: "/readyz", Key: "-"})
	var body struct {
		Components []component `json:"components"`
	}
	r.JSON(t, &body)
	out := map[string]component{}
	for _, c := range body.Components {
		out[c.Name] = c
	}
	return r.Status, out
}

func TestReadinessOfProcessorAndTronNode(t *testing.T) {
	t.Parallel()
	sim := btcpaysim.Start(t, btcpaysim.Options{})
	node := tronsim.Start(t)
	e := apptest.New(t, apptest.WithWorker(), apptest.WithConfig(func(c *config.Config) {
		c.BTCPay.URL, c.BTCPay.APIKey, c.BTCPay.StoreID, c.BTCPay.WebhookSecret = sim.URL(), sim.APIKey(), sim.StoreID(), "s"
		c.BTCPay.Timeout = 500 * time.Millisecond
		c.Tron.URL, c.Tron.Timeout = node.URL, 500*time.Millisecond
	}))
	apptest.Eventually(t, 10*time.Second, func() bool { s, _ := readiness(t, e); return s == http.StatusOK }, "ready")
	_, comps := readiness(t, e)
	require.Equal(t, "ok", comps["processor"].Status)
	require.Nil(t, comps["processor"].Detail)
	require.Equal(t, "ok", comps["tron_node"].Status)

	for _, mode := range []btcpaysim.DownMode{btcpaysim.DownError, btcpaysim.DownHang} {
		sim.GoDown(mode)
		status, comps := readiness(t, e)
		require.Equal(t, http.StatusServiceUnavailable, status, mode)
		require.Equal(t, "degraded", comps["processor"].Status)
		require.NotNil(t, comps["processor"].Detail)
		require.Contains(t, *comps["processor"].Detail, "unreachable")
		require.NotContains(t, *comps["processor"].Detail, sim.APIKey())
		require.Equal(t, "ok", comps["tron_node"].Status, "one component down is named alone")
		sim.Up()
	}

	node.SetMode(tronsim.Errors)
	status, comps := readiness(t, e)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, "degraded", comps["tron_node"].Status)
	require.Equal(t, "ok", comps["processor"].Status)
	node.SetMode(tronsim.Up)
	status, _ = readiness(t, e)
	require.Equal(t, http.StatusOK, status)
}

func TestReadinessWithAKeyTheProcessorRefuses(t *testing.T) {
	t.Parallel()
	sim := btcpaysim.Start(t, btcpaysim.Options{})
	e := apptest.New(t, apptest.WithConfig(func(c *config.Config) {
		c.BTCPay.URL, c.BTCPay.APIKey, c.BTCPay.StoreID, c.BTCPay.WebhookSecret = sim.URL(), "wrong-key", sim.StoreID(), "s"
	}))
	_, comps := readiness(t, e)
	require.Equal(t, "degraded", comps["processor"].Status)
	require.Contains(t, *comps["processor"].Detail, "401")
}

func TestProcessorOffWithoutURL(t *testing.T) {
	t.Parallel()
	e := apptest.New(t)
	require.Nil(t, e.App.BTCPay)
	require.Nil(t, e.App.Ingress)
	require.Nil(t, e.App.Discovery)
	require.Nil(t, e.App.Tron)
	_, comps := readiness(t, e)
	require.NotContains(t, comps, "processor")
	require.NotContains(t, comps, "tron_node")
}

// TestReadinessIsCachedAndSaysLittle: /readyz needs no key, so a burst of
// it reaches the upstreams once per READYZ_CACHE_TTL, and a failing
// upstream's error text (its host, its message) stays in the logs.
func TestReadinessIsCachedAndSaysLittle(t *testing.T) {
	t.Parallel()
	node := tronsim.Start(t)
	e := apptest.New(t, apptest.WithConfig(func(c *config.Config) {
		c.Tron.URL, c.Tron.Timeout = node.URL, 500*time.Millisecond
		c.HTTP.ReadyzCacheTTL = time.Minute
	}))
	before := node.Calls("/wallet/getnowblock")
	for i := 0; i < 20; i++ {
		readiness(t, e)
	}
	require.Equal(t, 1, node.Calls("/wallet/getnowblock")-before, "one call for twenty requests")

	e2 := apptest.New(t, apptest.WithConfig(func(c *config.Config) {
		c.Tron.URL, c.Tron.Timeout = node.URL, 500*time.Millisecond
	}))
	node.SetMode(tronsim.Errors)
	defer node.SetMode(tronsim.Up)
	status, comps := readiness(t, e2)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, "degraded", comps["tron_node"].Status)
	require.NotContains(t, *comps["tron_node"].Detail, "127.0.0.1", "no upstream address in the anonymous answer")
	require.Contains(t, *comps["tron_node"].Detail, "details in the service's logs")
}

package discovery_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/cmd/svc/app/apptest"
	"svc/modules/asset"
	"svc/modules/discovery"
	"svc/platform/btcpay"
	"svc/platform/btcpay/btcpaysim"
	"svc/platform/config"
	"svc/platform/dbtest"
)

func withSim(sim *btcpaysim.Sim, lightning bool) apptest.Option {
	return apptest.WithConfig(func(c *config.Config) {
		c.BTCPay.URL, c.BTCPay.APIKey, c.BTCPay.StoreID, c.BTCPay.WebhookSecret = sim.URL(), sim.APIKey(), sim.StoreID(), "s"
		c.Chain.LightningEnabled = lightning
	})
}

// listed returns the assets GET /v1/assets shows.
func listed(t *testing.T, e *apptest.Env) []string {
	t.Helper()
	var body struct {
		Assets []struct {
			Asset string `json:"asset"`
		} `json:"assets"`
	}
	r := e.Get("/v1/assets")
	require.Equal(t, 200, r.Status)
	r.JSON(t, &body)
	var out []string
	for _, a := range body.Assets {
		out = append(out, a.Asset)
	}
	return out
}

func TestDiscoveryTurnsUSDTOnAndOff(t *testing.T) {
	t.Parallel()
	sim := btcpaysim.Start(t, btcpaysim.Options{})
	e := apptest.New(t, withSim(sim, true))
	ctx := context.Background()
	require.Equal(t, []string{asset.BTC}, listed(t, e), "USDT and Lightning wait for discovery")

	res, err := e.App.Discovery.Run(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{btcpay.MethodBTCChain, btcpay.MethodBTCLN, btcpay.MethodUSDTTron}, res.Methods)
	require.ElementsMatch(t, []discovery.Change{{Asset: asset.BTCLN, Enabled: true}, {Asset: asset.USDTTRC20, Enabled: true}}, res.Changes)
	require.Equal(t, []string{asset.BTC, asset.BTCLN, asset.USDTTRC20}, listed(t, e))

	// The store drops USDT-TRON and Lightning: one answer without them
	// changes nothing (a store being reconfigured, a partial answer); the
	// third in a row disables both, not deleting them, with an alert each.
	sim.SetPaymentMethods(btcpay.MethodBTCChain)
	for i := 1; i < discovery.DefaultMissesToDisable; i++ {
		res, err = e.App.Discovery.Run(ctx)
		require.NoError(t, err)
		require.Empty(t, res.Changes, "miss %d", i)
		require.Equal(t, []string{asset.BTC, asset.BTCLN, asset.USDTTRC20}, listed(t, e))
	}
	res, err = e.App.Discovery.Run(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []discovery.Change{{Asset: asset.BTCLN, Enabled: false}, {Asset: asset.USDTTRC20, Enabled: false}}, res.Changes)
	n, err := e.App.DB.Bun.NewSelect().Table("operator_alerts").Where("type = 'asset.disabled_by_discovery'").Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.Equal(t, []string{asset.BTC}, listed(t, e))
	a, err := e.App.Assets.Get(ctx, asset.USDTTRC20)
	require.NoError(t, err)
	require.False(t, a.Enabled)

	// And back: a second run with nothing new changes nothing.
	sim.SetPaymentMethods(btcpay.MethodBTCChain, btcpay.MethodUSDTTron)
	res, err = e.App.Discovery.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, []discovery.Change{{Asset: asset.USDTTRC20, Enabled: true}}, res.Changes)
	res, err = e.App.Discovery.Run(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Changes)
	require.Equal(t, []string{asset.BTC, asset.USDTTRC20}, listed(t, e))

	// Without BTC-CHAIN even BTC goes, after the same misses, and not
	// silently.
	sim.SetPaymentMethods(btcpay.MethodUSDTTron)
	for i := 0; i < discovery.DefaultMissesToDisable; i++ {
		_, err = e.App.Discovery.Run(ctx)
		require.NoError(t, err)
	}
	require.Equal(t, []string{asset.USDTTRC20}, listed(t, e))
	n, err = e.App.DB.Bun.NewSelect().Table("operator_alerts").Where("type = 'asset.disabled_by_discovery' AND subject LIKE 'BTC %'").Count(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

func TestLightningNeedsTheDeploymentsOptIn(t *testing.T) {
	t.Parallel()
	sim := btcpaysim.Start(t, btcpaysim.Options{})
	e := apptest.New(t, withSim(sim, false))
	_, err := e.App.Discovery.Run(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{asset.BTC, asset.USDTTRC20}, listed(t, e), "the store has BTC-LN but LIGHTNING_ENABLED is off")
}

func TestProcessorDownChangesNothing(t *testing.T) {
	t.Parallel()
	sim := btcpaysim.Start(t, btcpaysim.Options{})
	e := apptest.New(t, withSim(sim, true), apptest.WithConfig(func(c *config.Config) { c.BTCPay.Timeout = 300 * time.Millisecond }))
	ctx := context.Background()
	_, err := e.App.Discovery.Run(ctx)
	require.NoError(t, err)
	for _, mode := range []btcpaysim.DownMode{btcpaysim.DownError, btcpaysim.DownDrop, btcpaysim.DownHang} {
		sim.GoDown(mode)
		_, err = e.App.Discovery.Run(ctx)
		require.ErrorIs(t, err, btcpay.ErrUnreachable, mode)
		require.Equal(t, []string{asset.BTC, asset.BTCLN, asset.USDTTRC20}, listed(t, e), "a processor that cannot be asked disables nothing")
	}
	sim.Up()
}

func TestWorkerDiscoversAtStart(t *testing.T) {
	t.Parallel()
	sim := btcpaysim.Start(t, btcpaysim.Options{PaymentMethods: []string{btcpay.MethodBTCChain, btcpay.MethodUSDTTron}})
	e := apptest.New(t, withSim(sim, true), apptest.WithWorker())
	apptest.Eventually(t, 15*time.Second, func() bool {
		a, err := e.App.Assets.Get(context.Background(), asset.USDTTRC20)
		return err == nil && a.Enabled
	}, "USDT enabled by the worker's discovery at start")
	require.Equal(t, []string{asset.BTC, asset.USDTTRC20}, listed(t, e))
}

// methods is a fixed store for the cases the simulator does not produce.
type methods struct {
	list []btcpay.StorePaymentMethod
	err  error
}

func (m methods) StorePaymentMethods(context.Context, bool) ([]btcpay.StorePaymentMethod, error) {
	return m.list, m.err
}

func TestMethodIDs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ids  []string
		want map[string]bool
	}{
		{name: "Greenfield2", ids: []string{"BTC-CHAIN", "BTC-LN", "USDT-TRON"},
			want: map[string]bool{asset.BTC: true, asset.BTCLN: true, asset.USDTTRC20: true}},
		{name: "Greenfield1", ids: []string{"BTC", "BTC-LightningNetwork"},
			want: map[string]bool{asset.BTC: true, asset.BTCLN: true, asset.USDTTRC20: false}},
		{name: "OtherCase", ids: []string{"btc-chain", "USDt_TRON"},
			want: map[string]bool{asset.BTC: true, asset.BTCLN: false, asset.USDTTRC20: true}},
		{name: "OtherUSDTNetworksOnly", ids: []string{"BTC-CHAIN", "USDT-ETHEREUM", "USDT-POLYGON"},
			want: map[string]bool{asset.BTC: true, asset.BTCLN: false, asset.USDTTRC20: false}},
		{name: "LNURLIsNotLightning", ids: []string{"BTC-CHAIN", "BTC-LNURL"},
			want: map[string]bool{asset.BTC: true, asset.BTCLN: false, asset.USDTTRC20: false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := dbtest.New(t)
			store := &asset.Store{DB: d.Bun, Now: time.Now}
			var list []btcpay.StorePaymentMethod
			for _, id := range tc.ids {
				list = append(list, btcpay.StorePaymentMethod{PaymentMethodID: id, Enabled: true})
			}
			svc := &discovery.Service{Processor: methods{list: list}, Assets: store, LightningEnabled: true}
			_, err := svc.Run(context.Background())
			require.NoError(t, err)
			for code, on := range tc.want {
				a, err := store.Get(context.Background(), code)
				require.NoError(t, err)
				require.Equal(t, on, a.Enabled, code)
			}
		})
	}
	t.Run("Error", func(t *testing.T) {
		t.Parallel()
		d := dbtest.New(t)
		store := &asset.Store{DB: d.Bun, Now: time.Now}
		boom := errors.New("boom")
		_, err := (&discovery.Service{Processor: methods{err: boom}, Assets: store}).Run(context.Background())
		require.ErrorIs(t, err, boom)
		a, err := store.Get(context.Background(), asset.BTC)
		require.NoError(t, err)
		require.True(t, a.Enabled)
	})
}

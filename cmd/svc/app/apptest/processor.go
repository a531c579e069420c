package apptest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"svc/platform/btcpay/btcpaysim"
	"svc/platform/config"
)

// WithProcessor points the service at a simulated processor: its URL, API
// key and store, with secret as the processor's webhook secret.
func WithProcessor(sim *btcpaysim.Sim, secret string) Option {
	return WithConfig(func(c *config.Config) {
		c.BTCPay.URL, c.BTCPay.APIKey, c.BTCPay.StoreID, c.BTCPay.WebhookSecret = sim.URL(), sim.APIKey(), sim.StoreID(), secret
	})
}

// EnableAssets turns the assets on as discovery would when the processor's
// store offers them, failing the test on error.
func (e *Env) EnableAssets(codes ...string) {
	e.T.Helper()
	for _, code := range codes {
		_, err := e.App.Assets.SetEnabled(context.Background(), code, true)
		require.NoError(e.T, err)
	}
}

// CheckAtEnd runs check when the test ends, unless the test has already
// failed: the closing check of a scenario (its books, say), which would
// only repeat an earlier failure.
func CheckAtEnd(t testing.TB, check func(testing.TB)) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			check(t)
		}
	})
}

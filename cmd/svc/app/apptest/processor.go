package apptest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/platform/btcpay/btcpaysim"
	"svc/platform/clock"
	"svc/platform/config"
)

// StartProcessor starts a simulated processor with o's options on a fake
// clock set to the current second, which moves only when the test
// advances it and ticks the processor only when told (Sim.Tick). Pass the
// clock to WithClock and the processor to WithProcessor so that the
// service shares both.
func StartProcessor(t testing.TB, o btcpaysim.Options) (*btcpaysim.Sim, *clock.Fake) {
	t.Helper()
	fake := clock.NewFake(time.Now().UTC().Truncate(time.Second))
	o.Now, o.TickEvery = fake.Now, -1
	return btcpaysim.Start(t, o), fake
}

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

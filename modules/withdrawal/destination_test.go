package withdrawal_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/modules/withdrawal"
	"svc/platform/chain"
	"svc/platform/config"
)

// TestBTCDestinationNetworks: each network setting accepts its own
// addresses of every kind (bech32, bech32m taproot, base58check) and
// refuses the others' with a 422 that names the network, and nothing is
// reserved by a refusal.
func TestBTCDestinationNetworks(t *testing.T) {
	t.Parallel()
	nets := map[string]chain.Network{"mainnet": chain.Mainnet, "testnet": chain.Testnet, "regtest": chain.Regtest}
	for name, net := range nets {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, func(c *config.Config) { c.Chain.Network = name })
			e.fund(t, "u", asset.BTC, 10_000_000)
			for _, dest := range []string{p2wpkh(t, net, name), p2tr(t, net, name), p2pkh(t, net, name), p2sh(t, net, name),
				strings.ToUpper(p2wpkh(t, net, name+"upper"))} {
				w := e.create(t, "u", asset.BTC, 20_000, dest)
				want := dest
				if strings.Contains(strings.ToLower(dest), "1") && (strings.HasPrefix(strings.ToLower(dest), "bc") || strings.HasPrefix(strings.ToLower(dest), "tb")) {
					want = strings.ToLower(dest) // bech32 is stored in its canonical lower case
				}
				require.Equal(t, want, w.DestinationAddress)
			}
			for other, on := range nets {
				if other == name {
					continue
				}
				for _, dest := range []string{p2wpkh(t, on, other), p2tr(t, on, other)} {
					r := e.request("u", asset.BTC, 20_000, dest)
					require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s address on %s: %s", other, name, r.Body)
					require.Contains(t, detail(t, r), "this deployment uses "+name)
				}
			}
			if name != "mainnet" {
				r := e.request("u", asset.BTC, 20_000, p2pkh(t, chain.Mainnet, "m"))
				require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
			} else {
				r := e.request("u", asset.BTC, 20_000, p2pkh(t, chain.Testnet, "t"))
				require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
			}
		})
	}
}

// TestBTCDestinationTypos: a mistyped character fails the checksum (422),
// whatever the encoding; anything that is not a BTC address is 422 too.
func TestBTCDestinationTypos(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTC, 1_000_000)
	for _, good := range []string{p2wpkh(t, chain.Regtest, "typo"), p2tr(t, chain.Regtest, "typo"), p2pkh(t, chain.Regtest, "typo")} {
		i := len(good) - 3
		c := byte('q')
		if good[i] == c {
			c = 'p'
		}
		if !strings.HasPrefix(good, "bcrt") {
			c = 'A'
			if good[i] == c {
				c = 'B'
			}
		}
		bad := good[:i] + string(c) + good[i+1:]
		r := e.request("u", asset.BTC, 20_000, bad)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", bad, r.Body)
		require.Contains(t, detail(t, r), "checksum")
	}
	for _, bad := range []string{"hello", tron("btc"), "0x52908400098527886E0F7030069857D2E4169EE7", " " + p2wpkh(t, chain.Regtest, "x")} {
		r := e.request("u", asset.BTC, 20_000, bad)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", bad, r.Body)
		detail(t, r)
	}
	require.Equal(t, "0.00000000", e.UserBalance(t, "u", asset.BTC).Held)
}

// TestOwnDepositAddressRefused: an address the service issued for a
// deposit is never a withdrawal destination, in any case.
func TestOwnDepositAddressRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTC, 1_000_000)
	r := e.Post("/v1/deposits", map[string]any{"external_user_id": "other", "asset": "BTC"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	addr := r.Map(t)["address"].(string)
	for _, dest := range []string{addr, strings.ToUpper(addr)} {
		r = e.request("u", asset.BTC, 20_000, dest)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
		require.Contains(t, detail(t, r), "own deposit addresses")
	}
}

// TestUSDTDestination: a base58check TRON address is accepted (and waits
// for an operator); 0x, hex, typos and the pool's and hot wallet's own
// addresses are 422.
func TestUSDTDestination(t *testing.T) {
	t.Parallel()
	hot := tron("hot wallet")
	e := setup(t, func(c *config.Config) { c.Tron.HotWallet = hot })
	e.fund(t, "u", asset.USDTTRC20, 500_000_000)
	w := e.create(t, "u", asset.USDTTRC20, 20_000_000, tron("dest"))
	require.Equal(t, withdrawal.StatusPendingApproval, w.Status)
	good := tron("dest2")
	typo := good[:10] + map[bool]string{true: "B", false: "A"}[good[10] == 'A'] + good[11:]
	for _, tc := range []struct{ dest, want string }{
		{"0x52908400098527886E0F7030069857D2E4169EE7", "Ethereum-style"},
		{"41" + strings.Repeat("ab", 20), "hex form"},
		{typo, "checksum"},
		{e.Sim.TronPool()[0], "own deposit addresses"},
		{hot, "hot wallet"},
		{p2wpkh(t, chain.Regtest, "x"), ""},
	} {
		r := e.request("u", asset.USDTTRC20, 20_000_000, tc.dest)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", tc.dest, r.Body)
		require.Contains(t, detail(t, r), tc.want, tc.dest)
	}
}

// TestLightningDestination: a BOLT11 invoice for this network with at
// least two minutes of life and an amount equal to the net (gross minus
// the flat fee under deduct) or none is accepted; expired, expiring in 60
// seconds, another network's, and a wrong amount are 422.
func TestLightningDestination(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.fund(t, "u", asset.BTCLN, 1_000_000)
	now := e.Clock.Now()
	const gross, fee = 50_000, 10 // BTC_LN's default flat fee is 10 sat
	w := e.create(t, "u", asset.BTCLN, gross, bolt11(t, chain.Regtest, now, gross-fee, time.Hour))
	require.Equal(t, withdrawal.StatusApproved, w.Status)
	e.create(t, "u", asset.BTCLN, gross, bolt11(t, chain.Regtest, now, 0, time.Hour))
	e.create(t, "u", asset.BTCLN, gross, bolt11(t, chain.Regtest, now.Add(-50*time.Minute), 0, time.Hour)) // 10 minutes left
	for _, tc := range []struct {
		name, dest, want string
	}{
		{"expired", bolt11(t, chain.Regtest, now.Add(-2*time.Hour), 0, time.Hour), "expired"},
		{"expiring in 60 s", bolt11(t, chain.Regtest, now.Add(-59*time.Minute), 0, time.Hour), "less than 2 minutes left"},
		{"mainnet invoice", bolt11(t, chain.Mainnet, now, 0, time.Hour), "invoice is for mainnet"},
		{"testnet invoice", bolt11(t, chain.Testnet, now, 0, time.Hour), "invoice is for testnet"},
		{"gross amount", bolt11(t, chain.Regtest, now, gross, time.Hour), "invoice is for 50000 sat, but 49990 sat would be paid"},
		{"other amount", bolt11(t, chain.Regtest, now, 1234, time.Hour), "send an invoice for 49990 sat"},
		{"an address", p2wpkh(t, chain.Regtest, "ln"), ""},
		{"garbage", "lnbcrt1garbage", ""},
	} {
		r := e.request("u", asset.BTCLN, gross, tc.dest)
		require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%s: %s", tc.name, r.Body)
		require.Contains(t, detail(t, r), tc.want, tc.name)
	}
	require.Equal(t, "0.00150000", e.UserBalance(t, "u", asset.BTCLN).Held)
}

// TestAbsorbMode: under WITHDRAWAL_FEE_MODE=absorb the net is the gross,
// so a BOLT11 invoice must be for the gross, and dust is judged on it.
func TestAbsorbMode(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *config.Config) { c.Payouts.FeeMode = "absorb" })
	e.fund(t, "u", asset.BTCLN, 1_000_000)
	e.fund(t, "u", asset.BTC, 1_000_000)
	now := e.Clock.Now()
	e.create(t, "u", asset.BTCLN, 50_000, bolt11(t, chain.Regtest, now, 50_000, time.Hour))
	r := e.request("u", asset.BTCLN, 50_000, bolt11(t, chain.Regtest, now, 49_990, time.Hour))
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	e.limits(t, asset.BTC, asset.Limits{Min: n(0)})
	r = e.request("u", asset.BTC, 546, p2wpkh(t, chain.Regtest, "absorb"))
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	e.create(t, "u", asset.BTC, 547, p2wpkh(t, chain.Regtest, "absorb"))
}

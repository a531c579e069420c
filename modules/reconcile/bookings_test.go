package reconcile_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"svc/modules/asset"
	"svc/platform/chain"
	"svc/platform/chain/chaintest"
)

// float books the service's own float: units put into the asset's wallet
// (the caller), booked as custody and fee income through the admin
// corrections endpoint.
func (e *env) float(t *testing.T, code string, units string) {
	t.Helper()
	r := e.AdminPost("/v1/admin/ledger/corrections", map[string]any{"asset": code, "memo": "the service's own float",
		"lines": []any{
			map[string]any{"account": "custody", "direction": "debit", "amount": units},
			map[string]any{"account": "fee_income", "direction": "credit", "amount": units},
		}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
}

// TestChannelOpenBooked: a Lightning channel opened from the on-chain
// wallet moves money from the BTC wallet to the BTC_LN node. Unbooked, the
// report shows BTC short (insolvent) and BTC_LN long; once the transfer is
// booked, both custody lines match their chain to the sat, the transfer
// counts towards BTC's backing, and the report is healthy again.
func TestChannelOpenBooked(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.deposit(t, "ann", asset.BTC, 5_000_000)
	e.deposit(t, "ann", asset.BTCLN, 500_000)
	require.NoError(t, e.Sim.SetWalletBalance("0.05010000", "0"))
	e.float(t, asset.BTC, "10000") // pays the funding transaction's fee
	rep := e.report(t)
	require.True(t, rep.Healthy, "%+v", rep)

	require.NoError(t, e.Sim.OpenChannel(1_000_000, 250))
	rep = e.report(t)
	require.False(t, rep.Healthy)
	require.Equal(t, "-0.01000250", *line(t, rep, asset.BTC).Difference)
	require.True(t, line(t, rep, asset.BTC).Insolvent)
	require.Equal(t, "0.01000000", *line(t, rep, asset.BTCLN).Difference)

	r := e.AdminPost("/v1/admin/ledger/transfers", map[string]any{"from": "BTC", "to": "BTC_LN", "amount": "1000000", "network_fee": "250",
		"reference": "fundingtxid:0", "memo": "channel to the hub, opened from the on-chain wallet"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))

	rep = e.report(t)
	require.True(t, rep.Healthy, "%+v", rep)
	for _, code := range []string{asset.BTC, asset.BTCLN} {
		l := line(t, rep, code)
		require.Equal(t, "0.00000000", *l.Difference, "%s: %+v", code, l)
		require.False(t, l.Insolvent, code)
	}
	require.Equal(t, "0.01000000", line(t, rep, asset.BTC).LedgerTransfer)
	require.Equal(t, "-0.01000000", line(t, rep, asset.BTCLN).LedgerTransfer)
	require.Equal(t, "0.04009750", line(t, rep, asset.BTC).LedgerCustody)
	require.Equal(t, "0.01500000", line(t, rep, asset.BTCLN).LedgerCustody)
}

// TestRoutingFeeBooked: a routed Lightning payout pays its route a fee the
// processor does not report. The report then shows BTC_LN's node short of
// the ledger's custody, report after report; the operator books the fee
// (a correction: network_fees debited, custody credited) and the next
// report is healthy, the custody line matching the node to the sat.
func TestRoutingFeeBooked(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.deposit(t, "ann", asset.BTCLN, 500_000)
	e.Sim.SetLightningBalance((500_000 + 5_000) * 1000)
	e.float(t, asset.BTCLN, "5000")
	require.True(t, e.report(t).Healthy)

	e.Sim.SetLightningRoutingFee(12_000) // 12 sat
	ln := e.withdraw(t, "ann", asset.BTCLN, 20_000, chaintest.BOLT11(t, chain.Regtest, e.Clock.Now(), 0, 2*time.Hour))
	e.pass(t)
	e.completePayout(t, ln)
	e.pass(t)
	e.requireStatus(t, ln, "confirmed")

	for range 2 { // it does not go away by itself
		rep := e.report(t)
		require.False(t, rep.Healthy)
		require.Equal(t, "-0.00000012", *line(t, rep, asset.BTCLN).Difference)
		require.False(t, line(t, rep, asset.BTCLN).Insolvent)
		require.Contains(t, strings.Join(rep.Alerts, "\n"), "BTC_LN: the chain holds 0.00000012 less than the ledger's custody")
	}

	r := e.AdminPost("/v1/admin/ledger/corrections", map[string]any{"asset": "BTC_LN", "memo": "routing fee of withdrawal " + ln,
		"reference": "routing-fee:" + ln, "lines": []any{
			map[string]any{"account": "network_fees", "direction": "debit", "amount": "12"},
			map[string]any{"account": "custody", "direction": "credit", "amount": "12"},
		}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	rep := e.report(t)
	require.True(t, rep.Healthy, "%+v", rep)
	require.Equal(t, "0.00000000", *line(t, rep, asset.BTCLN).Difference)
}

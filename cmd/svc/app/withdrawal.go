package app

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"svc/modules/ledger"
	"svc/modules/withdrawal"
	"svc/platform/chain"
)

// withdrawalArea holds the withdrawal module: requests, reads and the
// operators' decisions, which a.Operators verifies (signed decisions,
// four-eyes by operators). It is initialised after the processor area,
// whose client gives the BTC fee rate, and the audit area, which makes
// a.Operators.
type withdrawalArea struct {
	Withdrawals *withdrawal.Service
}

func (a *App) initWithdrawals(context.Context) error {
	c := a.Cfg
	n, err := chain.ParseNetwork(c.Chain.Network)
	if err != nil {
		return fmt.Errorf("BITCOIN_NETWORK: %w", err)
	}
	if c.Tron.HotWallet != "" {
		if _, err := chain.ParseTronAddress(c.Tron.HotWallet); err != nil {
			return fmt.Errorf("TRON_HOT_WALLET: %q: %w", c.Tron.HotWallet, err)
		}
	}
	a.Withdrawals = &withdrawal.Service{
		DB: a.DB.Bun, Events: a.Events, Alerts: a.Alerts, Operators: a.Operators, Now: a.Clock.Now, Log: a.Log,
		Config: withdrawal.Config{
			Network: n, FeeMode: ledger.FeeMode(c.Payouts.FeeMode), AssumedTxVBytes: int64(c.Payouts.AssumedTxVBytes),
			FeeRateTTL: c.Payouts.FeeRateTTL, USDTPool: c.Deposits.USDTPool, HotWallet: c.Tron.HotWallet,
			// A claim outlives the lookup, the create and the second lookup
			// it covers, each bounded by BTCPAY_TIMEOUT.
			ClaimTTL:        4 * c.BTCPay.Timeout,
			LNPayoutTimeout: time.Duration(c.Payouts.LNPayoutTimeoutSeconds) * time.Second,
		},
	}
	// Not a nil *btcpay.Client in the interface: that would not compare
	// equal to nil.
	if a.BTCPay != nil {
		a.Withdrawals.Fees, a.Withdrawals.Processor = a.BTCPay, a.BTCPay
	}
	if a.Ingress != nil {
		a.Ingress.Payouts = a.Withdrawals
	}
	if a.Tron != nil {
		a.Withdrawals.Tron = a.Tron
	}
	return nil
}

// routesWithdrawals registers the withdrawal endpoints (docs/withdrawals.md).
func (a *App) routesWithdrawals(r Routers) {
	a.Withdrawals.Routes(r.Checked(r.Platform), r.Checked(r.Admin), r.Idem, r.ClaimIn)
}

// jobsWithdrawals adds the payout work (when a processor is configured)
// and the confirmation of USDT_TRC20 transfers reported with
// mark-broadcast (when a TRON node is configured).
func (a *App) jobsWithdrawals(j *Jobs) error {
	if a.BTCPay != nil {
		river.AddWorker(j.Workers, &withdrawal.PayoutsWorker{Service: a.Withdrawals})
		j.AddPeriodic(a.Cfg.Payouts.PollInterval, withdrawal.PayoutsArgs{})
		j.Recovery = append(j.Recovery, withdrawal.PayoutsArgs{})
	}
	if a.Tron == nil {
		return nil
	}
	river.AddWorker(j.Workers, &withdrawal.ConfirmUSDTWorker{Service: a.Withdrawals})
	j.AddPeriodic(withdrawal.USDTConfirmEvery, withdrawal.ConfirmUSDTArgs{})
	return nil
}

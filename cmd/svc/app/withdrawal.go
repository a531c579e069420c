package app

import (
	"context"
	"fmt"

	"github.com/riverqueue/river"

	"svc/jobs"
	"svc/modules/ledger"
	"svc/modules/withdrawal"
	"svc/platform/chain"
)

// withdrawalArea holds the withdrawal module: requests, reads and the
// operators' decisions. It is initialised after the processor area, whose
// client gives the BTC fee rate.
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
		DB: a.DB.Bun, Events: a.Events, Alerts: a.Alerts, Now: a.Clock.Now, Log: a.Log,
		Config: withdrawal.Config{
			Network: n, FeeMode: ledger.FeeMode(c.Payouts.FeeMode), AssumedTxVBytes: int64(c.Payouts.AssumedTxVBytes),
			FeeRateTTL: c.Payouts.FeeRateTTL, USDTPool: c.Deposits.USDTPool, HotWallet: c.Tron.HotWallet,
		},
	}
	// Not a nil *btcpay.Client in the interface: that would not compare
	// equal to nil.
	if a.BTCPay != nil {
		a.Withdrawals.Fees = a.BTCPay
	}
	if a.Tron != nil {
		a.Withdrawals.Tron = a.Tron
	}
	return nil
}

// routesWithdrawals registers the withdrawal endpoints (docs/withdrawals.md).
func (a *App) routesWithdrawals(r Routers) { a.Withdrawals.Routes(r.Platform, r.Admin, r.Idem) }

// jobsWithdrawals adds the confirmation of USDT_TRC20 transfers reported
// with mark-broadcast (when a TRON node is configured). Payout submission
// through the processor is the next step.
func (a *App) jobsWithdrawals(j *Jobs) error {
	if a.Tron == nil {
		return nil
	}
	river.AddWorker(j.Workers, &withdrawal.ConfirmUSDTWorker{Service: a.Withdrawals})
	j.Periodic = append(j.Periodic, jobs.Periodic(withdrawal.USDTConfirmEvery, withdrawal.ConfirmUSDTArgs{}))
	return nil
}

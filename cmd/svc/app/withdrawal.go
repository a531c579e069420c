package app

import (
	"context"
	"fmt"

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
		DB: a.DB.Bun, Events: a.Events, Now: a.Clock.Now, Log: a.Log,
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
	return nil
}

// routesWithdrawals registers the withdrawal endpoints (docs/withdrawals.md).
func (a *App) routesWithdrawals(r Routers) { a.Withdrawals.Routes(r.Platform, r.Admin, r.Idem) }

// jobsWithdrawals adds nothing yet: payout submission is the next step.
func (a *App) jobsWithdrawals(*Jobs) error { return nil }

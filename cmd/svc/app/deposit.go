package app

import (
	"context"
	"fmt"

	"github.com/riverqueue/river"

	"svc/modules/deposit"
	"svc/platform/chain"
)

// depositArea holds the deposit module: creation, reconciliation (the
// ingress's invoice events and the poller), the review queue and the wallet
// scan. It is initialised after the processor area, whose client it uses
// and whose ingress it receives invoice events from.
type depositArea struct {
	Deposits *deposit.Service
}

func (a *App) initDeposits(context.Context) error {
	c := a.Cfg
	for _, addr := range c.Deposits.USDTPool {
		if _, err := chain.ParseTronAddress(addr); err != nil {
			return fmt.Errorf("USDT_POOL_ADDRESSES: %q: %w", addr, err)
		}
	}
	a.Deposits = &deposit.Service{
		DB: a.DB.Bun, Events: a.Events, Alerts: a.Alerts, Now: a.Clock.Now, Log: a.Log, Operators: a.Operators,
		Config: deposit.Config{
			ExpirationMinutes: c.Deposits.ExpirationMinutes, MonitoringMinutes: c.Deposits.MonitoringMinutes,
			SpeedPolicy: c.BTCPay.SpeedPolicy, USDTPool: c.Deposits.USDTPool, USDTPoolGrace: c.Deposits.USDTPoolGrace,
			USDTTolerancePPM: c.Deposits.USDTTolerancePPM,
		},
	}
	// Without BTCPAY_URL the processor area has no client: creation answers
	// 503 and nothing is reconciled. (Not a nil *btcpay.Client in the
	// interface: that would not compare equal to nil.)
	if a.BTCPay != nil {
		a.Deposits.Processor = a.BTCPay
	}
	if a.Ingress != nil {
		a.Ingress.Invoices = a.Deposits
	}
	if a.BTCPay != nil && len(c.Deposits.USDTPool) == 0 {
		a.Log.Warn("USDT_POOL_ADDRESSES is not set: USDT deposits are limited only by the processor's own pool")
	}
	return nil
}

// routesDeposits registers the deposit endpoints (docs/deposits.md).
func (a *App) routesDeposits(r Routers) {
	a.Deposits.Routes(r.Checked(r.Platform), r.Checked(r.Admin), r.Idem)
}

// jobsDeposits adds the poller, the USDT pool release and the wallet scan.
func (a *App) jobsDeposits(j *Jobs) error {
	river.AddWorker(j.Workers, &deposit.PollWorker{Service: a.Deposits})
	river.AddWorker(j.Workers, &deposit.PoolReleaseWorker{Service: a.Deposits})
	river.AddWorker(j.Workers, &deposit.WalletScanWorker{Service: a.Deposits})
	j.AddPeriodic(a.Cfg.Worker.DepositPollEvery, deposit.PollArgs{})
	j.Recovery = append(j.Recovery, deposit.PollArgs{})
	j.AddPeriodic(deposit.PoolReleaseEvery, deposit.PoolReleaseArgs{})
	j.AddPeriodic(a.Cfg.Worker.WalletScanEvery, deposit.WalletScanArgs{})
	return nil
}

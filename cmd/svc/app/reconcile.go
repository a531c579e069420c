package app

import (
	"context"

	"github.com/riverqueue/river"

	"svc/modules/deposit"
	"svc/modules/health"
	"svc/modules/hold"
	"svc/modules/ledger"
	"svc/modules/reconcile"
	"svc/modules/transfer"
	"svc/modules/withdrawal"
)

// reconcileArea holds the ledger and custody reconciliation: the report
// (GET /v1/admin/reconciliation), the hourly job that stores it and halts
// an insolvent asset's withdrawals, the gas check, and /readyz's
// reconciliation component. It is initialised after the processor area,
// whose clients read the balances.
type reconcileArea struct {
	Reconcile *reconcile.Service
	liabilitiesArea
}

// LedgerChecks are the modules' checks that the ledger check runs beside
// its own, in its snapshot: holds against open withdrawals, transfer
// entries against their legs, escrow against open holds, the platform
// accounts' shard sweeps against their shards. svc admin ledger
// check and the reconciliation run the same list.
var LedgerChecks = []ledger.WithdrawalCheck{withdrawal.CheckHolds, transfer.CheckLegs, hold.CheckEscrow, ledger.CheckSweeps}

func (a *App) initReconcile(context.Context) error {
	c := a.Cfg
	a.initLiabilities()
	custody := append([]string(nil), c.Deposits.USDTPool...)
	if c.Tron.HotWallet != "" {
		custody = append(custody, c.Tron.HotWallet)
	}
	a.Reconcile = &reconcile.Service{DB: a.DB.Bun, Alerts: a.Alerts, Now: a.Clock.Now, Log: a.Log,
		Checks: LedgerChecks, Credits: deposit.CheckCredits, Leaving: withdrawal.LeavingCustody,
		Liabilities: a.Liabilities,
		Config: reconcile.Config{USDTAddresses: custody, HotWallet: c.Tron.HotWallet,
			TRXAlertThreshold: c.Tron.TRXAlertThreshold * 1_000_000, SourceTimeout: max(c.BTCPay.Timeout, c.Tron.Timeout),
			FullCheckEvery: c.Ledger.FullCheckInterval}}
	// Not a nil pointer in an interface: that would not compare equal to
	// nil.
	if a.BTCPay != nil {
		a.Reconcile.Wallet = a.BTCPay
	}
	if a.Tron != nil {
		a.Reconcile.Tron = a.Tron
	}
	a.Health.Checks = append(a.Health.Checks, health.Check{Name: "reconciliation", Run: a.Reconcile.Halts})
	return nil
}

// routesReconcile registers GET /v1/admin/reconciliation, and the proof
// of liabilities' routes.
func (a *App) routesReconcile(r Routers) {
	a.Reconcile.Routes(r.Checked(r.Admin))
	a.routesLiabilities(r)
}

// jobsReconcile adds the hourly reconciliation and the gas check (every 15
// minutes, when a TRON node and the hot wallet are configured).
func (a *App) jobsReconcile(j *Jobs) error {
	river.AddWorker(j.Workers, &reconcile.RunWorker{Service: a.Reconcile})
	j.AddPeriodic(reconcile.Every, reconcile.RunArgs{})
	if a.Tron != nil && a.Cfg.Tron.HotWallet != "" {
		river.AddWorker(j.Workers, &reconcile.GasWorker{Service: a.Reconcile})
		j.AddPeriodic(reconcile.GasEvery, reconcile.GasArgs{})
	}
	return nil
}

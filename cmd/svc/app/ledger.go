package app

import (
	"context"

	"svc/modules/ledger"
)

// ledgerArea holds the ledger's HTTP API. The ledger's posting functions
// are package functions (ledger.Post, ledger.CreditDeposit, ...) that other
// areas call inside their own transactions; they need no wiring.
type ledgerArea struct {
	LedgerAPI *ledger.API
}

func (a *App) initLedger(context.Context) error {
	a.LedgerAPI = &ledger.API{DB: a.DB.Bun}
	return nil
}

// routesLedger registers GET /v1/users/{external_user_id}/balances and
// /transactions.
func (a *App) routesLedger(r Routers) { a.LedgerAPI.Routes(r.Platform) }

// jobsLedger adds nothing: the ledger check runs inside the hourly
// reconciliation (ledger.Check) and on demand (svc admin ledger check).
func (a *App) jobsLedger(*Jobs) error { return nil }

package app

import "context"

// ledgerArea holds the ledger area's modules (filled in by that area's work).
type ledgerArea struct{}

func (a *App) initLedger(ctx context.Context) error { return nil }

func (a *App) routesLedger(r Routers) {}

func (a *App) jobsLedger(j *Jobs) error { return nil }

package app

import "context"

// depositArea holds the deposit area's modules (filled in by that area's work).
type depositArea struct{}

func (a *App) initDeposits(ctx context.Context) error { return nil }

func (a *App) routesDeposits(r Routers) {}

func (a *App) jobsDeposits(j *Jobs) error { return nil }

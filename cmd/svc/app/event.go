package app

import "context"

// eventArea holds the event area's modules (filled in by that area's work).
type eventArea struct{}

func (a *App) initEvents(ctx context.Context) error { return nil }

func (a *App) routesEvents(r Routers) {}

func (a *App) jobsEvents(j *Jobs) error { return nil }

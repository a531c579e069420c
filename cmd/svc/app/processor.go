package app

import "context"

// processorArea holds the processor area's modules (filled in by that area's work).
type processorArea struct{}

func (a *App) initProcessor(ctx context.Context) error { return nil }

func (a *App) routesProcessor(r Routers) {}

func (a *App) jobsProcessor(j *Jobs) error { return nil }

// routesProcessorPublic registers routes that need no API key (the ingress
// webhook).
func (a *App) routesProcessorPublic(r Routers) {}
